//! Benchmark of the sandbox's call path and component loading, printed as a table.
//!
//! `cargo bench -p tollgate-sandbox --bench sandbox`
//!
//! Rows (the Rust example `lookup_order` throughout):
//! - cold call: `ToolSet::call`, the whole path (schema check, fresh instance from the pooling
//!   allocator, call, output checks), one call at a time, each followed by `ToolSet::settled`
//!   (outside the latency, inside the CPU): the used instance is dropped and the next prepared
//!   off the call's path, as between a host's real calls;
//! - back to back: the same without waiting in between, so the next instance may not be ready
//!   and the call instantiates on its path;
//! - instantiated on its path: a sandbox with `prepared_instances = 0` (instantiate, call and
//!   drop all on the call's path), the control;
//! - schema check only: `ToolSet::validate`, the host-side share of a call;
//! - native baseline: the same work done natively in this process (parse the arguments, look the
//!   order up, write the JSON answer), the floor a sandboxed call is compared with;
//! - first load: compile and cache (a fresh cache directory every time);
//! - warm load: the whole `load_tools` from a filled cache (read, link, list).
//!
//! Then the memory a prepared instance holds: the resident set of the process after one call of
//! each of 16 tool sets, with prepared instances less without, per instance.
//! `SANDBOX_BENCH_MEMORY_OF=target/guests/js/orders.wasm` measures another component's (it must
//! offer `lookup_order`).
//!
//! "CPU per call" is the mean CPU time of the whole process (every thread) per call, so work
//! moved off the call's path to another thread is counted. `SANDBOX_BENCH_CALLS=2000` takes
//! fewer samples (default 20000).
//!
//! Quote ratios, not absolute times: the machine is shared and noisy.

use std::hint::black_box;
use std::time::{Duration, Instant};

mod common;

use common::{percentile, process_cpu};
use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig};
use tollgate_test_guests as guests;

/// The resident set of the process, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The growth of the resident set when each of 16 fresh tool sets of `sandbox` is called once
/// and settles.
async fn rss_growth_of_16_calls(sandbox: &Sandbox, tools_dir: &std::path::Path) -> isize {
    let mut sets = Vec::new();
    for _ in 0..16 {
        sets.push(sandbox.load_tools(tools_dir, &Manifests::default()).await.unwrap());
    }
    let before = rss();
    for tools in &sets {
        tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
        tools.settled().await;
    }
    rss() as isize - before as isize
}

struct Row {
    name: &'static str,
    samples: Vec<Duration>,
    /// The process's CPU time over all samples, when measured.
    cpu: Option<Duration>,
}

impl Row {
    fn new(name: &'static str, mut samples: Vec<Duration>, cpu: Option<Duration>) -> Self {
        samples.sort();
        Self { name, samples, cpu }
    }
    fn cpu_per_sample(&self) -> String {
        self.cpu.map_or("—".into(), |cpu| fmt(cpu / self.samples.len() as u32))
    }
    fn p50(&self) -> Duration {
        percentile(&self.samples, 0.5)
    }
    fn p99(&self) -> Duration {
        percentile(&self.samples, 0.99)
    }
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 { format!("{us:.1} µs") } else { format!("{:.2} ms", us / 1000.0) }
}

fn native_lookup(arguments: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(arguments).unwrap();
    let id = value["order_id"].as_str().unwrap();
    let n: u64 = id.parse().unwrap();
    serde_json::json!({"order_id": id, "status": "delivered", "total_cents": 600 * n, "currency": "EUR"})
        .to_string()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let tools_dir = tempfile::tempdir().unwrap();
        std::fs::copy(guests::ORDERS, tools_dir.path().join("orders.wasm")).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let sandbox =
            Sandbox::new(SandboxConfig { cache_dir: Some(cache.path().into()), ..SandboxConfig::default() })
                .unwrap();
        let tools = sandbox.load_tools(tools_dir.path(), &Manifests::default()).await.unwrap();
        let arguments = r#"{"order_id":"7"}"#;

        let calls: usize =
            std::env::var("SANDBOX_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
        for _ in 0..1000 {
            tools.call("lookup_order", arguments, None).await.unwrap();
        }
        let inline_sandbox = Sandbox::new(SandboxConfig {
            cache_dir: Some(cache.path().into()),
            prepared_instances: 0,
            ..SandboxConfig::default()
        })
        .unwrap();
        let inline_tools = inline_sandbox.load_tools(tools_dir.path(), &Manifests::default()).await.unwrap();
        let mut cold = Vec::with_capacity(calls);
        let mut back_to_back = Vec::with_capacity(calls);
        let mut inline = Vec::with_capacity(calls);
        let (mut cold_cpu, mut back_to_back_cpu, mut inline_cpu) = Default::default();
        // Interleaved in rounds of 100, so that a burst of load on the machine hits all three alike.
        for _ in 0..calls.div_ceil(100) {
            let cpu = process_cpu();
            for _ in 0..100 {
                let started = Instant::now();
                black_box(tools.call("lookup_order", black_box(arguments), None).await.unwrap());
                cold.push(started.elapsed());
                tools.settled().await;
            }
            cold_cpu += process_cpu() - cpu;
            let cpu = process_cpu();
            for _ in 0..100 {
                let started = Instant::now();
                black_box(tools.call("lookup_order", black_box(arguments), None).await.unwrap());
                back_to_back.push(started.elapsed());
            }
            tools.settled().await;
            back_to_back_cpu += process_cpu() - cpu;
            let cpu = process_cpu();
            for _ in 0..100 {
                let started = Instant::now();
                black_box(inline_tools.call("lookup_order", black_box(arguments), None).await.unwrap());
                inline.push(started.elapsed());
            }
            inline_cpu += process_cpu() - cpu;
        }
        let mut validate = Vec::with_capacity(calls);
        let cpu = process_cpu();
        for _ in 0..calls {
            let started = Instant::now();
            black_box(tools.validate("lookup_order", black_box(arguments)).unwrap());
            validate.push(started.elapsed());
        }
        let validate_cpu = process_cpu() - cpu;
        let mut native = Vec::with_capacity(calls);
        let cpu = process_cpu();
        for _ in 0..calls {
            let started = Instant::now();
            black_box(native_lookup(black_box(arguments)));
            native.push(started.elapsed());
        }
        let native_cpu = process_cpu() - cpu;

        const LOADS: usize = 20;
        let mut first = Vec::new();
        for _ in 0..LOADS {
            let fresh = tempfile::tempdir().unwrap();
            let sandbox = Sandbox::new(SandboxConfig {
                cache_dir: Some(fresh.path().into()),
                ..SandboxConfig::default()
            })
            .unwrap();
            let started = Instant::now();
            black_box(sandbox.load_tools(tools_dir.path(), &Manifests::default()).await.unwrap());
            first.push(started.elapsed());
        }
        let mut warm = Vec::new();
        for _ in 0..LOADS * 10 {
            let started = Instant::now();
            black_box(sandbox.load_tools(tools_dir.path(), &Manifests::default()).await.unwrap());
            warm.push(started.elapsed());
        }

        let rows = [
            Row::new("cold call (schema check + fresh instance + call)", cold, Some(cold_cpu)),
            Row::new("  of which schema check only", validate, Some(validate_cpu)),
            Row::new("native baseline (same work, no sandbox)", native, Some(native_cpu)),
            Row::new(
                "cold call back to back (next instance may not be ready)",
                back_to_back,
                Some(back_to_back_cpu),
            ),
            Row::new("cold call instantiated on its path (prepared_instances = 0)", inline, Some(inline_cpu)),
            Row::new("first load (compile + cache)", first, None),
            Row::new("warm load (from the compile cache)", warm, None),
        ];
        let size = std::fs::metadata(guests::ORDERS).unwrap().len();
        println!("tollgate-sandbox: Rust example `lookup_order` ({} KiB component)", size / 1024);
        println!("{:<62} {:>8} {:>12} {:>12} {:>14}", "measure", "samples", "p50", "p99", "CPU per call");
        for row in &rows {
            println!(
                "{:<62} {:>8} {:>12} {:>12} {:>14}",
                row.name,
                row.samples.len(),
                fmt(row.p50()),
                fmt(row.p99()),
                row.cpu_per_sample()
            );
        }
        let ratio = rows[0].p50().as_secs_f64() / rows[2].p50().as_secs_f64();
        println!("cold call p50 / native baseline p50 = {ratio:.0}x");
        println!("goal: cold call p50 <= 25 µs, p99 <= 100 µs");
        let prepared = Sandbox::new(SandboxConfig {
            cache_dir: Some(cache.path().into()),
            prepared_instances: 16,
            ..SandboxConfig::default()
        })
        .unwrap();
        let unprepared = Sandbox::new(SandboxConfig {
            cache_dir: Some(cache.path().into()),
            prepared_instances: 0,
            ..SandboxConfig::default()
        })
        .unwrap();
        let memory_dir = tempfile::tempdir().unwrap();
        let measured = std::env::var("SANDBOX_BENCH_MEMORY_OF").unwrap_or_else(|_| guests::ORDERS.into());
        std::fs::copy(&measured, memory_dir.path().join("orders.wasm")).unwrap();
        let with = rss_growth_of_16_calls(&prepared, memory_dir.path()).await;
        let without = rss_growth_of_16_calls(&unprepared, memory_dir.path()).await;
        println!(
            "memory a prepared instance of {measured} holds: {:.1} KiB resident (16 tool sets: {} KiB with, \
             {} KiB without), and one slot of the pooling allocator",
            (with - without) as f64 / 16.0 / 1024.0,
            with / 1024,
            without / 1024
        );
    });
}
