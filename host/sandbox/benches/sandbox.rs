//! Benchmark of the sandbox's call path and component loading, printed as a table.
//!
//! `cargo bench -p tollgate-sandbox --bench sandbox`
//!
//! Rows (the Rust example `lookup_order` throughout):
//! - cold call: `ToolSet::call`, the whole path (schema check, fresh instance from the pooling
//!   allocator, call, output checks), one call at a time;
//! - schema check only: `ToolSet::validate`, the host-side share of a call;
//! - native baseline: the same work done natively in this process (parse the arguments, look the
//!   order up, write the JSON answer), the floor a sandboxed call is compared with;
//! - first load: compile and cache (a fresh cache directory every time);
//! - warm load: the whole `load_tools` from a filled cache (read, link, list).
//!
//! "CPU per call" is the mean CPU time of the whole process (every thread) per call, so work
//! moved off the call's path to another thread is counted. `SANDBOX_BENCH_CALLS=2000` takes
//! fewer samples (default 20000).
//!
//! Quote ratios, not absolute times: the machine is shared and noisy.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig};
use tollgate_test_guests as guests;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// CPU time used so far by the whole process, every thread included.
fn process_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for clock_gettime to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
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
        let mut cold = Vec::with_capacity(calls);
        let cpu = process_cpu();
        for _ in 0..calls {
            let started = Instant::now();
            black_box(tools.call("lookup_order", black_box(arguments), None).await.unwrap());
            cold.push(started.elapsed());
        }
        let cold_cpu = process_cpu() - cpu;
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
            Row::new("first load (compile + cache)", first, None),
            Row::new("warm load (from the compile cache)", warm, None),
        ];
        let size = std::fs::metadata(guests::ORDERS).unwrap().len();
        println!("tollgate-sandbox: Rust example `lookup_order` ({} KiB component)", size / 1024);
        println!("{:<52} {:>8} {:>12} {:>12} {:>14}", "measure", "samples", "p50", "p99", "CPU per call");
        for row in &rows {
            println!(
                "{:<52} {:>8} {:>12} {:>12} {:>14}",
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
    });
}
