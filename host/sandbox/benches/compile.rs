//! What the first load of a new tool costs: compiling it. For each language whose tools embed a
//! runtime (Python's CPython, JavaScript's StarlingMonkey, Go's runtime), `throwing` is compiled
//! after `payments` of the same language with the function cache warm, against the baseline of the
//! same `throwing` compiled in an empty cache, measured in the same run, round after round (the
//! baseline before the pair every other round).
//!
//! ```sh
//! scripts/install-guest-toolchains.sh     # once
//! cargo bench -p tollgate-sandbox --bench compile
//! COMPILE_BENCH_ROUNDS=5 cargo bench -p tollgate-sandbox --bench compile
//! ```
//!
//! Wall time and the process's CPU time (every thread: wasmtime compiles functions in parallel)
//! of `Sandbox::load_tools`, the component cache missed every time (each load has a fresh
//! directory). Medians over the rounds, and the slowest.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{percentile, process_cpu, run};
use tollgate_sandbox::{CacheOutcome, Manifests, Sandbox, SandboxConfig};

/// Loads the one component `wasm` with its functions cached in `functions` (a fresh component
/// cache every time): its wall and CPU time.
async fn compile(wasm: &Path, functions: &Path, keep: &mut Vec<tempfile::TempDir>) -> (Duration, Duration) {
    let cache = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(functions, cache.path().join("functions")).unwrap();
    let sandbox =
        Sandbox::new(SandboxConfig { cache_dir: Some(cache.path().into()), ..SandboxConfig::default() })
            .unwrap();
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy(wasm, tools.path().join("tool.wasm")).unwrap();
    let cpu = process_cpu();
    let started = Instant::now();
    let loaded = sandbox.load_tools(tools.path(), &Manifests::default()).await.unwrap();
    let times = (started.elapsed(), process_cpu() - cpu);
    assert_eq!(loaded.components()[0].cache, CacheOutcome::Miss);
    keep.extend([cache, tools]);
    times
}

/// Wall and CPU time of each round's compile.
type Samples = Vec<(Duration, Duration)>;

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn main() {
    let rounds: usize = std::env::var("COMPILE_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let out = root.join("target/guests");
    eprintln!("building the Go, JavaScript and Python guests …");
    run(Command::new("bash").arg(root.join("scripts/build-guests.sh")).arg(&out));

    let languages = [("Python", "python"), ("JavaScript (StarlingMonkey)", "js"), ("Go", "go")];
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Per language: `payments` in an empty cache, `throwing` after it, `throwing` in an empty cache.
    let mut rows: Vec<(&str, [Samples; 3])> =
        languages.iter().map(|(label, _)| (*label, Default::default())).collect();
    // Every folder is kept to the end: a filesystem slows down creating files among many just
    // deleted, which a real cache never sees.
    let mut keep = Vec::new();
    for round in 0..rounds {
        for ((_, dir), (label, samples)) in languages.iter().zip(&mut rows) {
            let payments: PathBuf = out.join(dir).join("payments.wasm");
            let throwing: PathBuf = out.join(dir).join("throwing.wasm");
            let (empty, shared) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            runtime.block_on(async {
                // The baseline first every other round: the machine warms as a run goes on.
                if round % 2 == 1 {
                    samples[2].push(compile(&throwing, empty.path(), &mut keep).await);
                }
                samples[0].push(compile(&payments, shared.path(), &mut keep).await);
                samples[1].push(compile(&throwing, shared.path(), &mut keep).await);
                if round % 2 == 0 {
                    samples[2].push(compile(&throwing, empty.path(), &mut keep).await);
                }
            });
            keep.extend([empty, shared]);
            eprintln!("round {}/{rounds}: {label}", round + 1);
        }
    }

    println!();
    println!(
        "compile on first load, {rounds} rounds: median (slowest) wall and CPU time of Sandbox::load_tools"
    );
    println!();
    println!(
        "| language | `payments`, empty cache: wall | CPU | `throwing` after it: wall | CPU | `throwing`, empty cache (baseline): wall | CPU | CPU ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, samples) in &rows {
        let cells: Vec<(Duration, Duration, Duration, Duration)> = samples
            .iter()
            .map(|s| {
                let mut wall: Vec<Duration> = s.iter().map(|t| t.0).collect();
                let mut cpu: Vec<Duration> = s.iter().map(|t| t.1).collect();
                wall.sort();
                cpu.sort();
                (percentile(&wall, 0.5), *wall.last().unwrap(), percentile(&cpu, 0.5), *cpu.last().unwrap())
            })
            .collect();
        let cell = |c: &(Duration, Duration, Duration, Duration)| {
            format!("{} ({}) | {} ({})", secs(c.0), secs(c.1), secs(c.2), secs(c.3))
        };
        println!(
            "| {label} | {} | {} | {} | {:.2} |",
            cell(&cells[0]),
            cell(&cells[1]),
            cell(&cells[2]),
            cells[1].2.as_secs_f64() / cells[2].2.as_secs_f64()
        );
    }
}
