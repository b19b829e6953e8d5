//! Paths of the guest components the tests load, built from source by this crate's build script.
//!
//! Every constant names a `.wasm` file under `target/guests/`. The Rust examples
//! (`examples/tools/rust/*`), the example options factory, and the test guests beside this crate
//! (`hostile`: one tool per way to misbehave; `impostor`: a tool named `Bash`; `ledger`:
//! `record_credit`, the chaos soak's approval-free idempotent write; `throwing`: writes that send a
//! payment and then fail with an error they do not handle; `chart`: `render_chart`, a result with
//! an image; `zero-writes`: zero-length writes in a loop to stdout, stderr and a request body;
//! `not-a-tool`: a WASI command, the wrong world) are all here. Add a guest to
//! `build.rs`'s `GUESTS` and to a test.

#![forbid(unsafe_code)]

include!(concat!(env!("OUT_DIR"), "/guests.rs"));

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory `scripts/build-guests.sh` builds the Go, JavaScript and Python guests into, each
/// as `<lang>/<name>.wasm`; built once per process on the first call (a component newer than its
/// sources is kept). Panics with the script's output, which names the missing toolchain and the
/// install script, when the build fails.
pub fn built_guests() -> &'static Path {
    static GUESTS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let result = GUESTS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = root.join("target/guests");
        let script = root.join("scripts/build-guests.sh");
        let started = std::time::Instant::now();
        let output = std::process::Command::new("bash")
            .arg(&script)
            .arg(&out)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}). Install the Go, JavaScript and Python guest toolchains with \
                 scripts/install-guest-toolchains.sh.\n--- stdout\n{}\n--- stderr\n{}",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            ));
        }
        eprintln!(
            "built the Go, JavaScript and Python guests in {:.1} s:\n{}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&output.stdout)
        );
        Ok(out)
    });
    match result {
        Ok(dir) => dir,
        Err(message) => panic!("{message}"),
    }
}

/// The component `name` of `lang` built by [`built_guests`] (`go`, `js`, `python`).
///
/// # Panics
/// The build failed, or it wrote no such component.
pub fn built(lang: &str, name: &str) -> PathBuf {
    let path = built_guests().join(lang).join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}
