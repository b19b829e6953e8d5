//! The chaos soak's small form: 20 sessions on three Workers and one API
//! sharing PostgreSQL, through three SIGKILLs, a SIGSTOP past the lease, a PostgreSQL restart and
//! the API's database connections closed; then the checker's invariants. The harness and the
//! checker are `tollgate_testing::chaos` (shared with `cargo bench -p tollgate --bench chaos`, the
//! full run); the checker's own tests are there too.

use std::time::Duration;

use tollgate_store_testing::PgCluster;

use tollgate_testing::chaos::{self, Config};
use tollgate_testing::world;

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sessions_keep_every_invariant_through_kills_a_stop_a_database_restart_and_cut_connections() {
    let Some(cli) = world::real_cli("the chaos soak") else { return };
    let Some(cluster) = PgCluster::start_or_skip() else { return };
    // Three Workers with real CLIs take the whole machine: no other durable test at once.
    let _machine = world::SLOTS.acquire_many(*world::WORLDS).await.expect("never closed");
    let cfg = Config::small();
    let report =
        tokio::time::timeout(cfg.timeout + Duration::from_secs(120), chaos::run(&cfg, &cli, cluster))
            .await
            .expect(
                "the soak overran its own deadline by two minutes (everything it started is killed on drop)",
            );
    println!("{}", report.table());
    assert!(report.ok(), "the chaos soak failed:\n{}", report.table());
    assert_eq!(report.kills, 3, "{}", report.table());
    assert_eq!((report.stops, report.pg_restarts), (1, 1), "{}", report.table());
    assert!(report.api_connections_closed >= 1, "{}", report.table());
    assert!(report.approvals >= 1, "{}", report.table());
}
