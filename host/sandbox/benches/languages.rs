//! Cold calls per guest language: component size, load time, and the p50/p99 of a call on a fresh
//! instance (what every tool call costs: `ToolSet::call` instantiates from the pre-linked
//! component, calls, and drops the instance), for the same `lookup_order` tool in Rust (the
//! baseline), Go, JavaScript on QuickJS (the SDK's default engine) and on StarlingMonkey (the engine
//! for tools with outbound HTTP), and Python.
//!
//! ```sh
//! scripts/install-guest-toolchains.sh     # once
//! cargo bench -p tollgate-sandbox --bench languages
//! LANGUAGES_BENCH_CALLS=2000 cargo bench -p tollgate-sandbox --bench languages   # more samples
//! ```
//!
//! It builds the Go, JavaScript and Python guests with `scripts/build-guests.sh` (and a
//! StarlingMonkey build of the JavaScript example) into `target/guests/`, then prints a table.
//! Every language runs in the same process and sandbox (pooling allocator, compile cache under
//! `target/`), interleaved round by round so that a burst of load on the machine hits all alike.
//!
//! A call is followed by `ToolSet::settled` (outside its latency, inside its CPU), as a host's
//! real calls are separated by the model's turns: the used instance is dropped, and for a small
//! component (Rust, QuickJS) the next one prepared, off the call's path. "CPU per call" is the
//! mean CPU time of the whole process (every thread) over a call and its settling, so work moved
//! off the call's path is counted. A second Rust row, in a sandbox with `prepared_instances = 0`
//! (instantiate, call and drop all on the call's path), is the control for that.
//!
//! `LANGUAGES_BENCH_PIN=1` runs the big guests' calls (components over 2 MiB: Go,
//! StarlingMonkey, Python) on a thread pinned to the last CPU and the rest on the main thread
//! pinned to CPU 0 (an experiment: do the small guests' caches stay warm on their own core?).
//!
//! Two control rows follow, measured in the same run, to tell what interleaving costs the Rust
//! call: the Rust call alone (back to back, nothing in between), and the Rust call after the host
//! itself writes a 16 MiB buffer between calls (no WebAssembly at all), which evicts the CPU
//! caches and TLB the way a big guest's call does. `LANGUAGES_BENCH_ONLY=Go,Python` interleaves
//! Rust with only the languages or engines named.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{percentile, process_cpu, run};
use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig, ToolSet};

struct Subject {
    label: &'static str,
    /// Loaded in a sandbox with `prepared_instances = 0`: every call instantiates on its path.
    inline: bool,
    engine: &'static str,
    wasm: PathBuf,
    tools: Option<ToolSet>,
    size: u64,
    load: Duration,
    cache: String,
    samples: Vec<Duration>,
    /// Process CPU time of each call (every thread: work moved off the call's path counts).
    cpu: Vec<Duration>,
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / samples.len().max(1) as u32
}

/// The engine column of the Rust row whose calls instantiate on their path.
const INLINE_ENGINE: &str = "wit-bindgen, prepared_instances = 0 (control)";

/// Bytes the host writes between two Rust calls in the "after a host memory sweep" control row.
const SWEEP_BYTES: usize = 16 << 20;

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 { format!("{:.2} ms", us / 1000.0) } else { format!("{us:.0} µs") }
}

/// Whether `LANGUAGES_BENCH_ONLY` (a comma-separated list of languages or engines, e.g.
/// `Go,QuickJS`) keeps this subject; Rust, the baseline, always runs.
/// Pins the calling thread to CPU `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity get valid
    // pointers to it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

/// A call to run on the big guests' thread, and where to send its output.
type BigCall = (ToolSet, tokio::sync::oneshot::Sender<tollgate_sandbox::ToolOutput>);

/// With `LANGUAGES_BENCH_PIN=1`: a thread pinned to the last CPU that runs the big guests'
/// calls (the main thread, which runs the Rust calls, is pinned to CPU 0).
fn big_guest_thread() -> tokio::sync::mpsc::UnboundedSender<BigCall> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<BigCall>();
    std::thread::spawn(move || {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        pin_to(cpus - 1);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            while let Some((tools, reply)) = rx.recv().await {
                let output = tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
                tools.settled().await;
                let _ = reply.send(output);
            }
        });
    });
    tx
}

fn keep(label: &str, engine: &str) -> bool {
    let Ok(only) = std::env::var("LANGUAGES_BENCH_ONLY") else { return true };
    label == "Rust" || only.split(',').map(str::trim).any(|w| w == label || w == engine)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument may follow. Nothing to filter here.
    let calls: usize =
        std::env::var("LANGUAGES_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let out = root.join("target/guests");

    eprintln!("building the Go, JavaScript and Python guests …");
    run(Command::new("bash").arg(root.join("scripts/build-guests.sh")).arg(&out));
    let sm = out.join("js-starlingmonkey/orders.wasm");
    run(Command::new("node")
        .arg(root.join("guest-sdk/js/bin/build.mjs"))
        .arg(root.join("examples/tools/js/orders/tool.js"))
        .args(["--engine", "starlingmonkey", "-o"])
        .arg(&sm));

    let mut subjects = vec![
        ("Rust", "wit-bindgen", PathBuf::from(tollgate_test_guests::ORDERS)),
        ("Go", "go 1.27 wasip1 + adapter", out.join("go/orders.wasm")),
        ("Rust", INLINE_ENGINE, PathBuf::from(tollgate_test_guests::ORDERS)),
        ("JavaScript", "QuickJS", out.join("js/orders.wasm")),
        ("JavaScript", "StarlingMonkey", sm),
        ("Python", "componentize-py", out.join("python/orders.wasm")),
    ]
    .into_iter()
    .filter(|(label, engine, _)| keep(label, engine))
    .map(|(label, engine, wasm)| Subject {
        label,
        inline: engine == INLINE_ENGINE,
        engine,
        wasm,
        tools: None,
        size: 0,
        load: Duration::ZERO,
        cache: String::new(),
        samples: Vec::with_capacity(calls),
        cpu: Vec::with_capacity(calls),
    })
    .collect::<Vec<_>>();

    let mut alone: (Vec<Duration>, Vec<Duration>) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let mut after_sweep: (Vec<Duration>, Vec<Duration>) =
        (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let pin = std::env::var_os("LANGUAGES_BENCH_PIN").is_some();
    // In a task on a worker thread, as the host's tool server calls tools (a task spawned there
    // runs on the same worker after the call, without waking another thread).
    let task = runtime.spawn(async move {
        let big = pin.then(|| {
            pin_to(0);
            big_guest_thread()
        });
        let cache = root.join("target/h-langs-bench-cache");
        let sandbox =
            Sandbox::new(SandboxConfig { cache_dir: Some(cache.clone()), ..SandboxConfig::default() })
                .unwrap();
        let inline_sandbox = Sandbox::new(SandboxConfig {
            cache_dir: Some(cache),
            prepared_instances: 0,
            ..SandboxConfig::default()
        })
        .unwrap();
        let dirs = tempfile::tempdir().unwrap();
        for (i, s) in subjects.iter_mut().enumerate() {
            let dir = dirs.path().join(i.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(&s.wasm, dir.join("orders.wasm")).unwrap();
            let sandbox = if s.inline { &inline_sandbox } else { &sandbox };
            // Twice: the first load may compile; the second shows the cached load every Worker pays.
            let _ = sandbox.load_tools(&dir, &Manifests::default()).await.unwrap();
            let started = Instant::now();
            let tools = sandbox.load_tools(&dir, &Manifests::default()).await.unwrap();
            s.load = started.elapsed();
            let info = &tools.components()[0];
            s.size = info.size;
            s.cache = format!("{:?}", info.cache);
            for _ in 0..20 {
                tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
            }
            s.tools = Some(tools);
        }
        let control = subjects.iter().position(|s| s.inline).unwrap();
        for round in 0..calls {
            // The two Rust rows swap places every round: each follows Python, then Go, alike.
            let mut order: Vec<usize> = (0..subjects.len()).collect();
            if round % 2 == 1 {
                order.swap(0, control);
            }
            for i in order {
                let s = &mut subjects[i];
                let tools = s.tools.as_ref().unwrap();
                let cpu = process_cpu();
                let started = Instant::now();
                let output = match &big {
                    Some(big) if s.size > (2 << 20) => {
                        let (reply, output) = tokio::sync::oneshot::channel();
                        big.send((tools.clone(), reply)).unwrap();
                        output.await.unwrap()
                    }
                    _ => tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap(),
                };
                s.samples.push(started.elapsed());
                tools.settled().await;
                s.cpu.push(process_cpu() - cpu);
                assert!(!output.is_error, "{}: {}", s.label, output.text());
            }
        }
        // The control rows: the same Rust tool set, alone, then after a host-side sweep.
        let rust = subjects[0].tools.clone().unwrap();
        let mut sweep = vec![0u8; SWEEP_BYTES];
        for round in 0..2 * calls {
            let swept = round % 2 == 1;
            if swept {
                for (i, byte) in sweep.iter_mut().enumerate().step_by(64) {
                    *byte = byte.wrapping_add(i as u8);
                }
                std::hint::black_box(&sweep);
            }
            let cpu = process_cpu();
            let started = Instant::now();
            rust.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
            let elapsed = started.elapsed();
            rust.settled().await;
            let row = if swept { &mut after_sweep } else { &mut alone };
            row.0.push(elapsed);
            row.1.push(process_cpu() - cpu);
        }
        (subjects, alone, after_sweep)
    });
    let (mut subjects, alone, after_sweep) = runtime.block_on(task).unwrap();

    let rust_p50 = {
        let mut v = subjects[0].samples.clone();
        v.sort();
        percentile(&v, 0.5)
    };
    println!();
    println!("cold call = fresh instance + lookup_order + drop, {calls} calls each, interleaved");
    println!();
    println!(
        "| language | engine | component | cached load | cold call p50 | cold call p99 | p50 vs Rust | CPU per call |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for s in &mut subjects {
        s.samples.sort();
        let p50 = percentile(&s.samples, 0.5);
        let p99 = percentile(&s.samples, 0.99);
        println!(
            "| {} | {} | {:.2} MB | {} ({}) | {} | {} | {:.1}× | {} |",
            s.label,
            s.engine,
            s.size as f64 / 1e6,
            micros(s.load),
            s.cache,
            micros(p50),
            micros(p99),
            p50.as_secs_f64() / rust_p50.as_secs_f64(),
            micros(mean(&s.cpu))
        );
    }
    let size = subjects[0].size;
    for (what, (mut samples, cpu)) in
        [("Rust, alone (control)", alone), ("Rust, after a 16 MiB host memory sweep (control)", after_sweep)]
    {
        samples.sort();
        let p50 = percentile(&samples, 0.5);
        println!(
            "| {what} | wit-bindgen | {:.2} MB | — | {} | {} | {:.1}× | {} |",
            size as f64 / 1e6,
            micros(p50),
            micros(percentile(&samples, 0.99)),
            p50.as_secs_f64() / rust_p50.as_secs_f64(),
            micros(mean(&cpu))
        );
    }
}
