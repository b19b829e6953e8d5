//! The example support agent laid out as `tollgate serve --agent` reads it (its guests built from
//! source by `tollgate-test-guests`, its `tollgate.toml` from `examples/agents/support`): what the
//! benches that start a real server run.

use std::path::{Path, PathBuf};

/// Lays the support agent out in `dir/agent` and returns that folder; `root` is the repository.
pub fn support_agent(root: &Path, dir: &Path) -> PathBuf {
    let agent = dir.join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::copy(tollgate_test_guests::ORDERS, agent.join("tools/orders.wasm")).unwrap();
    std::fs::copy(tollgate_test_guests::PAYMENTS, agent.join("tools/payments.wasm")).unwrap();
    std::fs::copy(tollgate_test_guests::SUPPORT_FACTORY, agent.join("agent.wasm")).unwrap();
    std::fs::copy(root.join("examples/agents/support/tollgate.toml"), agent.join("tollgate.toml")).unwrap();
    agent
}
