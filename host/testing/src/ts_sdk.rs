//! Where the benches find the official TypeScript Agent SDK they measure against: the SDK pinned
//! in `tools/ts-sdk`, installed by `scripts/install-ts-sdk.sh` (or `TS_SDK_NODE_MODULES`): the
//! `segment` bench of `tollgate-claude` and the `turn` bench of `tollgate`.

/// The `node_modules` holding the SDK, or `None` (said on stderr, naming the install script)
/// when it is not installed: the bench then skips the SDK's rows.
pub fn node_modules() -> Option<String> {
    let modules = std::env::var("TS_SDK_NODE_MODULES")
        .unwrap_or_else(|_| crate::root().join("tools/ts-sdk/node_modules").display().to_string());
    if std::path::Path::new(&modules).join("@anthropic-ai/claude-agent-sdk").exists() {
        return Some(modules);
    }
    eprintln!(
        "TS SDK baseline skipped: no {modules}/@anthropic-ai/claude-agent-sdk (run scripts/install-ts-sdk.sh)"
    );
    None
}
