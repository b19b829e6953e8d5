//! What it costs a Worker to get an agent ready, by where the agent comes from, and what twenty
//! agents cost a process.
//!
//! Each round makes the example support agent (its three components built from source) ready to run
//! a first segment (loaded, every component compiled and its tools listed) in four ways:
//! - **local folder, cold**: `Agent::load` of a folder, with an empty compile cache (the baseline);
//! - **local folder, warm**: the same with the compile cache filled;
//! - **pushed, never seen**: `pull` from the store into an empty bundle cache (fetch by digest, check
//!   every sha256, write, rename) and load it with an empty compile cache;
//! - **pushed, cached**: `pull` finding the bundle cached (every file hashed again) and a warm compile
//!   cache, then the load.
//!
//! Then twenty agents (the same components, each its own `tollgate.toml` and name, pushed and
//! pulled) are loaded into one process, and the process's RSS is printed before and after. The
//! components are the same for all twenty, so wasmtime shares nothing between them but the compile
//! cache's files: each agent's load keeps its own compiled modules.
//!
//! Run: `cargo bench -p tollgate --bench agents` (`BENCH_N` rounds, default 10).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tollgate_sandbox::{Sandbox, SandboxConfig};
use tollgate_store::Store;
use tollgate_worker::agent::Agent;
use tollgate_worker::bundle::{Bundle, Lock};

/// The example agent in `dir` named `name` (its `[agent] name`), locked.
fn make_agent(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::copy(tollgate_test_guests::ORDERS, dir.join("tools/orders.wasm")).unwrap();
    std::fs::copy(tollgate_test_guests::PAYMENTS, dir.join("tools/payments.wasm")).unwrap();
    std::fs::copy(tollgate_test_guests::SUPPORT_FACTORY, dir.join("agent.wasm")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = std::fs::read_to_string(root.join("examples/agents/support/tollgate.toml")).unwrap();
    let config = config.replacen("[agent]\n", &format!("[agent]\nname = \"{name}\"\n"), 1);
    std::fs::write(dir.join("tollgate.toml"), config).unwrap();
    let canonical = dir.canonicalize().unwrap();
    Lock::of(&Bundle::read(&canonical).unwrap()).write(&canonical).unwrap();
}

fn sandbox(compile_cache: &Path) -> Sandbox {
    Sandbox::new(SandboxConfig { cache_dir: Some(compile_cache.to_path_buf()), ..SandboxConfig::default() })
        .unwrap()
}

/// Loads the agent in `dir` and lists its tools: what a first segment needs.
async fn ready(dir: &Path, compile_cache: &Path) -> Agent {
    let agent = Agent::load(dir, sandbox(compile_cache)).await.unwrap();
    assert!(!agent.tools().await.unwrap().tools().is_empty());
    agent
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn row(what: &str, mut times: Vec<Duration>, baseline: f64) -> f64 {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = ms(times[times.len() / 2]);
    let p99 = ms(times[((times.len() as f64 * 0.99).ceil() as usize).clamp(1, times.len()) - 1]);
    let ratio = if baseline > 0.0 { format!("{:.2}", p50 / baseline) } else { "1.00".into() };
    println!("| {what} | {} | {p50:.1} ms | {p99:.1} ms | {ratio} |", times.len());
    p50
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(10).max(1);
    let dir = tempfile::tempdir().unwrap();
    let store = tollgate_store::SqliteStore::open(&dir.path().join("agents.db")).await.unwrap();
    let store: &dyn Store = &store;
    let folder = dir.path().join("support");
    make_agent(&folder, "support");
    let loaded = ready(&folder, &dir.path().join("warm-compile")).await;
    let pushed =
        tollgate_worker::pull::push(store, loaded.dir(), "support", loaded.digest(), "bench").await.unwrap();
    assert!(pushed.created);
    let (mut cold, mut warm, mut never, mut cached) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Alternating, so a slow moment of the machine falls on every column alike.
    for round in 0..n {
        let fresh = dir.path().join(format!("round-{round}"));
        let started = Instant::now();
        ready(&folder, &fresh.join("cold-compile")).await;
        cold.push(started.elapsed());
        let started = Instant::now();
        ready(&folder, &dir.path().join("warm-compile")).await;
        warm.push(started.elapsed());
        let started = Instant::now();
        let pulled = tollgate_worker::pull::pull(store, "support", &fresh.join("bundles")).await.unwrap();
        assert!(pulled.fetched);
        ready(&pulled.dir, &fresh.join("pulled-compile")).await;
        never.push(started.elapsed());
        let started = Instant::now();
        let pulled = tollgate_worker::pull::pull(store, "support", &fresh.join("bundles")).await.unwrap();
        assert!(!pulled.fetched);
        ready(&pulled.dir, &fresh.join("pulled-compile")).await;
        cached.push(started.elapsed());
    }
    println!("| the example agent ready for a first segment | N | p50 | p99 | vs local folder, cold |");
    println!("|---|---|---|---|---|");
    let baseline = row("local folder, cold compile cache (baseline)", cold, 0.0);
    row("local folder, warm compile cache", warm, baseline);
    row("pushed, never seen (fetch, verify, write, compile)", never, baseline);
    row("pushed, cached bundle and compile cache", cached, baseline);

    // Twenty agents in one process.
    let before = rss_mib();
    let mut agents: Vec<Agent> = Vec::new();
    let cache: PathBuf = dir.path().join("fleet-bundles");
    for i in 0..20 {
        let name = format!("agent{i}");
        let at = dir.path().join("fleet").join(&name);
        make_agent(&at, &name);
        let agent = ready(&at, &dir.path().join("warm-compile")).await;
        tollgate_worker::pull::push(store, agent.dir(), &name, agent.digest(), "bench").await.unwrap();
        drop(agent);
        let pulled = tollgate_worker::pull::pull(store, &name, &cache).await.unwrap();
        agents.push(ready(&pulled.dir, &dir.path().join("warm-compile")).await);
    }
    let after = rss_mib();
    println!();
    println!(
        "RSS of this process: {before:.1} MiB with one agent loaded, {after:.1} MiB with twenty more: {:.1} MiB per agent",
        (after - before) / 20.0
    );
}
