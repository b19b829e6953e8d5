//! Paths of the guest components the tests load, built from source by this crate's build script.
//!
//! Every constant names a `.wasm` file under `target/guests/`. The Rust examples
//! (`examples/tools/rust/*`), the example options factory, and the test guests beside this crate
//! (`hostile`: one tool per way to misbehave; `impostor`: a tool named `Bash`; `ledger`:
//! `record_credit`, the chaos soak's approval-free idempotent write; `chart`: `render_chart`, a
//! result with an image; `not-a-tool`: a WASI command, the wrong world) are all here. Add a guest to `build.rs`'s `GUESTS` and to a test.

include!(concat!(env!("OUT_DIR"), "/guests.rs"));
