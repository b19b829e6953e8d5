//! The Worker's side of `/mcp/{agent}` (see `tollgate_engine::session::mcp`): the `McpCall`
//! step that settles an MCP client's call by its policy, the end of its turn once the call has its
//! record, and the catalog of custom tools a Worker publishes for the API.

use tollgate_engine::catalog::ToolKind;
use tollgate_engine::session::mcp::{self, McpRequest, PublishedTool};
use tollgate_engine::session::{CallEntry, CallStep, EngineError, ItemKind, RunState, turn};
use tollgate_sandbox::ToolSet;
use tollgate_store::Claimed;
use tracing::warn;

use super::{StepError, Worker};
use tollgate_sessions::edits;
use tollgate_sessions::reads;

/// The custom tools of `tools` as `/mcp/{agent}` lists them, with each one's policy in `worker`'s
/// agent.
pub fn published_tools(policies: &tollgate_engine::policy::Policies, tools: &ToolSet) -> Vec<PublishedTool> {
    tools
        .tools()
        .iter()
        .map(|tool| PublishedTool {
            name: tool.name.clone(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
            annotations: tool.annotations,
            policy: policies.resolve(&tool.name, Some(&tool.annotations)),
        })
        .collect()
}

/// Publishes the agent's tools in the store's registry when they differ from what this Worker
/// published last (a `.wasm` dropped into `tools/` changes them without a restart).
pub(super) async fn publish(worker: &Worker, tools: &ToolSet) {
    let published = published_tools(&worker.agent.config.policies, tools);
    let text = serde_json::to_string(&published).expect("tools serialize");
    let mut last = worker.published_tools.lock().await;
    if last.as_deref() == Some(text.as_str()) {
        return;
    }
    let agent = &worker.agent;
    match worker.store.agents().publish_tools(agent.name(), agent.digest(), &text).await {
        Ok(()) => *last = Some(text),
        Err(err) => warn!(agent = %agent.name(), error = %err, "publishing the agent's tools failed"),
    }
}

/// The session's request: its one `mcp_call` item.
async fn request_of(worker: &Worker, session_id: &str) -> Result<McpRequest, StepError> {
    let items = reads::read_all_items_of_kind(worker.store.as_ref(), session_id, ItemKind::McpCall).await?;
    let item = items
        .last()
        .ok_or_else(|| EngineError::Inconsistent(format!("MCP session {session_id} has no mcp_call item")))?;
    Ok(McpRequest::parse(item.body.get())?)
}

/// `McpCall`: the call becomes the turn's deferred call, settled by the tool's policy (an
/// interrupt with the policy's approvers, deadline, summary, review and schema; or queued to run).
pub(super) async fn request(worker: &Worker, claimed: &Claimed, step: &CallStep) -> Result<(), StepError> {
    let session_id = &claimed.step.session_id;
    let request = request_of(worker, session_id).await?;
    let state = run_state(worker, session_id).await?;
    let tools = worker.agent.tools().await.ok();
    if let Some(tools) = &tools {
        publish(worker, tools).await;
    }
    let info = tools.as_ref().and_then(|tools| tools.get(&request.tool_name)).cloned();
    let policies = &worker.agent.config.policies;
    let policy = info.as_ref().map(|info| policies.resolve(&info.name, Some(&info.annotations)));
    let mut transition = mcp::on_request(&state, step, &request, policy);
    if let Some(trace) = super::first_step_trace(claimed) {
        turn::with_trace(&mut transition, &trace);
    }
    turn::with_approvers(&mut transition, policies);
    turn::with_deadlines(&mut transition, policies);
    turn::with_summaries(&mut transition, policies);
    super::review::review_approvals(worker, session_id, &mut transition, &[]).await;
    if let Some(info) = &info {
        edits::with_input_schemas(&mut transition, |tool, kind| {
            (kind == ToolKind::Custom && tool == info.name).then(|| info.input_schema.clone())
        });
    }
    worker.commit(claimed, transition).await?;
    Ok(())
}

/// `ResumeTurn` of a call an MCP client made: its turn ends.
pub(super) async fn recorded(worker: &Worker, claimed: &Claimed, call: &CallEntry) -> Result<(), StepError> {
    let state = run_state(worker, &claimed.step.session_id).await?;
    worker.commit(claimed, mcp::on_recorded(&state, call)).await?;
    Ok(())
}

async fn run_state(worker: &Worker, session_id: &str) -> Result<RunState, StepError> {
    let session = worker
        .store
        .session(session_id)
        .await?
        .ok_or_else(|| EngineError::Inconsistent(format!("no session {session_id}")))?;
    Ok(RunState::parse(session.run_state.get())?)
}

/// `/mcp/{agent}` in `tollgate serve`: the tools this process loaded, and approval-free reads run
/// at once in its sandbox (no record, no step). The tool set is loaded again only when a file in
/// `tools/` changed (name, size or time), so a call costs a few `stat`s, not a hash of every
/// component.
pub struct SandboxReads {
    agent: std::sync::Arc<crate::agent::Agent>,
    loaded: tokio::sync::Mutex<Option<Loaded>>,
}

/// The tool set as last loaded, with what `tools/` looked like then.
struct Loaded {
    fingerprint: Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)>,
    tools: ToolSet,
    published: Vec<PublishedTool>,
}

impl SandboxReads {
    /// Reads of `agent`'s tools.
    pub fn new(agent: std::sync::Arc<crate::agent::Agent>) -> Self {
        SandboxReads { agent, loaded: tokio::sync::Mutex::default() }
    }

    /// `tools/` as names, sizes and modification times.
    fn fingerprint(&self) -> Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)> {
        let mut seen: Vec<_> = std::fs::read_dir(self.agent.dir().join("tools"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let meta = entry.metadata().ok()?;
                Some((entry.file_name(), meta.len(), meta.modified().ok()))
            })
            .collect();
        seen.sort();
        seen
    }

    /// The tool set and its published form, loaded again when `tools/` changed.
    async fn loaded(&self) -> Result<(ToolSet, Vec<PublishedTool>), String> {
        let fingerprint = self.fingerprint();
        let mut loaded = self.loaded.lock().await;
        if let Some(current) = loaded.as_ref().filter(|l| l.fingerprint == fingerprint) {
            return Ok((current.tools.clone(), current.published.clone()));
        }
        let tools = self.agent.tools().await.map_err(|e| format!("{e:#}"))?;
        let published = published_tools(&self.agent.config.policies, &tools);
        *loaded = Some(Loaded { fingerprint, tools: tools.clone(), published: published.clone() });
        Ok((tools, published))
    }
}

impl tollgate_sessions::inline_reads::InlineReads for SandboxReads {
    fn agent(&self) -> &str {
        self.agent.name()
    }

    fn tools(&self) -> tollgate_sessions::inline_reads::BoxFuture<'_, Result<Vec<PublishedTool>, String>> {
        Box::pin(async move { self.loaded().await.map(|(_, published)| published) })
    }

    fn read<'a>(
        &'a self,
        tool: &'a str,
        arguments: &'a serde_json::Value,
    ) -> tollgate_sessions::inline_reads::BoxFuture<'a, tollgate_sessions::inline_reads::ReadOutput> {
        use tollgate_sessions::inline_reads::ReadOutput;
        Box::pin(async move {
            let tools = match self.loaded().await {
                Ok((tools, _)) => tools,
                Err(e) => {
                    return ReadOutput {
                        text: format!("the agent's tools did not load: {e}"),
                        is_error: true,
                    };
                }
            };
            match tools.call(tool, &arguments.to_string(), None).await {
                Ok(output) => ReadOutput { text: output.text(), is_error: output.is_error },
                Err(err) => ReadOutput { text: err.message_for_model(), is_error: true },
            }
        })
    }
}
