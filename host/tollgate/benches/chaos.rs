//! The chaos soak: `--sessions N` (default 300) sessions, each a read, an
//! approval-free idempotent write and an approved non-idempotent write, on three Workers and one
//! API sharing a throwaway PostgreSQL, while a driver SIGKILLs a random Worker every 3–8 s, stops
//! one past its lease, restarts PostgreSQL and closes the API's database connections. Then a
//! checker reads the store and the payments log and prints a table: kills, stops, restarts,
//! sessions, completed, failed, duration, violations (must be 0), and each violation.
//!
//! Run: `cargo bench -p tollgate --bench chaos -- --sessions 300` (needs the pinned CLI and
//! PostgreSQL). Options: `--sessions N`, `--timeout-secs S` (default 1800: the run fails after
//! it and kills everything), `--seed N` (kill times and victims), `--max-kills N`. Exits 1 when
//! there is a violation. The harness and the checker are `tollgate_testing::chaos`, shared with the
//! test suite's small form (`cargo test -p tollgate --test durable chaos`).

use std::process::ExitCode;
use std::time::Duration;

use tollgate_testing::chaos::{self, Config};

fn usage(problem: &str) -> ExitCode {
    eprintln!("chaos: {problem}\nusage: chaos [--sessions N] [--timeout-secs S] [--seed N] [--max-kills N]");
    ExitCode::from(2)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let mut cfg = Config::full(300);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| match args.next().map(|v| v.parse::<u64>()) {
            Some(Ok(n)) => Ok(n),
            _ => Err(usage(&format!("{name} needs a number"))),
        };
        let parsed = match arg.as_str() {
            "--sessions" => number("--sessions").map(|n| cfg.sessions = n as usize),
            "--timeout-secs" => number("--timeout-secs").map(|n| cfg.timeout = Duration::from_secs(n)),
            "--seed" => number("--seed").map(|n| cfg.seed = n),
            "--max-kills" => number("--max-kills").map(|n| cfg.max_kills = Some(n as usize)),
            // What `cargo bench` passes to every bench binary.
            "--bench" => Ok(()),
            other => Err(usage(&format!("unknown argument {other}"))),
        };
        if let Err(code) = parsed {
            return code;
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cli = root.join(tollgate_claude::cli::PINNED_INSTALL);
    if !cli.exists() {
        eprintln!("chaos: the pinned CLI is not installed at {}; run scripts/setup.sh", cli.display());
        return ExitCode::from(2);
    }
    let cluster = match tollgate_store_testing::PgCluster::start() {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("chaos: cannot start PostgreSQL: {e}");
            return ExitCode::from(2);
        }
    };
    let hard_stop = cfg.timeout + Duration::from_secs(120);
    let Ok(report) = tokio::time::timeout(hard_stop, chaos::run(&cfg, &cli, cluster)).await else {
        eprintln!("chaos: the run overran its deadline by two minutes; everything it started was killed");
        return ExitCode::FAILURE;
    };
    println!("\n{}", report.table());
    if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
