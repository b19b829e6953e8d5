//! `/mcp/{agent}` under measure: the example agent's `lookup_order` (an approval-free read)
//! called by an MCP client (rmcp, Streamable HTTP, JSON answers), beside the same call in this
//! process's sandbox (the baseline the goal is stated against) and through `tollgate tools call`.
//!
//! 1. `tollgate serve` on SQLite: the read runs at once in serve's sandbox (nothing stored).
//! 2. `tollgate api` + a Worker on a throwaway PostgreSQL (when its binaries are installed): the
//!    read is a one-step session a Worker claims and runs (no sandbox in the API process).
//! 3. `MCP_CLIENTS` (default 100) clients at once, each `MCP_CALLS` (default 10) reads, through
//!    serve: calls per second.
//!
//! Run: `cargo bench -p tollgate --bench mcp` (needs the pinned CLI: scripts/setup.sh).
//! `MCP_SAMPLES` (default 200) sets the samples per row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use serde_json::json;
use tollgate_testing::served::{Served, add_principal};
use tollgate_testing::world::{Refund, World};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Row {
    what: String,
    times: Vec<Duration>,
}

impl Row {
    fn p(&self, q: f64) -> Duration {
        let mut times = self.times.clone();
        times.sort();
        times[((times.len() as f64 - 1.0) * q).round() as usize]
    }
    fn line(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            self.what,
            self.times.len(),
            ms(self.p(0.5)),
            ms(self.p(0.99)),
            ms(*self.times.iter().max().unwrap())
        )
    }
}

use tollgate_testing::mcp::Client;

async fn client(url: &str, agent: &str, token: &str) -> Client {
    tollgate_testing::mcp::client(url, agent, token, false).await
}

fn lookup() -> CallToolRequestParams {
    CallToolRequestParams::new("lookup_order")
        .with_arguments(json!({"order_id": "7"}).as_object().unwrap().clone())
}

async fn time_reads(what: &str, client: &Client, samples: usize) -> Row {
    let mut row = Row { what: what.to_owned(), times: Vec::new() };
    for _ in 0..samples.min(10) {
        client.call_tool(lookup()).await.expect("warm-up");
    }
    for _ in 0..samples {
        let start = Instant::now();
        let result = client.call_tool(lookup()).await.expect("a read");
        row.times.push(start.elapsed());
        assert_ne!(result.is_error, Some(true), "{result:?}");
    }
    row
}

#[tokio::main]
async fn main() {
    let samples = env_or("MCP_SAMPLES", 200);
    let Some(world) = World::new("bench: mcp", Refund::SingleAttemptWithApproval).await else {
        eprintln!("the pinned CLI is missing: run scripts/setup.sh");
        return;
    };
    let mut rows = Vec::new();

    // The baseline: the same call in this process's sandbox.
    let sandbox =
        tollgate_sandbox::Sandbox::new(tollgate_sandbox::SandboxConfig::default()).expect("sandbox");
    let agent = tollgate_worker::agent::Agent::load(&world.agent, sandbox).await.expect("the agent loads");
    let tools = agent.tools().await.expect("tools");
    let mut baseline = Row { what: "sandbox call in-process (baseline)".into(), times: Vec::new() };
    for i in 0..samples + 10 {
        let start = Instant::now();
        tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.expect("a read");
        if i >= 10 {
            baseline.times.push(start.elapsed());
        }
    }
    rows.push(baseline);

    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let name = served.agent_name(&carl).await;
    let mcp = client(&served.url, &name, &carl).await;
    rows.push(time_reads("`/mcp` read, `tollgate serve` on SQLite", &mcp, samples).await);

    let mut cli = Row { what: "`tollgate tools call` (a process each)".into(), times: Vec::new() };
    for _ in 0..10 {
        let start = Instant::now();
        let out = world
            .tollgate()
            .args(["tools", "call"])
            .arg(&world.agent)
            .args(["lookup_order", r#"{"order_id":"7"}"#])
            .output()
            .await
            .unwrap();
        cli.times.push(start.elapsed());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    rows.push(cli);

    // Many clients at once, through serve.
    let clients = env_or("MCP_CLIENTS", 100);
    let calls = env_or("MCP_CALLS", 10);
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(Arc::new(client(&served.url, &name, &carl).await));
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in &connected {
        let c = c.clone();
        tasks.spawn(async move {
            for _ in 0..calls {
                c.call_tool(lookup()).await.expect("a read");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let wall = start.elapsed();
    served.stop().await;

    // `tollgate api` + a Worker on PostgreSQL: reads are durable steps.
    let mut pg_row = None;
    if let Some(cluster) = tollgate_store_testing::PgCluster::start_or_skip() {
        let world =
            World::on_db("bench: mcp on PostgreSQL", Refund::SingleAttemptWithApproval, &cluster.url())
                .await
                .expect("world");
        let file = world.dir.path().join("auth.toml");
        let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
        let _worker = world.worker("w");
        let served = Served::start_api(&world, "api", &["--auth", file.to_str().unwrap()]).await;
        let name = served.agent_name(&carl).await;
        let mcp = client(&served.url, &name, &carl).await;
        // The Worker publishes its tools just after it registers.
        for _ in 0..100 {
            if mcp.list_all_tools().await.is_ok_and(|t| !t.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        pg_row =
            Some(time_reads("`/mcp` read, `tollgate api` + Worker on PostgreSQL", &mcp, samples / 4).await);
        served.stop().await;
    }
    if let Some(row) = pg_row {
        rows.push(row);
    }

    let mut out = String::from("| measured | samples | p50 | p99 | max |\n|---|---|---|---|---|\n");
    for row in &rows {
        out.push_str(&row.line());
    }
    let added = rows[1].p(0.5).as_secs_f64() * 1e3 - rows[0].p(0.5).as_secs_f64() * 1e3;
    out.push_str(&format!(
        "\nadded by `/mcp` in serve over the in-process sandbox call (p50): {added:.2} ms\n"
    ));
    if let Some(pg) = rows.iter().find(|r| r.what.contains("PostgreSQL")) {
        out.push_str(&format!(
            "`/mcp` through `tollgate api` + Worker on PostgreSQL (p50): {:.2} ms\n",
            pg.p(0.5).as_secs_f64() * 1e3
        ));
    }
    out.push_str(&format!(
        "{clients} clients × {calls} reads at once through serve: {:.0} calls/s ({:.2} s)\n",
        (clients * calls) as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    ));
    println!("{out}");
}
