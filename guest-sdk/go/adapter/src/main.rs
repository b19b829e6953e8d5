//! Writes the wasi_snapshot_preview1 reactor adapter of wasmtime 48.0.8 to the path given as the
//! only argument. Go's `-buildmode=c-shared` wasip1 modules are reactors (`_initialize`, no
//! `_start`), so they need the reactor adapter, not the command one.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: tollgate-go-adapter OUT.wasm");
        return ExitCode::from(2);
    };
    let bytes = wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
    match std::fs::write(&out, bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writing {}: {e}", out.to_string_lossy());
            ExitCode::FAILURE
        }
    }
}
