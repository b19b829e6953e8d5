//! Builds every Rust guest component of the workspace for `wasm32-wasip2` (profile `guest`) into
//! `target/guests/`, and writes `guests.rs` with one `pub const` path per component.
//!
//! The guests build in their own target directory, so this nested `cargo` never waits on the lock
//! of the outer build. The target must be installed (`rustup target add wasm32-wasip2`; the
//! project's `scripts/test.sh` does it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, artifact file stem, const name, is a binary).
const GUESTS: &[(&str, &str, &str, bool)] = &[
    ("tollgate-example-orders", "tollgate_example_orders", "ORDERS", false),
    ("tollgate-example-payments", "tollgate_example_payments", "PAYMENTS", false),
    ("tollgate-example-support-factory", "tollgate_example_support_factory", "SUPPORT_FACTORY", false),
    ("tollgate-test-guest-hostile", "tollgate_test_guest_hostile", "HOSTILE", false),
    ("tollgate-test-guest-impostor", "tollgate_test_guest_impostor", "IMPOSTOR", false),
    ("tollgate-test-guest-ledger", "tollgate_test_guest_ledger", "LEDGER", false),
    ("tollgate-test-guest-throwing", "tollgate_test_guest_throwing", "THROWING", false),
    ("tollgate-test-guest-hooks", "tollgate_test_guest_hooks", "HOOKS_FACTORY", false),
    ("tollgate-test-guest-chart", "tollgate_test_guest_chart", "CHART", false),
    ("tollgate-test-guest-factory-v1", "tollgate_test_guest_factory_v1", "FACTORY_V1", false),
    ("tollgate-test-guest-reviewer", "tollgate_test_guest_reviewer", "REVIEWER_FACTORY", false),
    ("tollgate-test-guest-zero-writes", "tollgate_test_guest_zero_writes", "ZERO_WRITES", false),
    ("tollgate-test-guest-not-a-tool", "tollgate-test-guest-not-a-tool", "NOT_A_TOOL", true),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().and_then(Path::parent).expect("host/test-guests sits two levels deep");
    for watched in ["wit", "guest-sdk/rust", "guest-sdk/rust-macro", "examples", "host/test-guests"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());

    let target_dir = root.join("target/guests");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--target", "wasm32-wasip2", "--profile", "guest", "--target-dir"])
        .arg(&target_dir);
    for (package, ..) in GUESTS {
        command.args(["-p", package]);
    }
    // What the outer build sets for the host must not leak into the guests' build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        // Under `cargo clippy` the guests must still build plainly.
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
    ] {
        command.env_remove(var);
    }
    let status = command.status().expect("run cargo to build the guest components");
    if !status.success() {
        panic!(
            "building the guest components failed ({status}); is the wasm32-wasip2 target installed? \
             Run `rustup target add wasm32-wasip2` (scripts/test.sh does)."
        );
    }

    let out_dir = target_dir.join("wasm32-wasip2/guest");
    let mut code = String::new();
    for (package, stem, name, _) in GUESTS {
        let path = out_dir.join(format!("{stem}.wasm"));
        assert!(path.exists(), "{package} built no {}", path.display());
        code.push_str(&format!(
            "/// The component built from `{package}`.\npub const {name}: &str = {:?};\n",
            path.display().to_string()
        ));
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("guests.rs");
    std::fs::write(out, code).unwrap();
}
