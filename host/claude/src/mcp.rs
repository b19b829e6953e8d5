//! The in-process MCP tool server (`"type":"sdk"`), an [`rmcp`] server bridged over the control
//! channel.
//!
//! Read [`ToolServer`] first: an [`rmcp::ServerHandler`] that lists the segment's custom tools and
//! runs a `tools/call` only under a tool use ID the gate permitted. Then [`McpBridge`]: the CLI
//! does not talk MCP over a socket but wraps each JSON-RPC message in an `mcp_message` control
//! request (docs/PROTOCOL.md, "The sdk MCP server"); the bridge feeds those messages into the rmcp
//! service through an in-memory [`rmcp::transport::Transport`] and turns rmcp's answers back into
//! `control_response` frames, matched by JSON-RPC id.
//!
//! What the CLI sees:
//!
//! - `initialize` → rmcp's answer (protocol version negotiated, `capabilities.tools`, server info);
//! - notifications → `{"jsonrpc":"2.0","result":{},"id":0}` at once, as both Agent SDKs answer;
//! - `tools/list` → every tool with `_meta["anthropic/alwaysLoad"]=true` (else the CLI hides MCP
//!   tools behind tool search) and its annotations as MCP hints;
//! - `tools/call` → a [`PermitRequest`] to the segment's loop, which owns the gate and answers
//!   with [`Gate::permit_mcp_call`](tollgate_engine::gate::Gate::permit_mcp_call) for
//!   `_meta["claudecode/toolUseId"]`: run the tool ([`ToolRunner::call`]), run a recorded inline
//!   write ([`ToolRunner::call_recorded`]: answered only once its record is committed; a record
//!   that was not committed stops the segment, [`ToolServer::with_stops`]), return the recorded
//!   result (a resumed deferred call, or an inline write a rerun meets again), or refuse.
//!
//! This module does not decide anything itself (the gate does) and does not own the pipes
//! ([`crate::segment`] does).
//!
//! # Caveats
//!
//! - JSON-RPC ids are unique per server per process, so the bridge keys pending requests by id. A
//!   message rmcp cannot parse is answered by the bridge itself with a JSON-RPC error (`-32600`).
//! - Once the segment's loop has stopped, a `tools/call` is refused (nobody holds the gate).

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ContentBlock, ErrorData,
    Implementation, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    ServerJsonRpcMessage, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::gate::McpPermit;
use tollgate_engine::record::ToolResult;
use tollgate_protocol::HostFrame;

use crate::segment::SegmentEvent;
use crate::tools::{NotRecorded, RecordedCall, ToolContent, ToolRunner, ToolSpec};

/// `_meta` key that makes the CLI put an MCP tool straight into the API request.
pub const ALWAYS_LOAD_META: &str = "anthropic/alwaysLoad";

/// `_meta` key of a `tools/call` that names the model's tool use ID.
pub const TOOL_USE_ID_META: &str = "claudecode/toolUseId";

/// A `tools/call` asking the gate's owner whether it may run.
#[derive(Debug)]
pub struct PermitRequest {
    /// `_meta["claudecode/toolUseId"]`, when the CLI sent one.
    pub tool_use_id: Option<String>,
    /// The custom tool's own name.
    pub tool: String,
    /// Where the permit goes.
    pub reply: oneshot::Sender<McpPermit>,
}

/// The custom tool server of one segment. See the module docs.
pub struct ToolServer {
    server_name: String,
    tools: Vec<ToolSpec>,
    permits: mpsc::UnboundedSender<PermitRequest>,
    runner: Arc<dyn ToolRunner>,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
    stops: Option<mpsc::UnboundedSender<NotRecorded>>,
}

impl std::fmt::Debug for ToolServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServer")
            .field("server_name", &self.server_name)
            .field("tools", &self.tools)
            .finish()
    }
}

impl ToolServer {
    /// A server named `server_name` for the runner's tools, asking `permits` before each call.
    /// `replay_only` is the tool of a resumed deferred call that the runner no longer offers
    /// ([`Gate::replay_only_tool`](tollgate_engine::gate::Gate::replay_only_tool)): it is listed
    /// too, or the CLI would end with `tool_deferred_unavailable`.
    pub fn new(
        server_name: impl Into<String>,
        runner: Arc<dyn ToolRunner>,
        replay_only: Option<String>,
        permits: mpsc::UnboundedSender<PermitRequest>,
        events: Option<mpsc::UnboundedSender<SegmentEvent>>,
    ) -> Self {
        let mut tools = runner.tools();
        if let Some(name) = replay_only.filter(|name| !tools.iter().any(|t| &t.name == name)) {
            tools.push(ToolSpec {
                name,
                description: "No longer offered; it only returns the recorded result of an earlier call."
                    .into(),
                input_schema: json!({"type": "object"}),
                annotations: Default::default(),
            });
        }
        ToolServer { server_name: server_name.into(), tools, permits, runner, events, stops: None }
    }

    /// The same server, telling `stops` when a recorded inline write's record was not committed:
    /// the call is then never answered, and the segment's owner stops the segment. Without it,
    /// such a call is answered with an error result that says the record was not committed.
    pub fn with_stops(mut self, stops: mpsc::UnboundedSender<NotRecorded>) -> Self {
        self.stops = Some(stops);
        self
    }

    /// The `tools/list` entry of one tool.
    fn listed(spec: &ToolSpec) -> Tool {
        let schema = match &spec.input_schema {
            Value::Object(object) => object.clone(),
            _ => Map::from_iter([("type".to_owned(), Value::from("object"))]),
        };
        let mut tool = Tool::new(spec.name.clone(), spec.description.clone(), Arc::new(schema));
        let hints = spec.annotations;
        tool.annotations = Some(
            ToolAnnotations::new()
                .read_only(hints.read_only)
                .idempotent(hints.idempotent)
                .destructive(hints.destructive)
                .open_world(hints.open_world),
        );
        tool.meta = Some(MetaObject(Map::from_iter([(ALWAYS_LOAD_META.to_owned(), Value::Bool(true))])));
        tool
    }

    fn emit(&self, event: SegmentEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }

    async fn run(&self, tool_use_id: Option<String>, name: &str, arguments: Value) -> CallToolResult {
        let (reply, permit) = oneshot::channel();
        let asked = self.permits.send(PermitRequest {
            tool_use_id: tool_use_id.clone(),
            tool: name.to_owned(),
            reply,
        });
        let permit = match asked {
            Ok(()) => permit.await.ok(),
            Err(_) => None,
        };
        let permit = permit.unwrap_or_else(|| {
            McpPermit::Refuse(ToolResult::text(format!("{name} did not run: the segment has ended"), true))
        });
        match permit {
            McpPermit::Run => {
                let id = tool_use_id.unwrap_or_default();
                self.emit(SegmentEvent::ToolCallStarted {
                    tool_use_id: id.clone(),
                    name: name.to_owned(),
                    kind: ToolKind::Custom,
                    input: arguments.clone(),
                });
                let (result, is_error) = match self.runner.call(name, &arguments).await {
                    Ok(output) => {
                        let content = output.content.into_iter().map(content_block).collect();
                        let is_error = output.is_error;
                        (
                            if is_error {
                                CallToolResult::error(content)
                            } else {
                                CallToolResult::success(content)
                            },
                            is_error,
                        )
                    }
                    Err(err) => (CallToolResult::error(vec![ContentBlock::text(err.message)]), true),
                };
                self.emit(SegmentEvent::ToolCallFinished {
                    tool_use_id: id,
                    name: name.to_owned(),
                    kind: ToolKind::Custom,
                    is_error,
                });
                result
            }
            McpPermit::RunRecorded(run) => {
                let id = tool_use_id.unwrap_or_default();
                let cli_name = format!("mcp__{}__{name}", self.server_name);
                let call = RecordedCall { tool_use_id: &id, cli_name: &cli_name, run: &run };
                match self.runner.call_recorded(name, &arguments, call).await {
                    Ok(recorded) => result_of(recorded),
                    Err(not_recorded) => match &self.stops {
                        Some(stops) => {
                            let text = format!("{name}: its record was not committed: {not_recorded}");
                            let _ = stops.send(not_recorded);
                            // Not answered while the segment runs: it stops (the CLI killed, the
                            // bridge dropped) before the CLI reads anything; then this task ends.
                            stops.closed().await;
                            CallToolResult::error(vec![ContentBlock::text(text)])
                        }
                        None => CallToolResult::error(vec![ContentBlock::text(format!(
                            "{name}: its record was not committed: {not_recorded}"
                        ))]),
                    },
                }
            }
            McpPermit::Replay(recorded) | McpPermit::Refuse(recorded) => result_of(recorded),
            other => {
                CallToolResult::error(vec![ContentBlock::text(format!("{name} did not run: {other:?}"))])
            }
        }
    }
}

/// A recorded (or refused) result as the CLI receives it: its text, then its images.
fn result_of(recorded: ToolResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(recorded.text)];
    content
        .extend(recorded.images.into_iter().map(|image| ContentBlock::image(image.data, image.media_type)));
    if recorded.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) }
}

fn content_block(content: ToolContent) -> ContentBlock {
    match content {
        ToolContent::Text(text) => ContentBlock::text(text),
        ToolContent::Image { media_type, data } => ContentBlock::image(base64(&data), media_type),
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.server_name.clone(), env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.iter().map(Self::listed).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let meta_id =
            |meta: &MetaObject| meta.get(TOOL_USE_ID_META).and_then(Value::as_str).map(str::to_owned);
        let tool_use_id =
            meta_id(&context.meta).or_else(|| request.meta.as_ref().and_then(|meta| meta_id(meta)));
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        Ok(self.run(tool_use_id, &request.name, arguments).await.into())
    }
}

/// An error on the in-memory transport: the other side is gone.
#[derive(Debug, thiserror::Error)]
#[error("the MCP bridge channel is closed")]
pub struct BridgeClosed;

/// The rmcp side of the bridge: messages in from the CLI, messages out to it.
struct ChannelTransport {
    incoming: mpsc::UnboundedReceiver<ClientJsonRpcMessage>,
    outgoing: mpsc::UnboundedSender<ServerJsonRpcMessage>,
}

impl rmcp::transport::Transport<RoleServer> for ChannelTransport {
    type Error = BridgeClosed;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let result = self.outgoing.send(item).map_err(|_| BridgeClosed);
        std::future::ready(result)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.incoming.close();
        std::future::ready(Ok(()))
    }
}

/// Carries `mcp_message` control requests into a [`ToolServer`] and its answers back out.
pub struct McpBridge {
    server_name: String,
    to_server: mpsc::UnboundedSender<ClientJsonRpcMessage>,
    from_server: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
    /// JSON-RPC id (as JSON text) → control request id.
    pending: HashMap<String, String>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for McpBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpBridge")
            .field("server_name", &self.server_name)
            .field("pending", &self.pending)
            .finish()
    }
}

impl McpBridge {
    /// Starts the rmcp service for `server` on a background task.
    pub fn start(server: ToolServer) -> McpBridge {
        let server_name = server.server_name.clone();
        let (to_server, incoming) = mpsc::unbounded_channel();
        let (outgoing, from_server) = mpsc::unbounded_channel();
        let transport = ChannelTransport { incoming, outgoing };
        let task = tokio::spawn(async move {
            match rmcp::serve_server(server, transport).await {
                Ok(running) => {
                    let _ = running.waiting().await;
                }
                Err(err) => tracing::debug!(%err, "the MCP tool server stopped during its handshake"),
            }
        });
        McpBridge { server_name, to_server, from_server, pending: HashMap::new(), task }
    }

    /// Takes one `mcp_message` (`server_name`, JSON-RPC `message`) under control request
    /// `request_id`. Returns the answer when it is known at once (a notification, a message for
    /// another server, a message rmcp cannot read); otherwise the answer comes from
    /// [`McpBridge::next_answer`].
    pub fn accept(&mut self, request_id: &str, server_name: &str, message: &Value) -> Option<HostFrame> {
        let id = message.get("id").filter(|id| !id.is_null()).cloned();
        if server_name != self.server_name {
            return Some(HostFrame::error_response(
                request_id,
                format!("no sdk MCP server named {server_name:?} (this host serves {:?})", self.server_name),
            ));
        }
        let parsed = serde_json::from_value::<ClientJsonRpcMessage>(message.clone());
        match (parsed, id) {
            (Ok(parsed), None) => {
                let _ = self.to_server.send(parsed);
                Some(HostFrame::mcp_notification_ack(request_id))
            }
            (Ok(parsed), Some(id)) => {
                if self.to_server.send(parsed).is_err() {
                    return Some(jsonrpc_error(request_id, id, -32603, "the MCP tool server has stopped"));
                }
                self.pending.insert(id.to_string(), request_id.to_owned());
                None
            }
            (Err(err), Some(id)) => {
                Some(jsonrpc_error(request_id, id, -32600, &format!("invalid request: {err}")))
            }
            (Err(_), None) => Some(HostFrame::mcp_notification_ack(request_id)),
        }
    }

    /// The CLI withdrew `request_id`: drop its answer when it comes.
    pub fn cancel(&mut self, request_id: &str) {
        self.pending.retain(|_, pending| pending != request_id);
    }

    /// The next answer for the CLI. Waits forever when nothing is pending (use it in a `select!`).
    pub async fn next_answer(&mut self) -> HostFrame {
        loop {
            let Some(message) = self.from_server.recv().await else {
                return std::future::pending().await;
            };
            let Ok(value) = serde_json::to_value(&message) else { continue };
            let key = value.get("id").map(Value::to_string).unwrap_or_default();
            match self.pending.remove(&key) {
                Some(request_id) => return HostFrame::mcp_response(request_id, value),
                None => tracing::debug!(%value, "dropping an MCP message no pending request waits for"),
            }
        }
    }
}

impl Drop for McpBridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn jsonrpc_error(request_id: &str, id: Value, code: i64, message: &str) -> HostFrame {
    HostFrame::mcp_response(
        request_id,
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
}

/// Standard base64 with padding (image content for MCP).
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::tools::{CallFuture, ToolOutput, ToolRunError};
    use tollgate_engine::catalog::ToolKind;
    use tollgate_engine::gate::{Gate, ToolCall};
    use tollgate_engine::policy::{Annotations, Policies};
    use tollgate_engine::record::{Outcome, ToolCallRecord};

    struct Echo;

    impl ToolRunner for Echo {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "echo".into(),
                description: "Echo.".into(),
                input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
                annotations: Annotations { read_only: true, ..Annotations::default() },
            }]
        }

        fn call<'a>(&'a self, _name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
            Box::pin(async move {
                match arguments["text"].as_str() {
                    Some(text) => Ok(ToolOutput::text(format!("echo: {text}"))),
                    None => Err(ToolRunError { message: "no text".into() }),
                }
            })
        }
    }

    /// A bridge whose permits come from `gate`, answered by a task (the segment's loop in
    /// production); the test decides hooks on the same gate.
    fn bridge(gate: Gate) -> (McpBridge, Arc<Mutex<Gate>>) {
        let replay_only = gate.replay_only_tool().map(str::to_owned);
        let gate = Arc::new(Mutex::new(gate));
        let (permits, mut asked) = mpsc::unbounded_channel::<PermitRequest>();
        let owner = gate.clone();
        tokio::spawn(async move {
            while let Some(request) = asked.recv().await {
                let permit =
                    owner.lock().unwrap().permit_mcp_call(request.tool_use_id.as_deref(), &request.tool);
                let _ = request.reply.send(permit);
            }
        });
        (McpBridge::start(ToolServer::new("tools", Arc::new(Echo), replay_only, permits, None)), gate)
    }

    fn echo_gate() -> Gate {
        Gate::new(Policies::default(), crate::tools::catalog("tools", &Echo.tools()).unwrap())
    }

    async fn ask(bridge: &mut McpBridge, request_id: &str, message: Value) -> Value {
        if let Some(frame) = bridge.accept(request_id, "tools", &message) {
            return serde_json::from_str(&frame.to_json()).unwrap();
        }
        let frame =
            tokio::time::timeout(std::time::Duration::from_secs(5), bridge.next_answer()).await.unwrap();
        serde_json::from_str(&frame.to_json()).unwrap()
    }

    async fn handshake(bridge: &mut McpBridge) -> Value {
        let init = ask(
            bridge,
            "r0",
            json!({"method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "claude-code", "version": "2.1.328"}}, "jsonrpc": "2.0", "id": 0}),
        )
        .await;
        let ack = ask(bridge, "r1", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(
            ack["response"]["response"]["mcp_response"],
            json!({"jsonrpc": "2.0", "result": {}, "id": 0})
        );
        init
    }

    #[tokio::test]
    async fn the_handshake_and_tools_list_answer_under_the_cli_request_ids() {
        let (mut bridge, _) = bridge(echo_gate());
        let init = handshake(&mut bridge).await;
        assert_eq!(init["response"]["request_id"], "r0");
        let result = &init["response"]["response"]["mcp_response"]["result"];
        assert_eq!(result["protocolVersion"], "2025-11-25", "{init}");
        assert!(result["capabilities"]["tools"].is_object(), "{init}");

        let list = ask(&mut bridge, "r2", json!({"method": "tools/list", "jsonrpc": "2.0", "id": 1})).await;
        let tools = &list["response"]["response"]["mcp_response"]["result"]["tools"];
        assert_eq!(tools[0]["name"], "echo", "{list}");
        assert_eq!(tools[0]["_meta"][ALWAYS_LOAD_META], true, "{list}");
        assert_eq!(tools[0]["annotations"]["readOnlyHint"], true, "{list}");
    }

    #[tokio::test]
    async fn tools_call_runs_only_under_a_permitted_tool_use_id() {
        let (mut bridge, gate) = bridge(echo_gate());
        handshake(&mut bridge).await;
        let call = |id: u32, tool_use_id: &str| {
            json!({"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "ping"},
                "_meta": {TOOL_USE_ID_META: tool_use_id, "progressToken": id}}, "jsonrpc": "2.0", "id": id})
        };
        let refused = ask(&mut bridge, "r2", call(2, "toolu_unknown")).await;
        let result = &refused["response"]["response"]["mcp_response"]["result"];
        assert_eq!(result["isError"], true, "{refused}");

        let decided =
            gate.lock().unwrap().pre_tool_use(&ToolCall::new("toolu_1", "mcp__tools__echo", json!({})));
        assert!(matches!(decided, tollgate_engine::gate::Next::Decided(d) if d.is_allow()));
        let ran = ask(&mut bridge, "r3", call(3, "toolu_1")).await;
        let result = &ran["response"]["response"]["mcp_response"]["result"];
        assert_eq!(result["content"][0]["text"], "echo: ping", "{ran}");
        // The permit is used once.
        let again = ask(&mut bridge, "r4", call(4, "toolu_1")).await;
        assert_eq!(again["response"]["response"]["mcp_response"]["result"]["isError"], true, "{again}");
    }

    /// What the tool server answers a resumed segment's `tools/call` of `record`'s call
    /// (`toolu_9`, `echo`).
    async fn replay_of(record: ToolCallRecord) -> Value {
        let (mut bridge, gate) = bridge(echo_gate().resuming(record));
        handshake(&mut bridge).await;
        let _ = gate.lock().unwrap().pre_tool_use(&ToolCall::new("toolu_9", "mcp__tools__echo", json!({})));
        ask(
            &mut bridge,
            "r2",
            json!({"method": "tools/call", "params": {"name": "echo", "arguments": {},
                "_meta": {TOOL_USE_ID_META: "toolu_9"}}, "jsonrpc": "2.0", "id": 2}),
        )
        .await
    }

    #[tokio::test]
    async fn a_resumed_call_returns_its_record_without_running_the_tool() {
        let record = ToolCallRecord::new(
            "toolu_9",
            "echo",
            ToolKind::Custom,
            json!({"text": "x"}),
            Outcome::Succeeded { output: "recorded".into() },
        );
        let replay = replay_of(record).await;
        assert_eq!(
            replay["response"]["response"]["mcp_response"]["result"]["content"][0]["text"],
            "recorded"
        );
    }

    #[tokio::test]
    async fn a_resumed_call_returns_its_recorded_images_after_its_text() {
        let mut record = ToolCallRecord::new(
            "toolu_9",
            "echo",
            ToolKind::Custom,
            json!({"text": "x"}),
            Outcome::Succeeded { output: "a chart".into() },
        );
        let reference = tollgate_engine::media::MediaRef {
            digest: format!("sha256:{}", "e".repeat(64)),
            media_type: "image/png".into(),
        };
        record.images.push(tollgate_engine::record::RecordedImage { reference, data: Some("aGk=".into()) });
        let replay = replay_of(record).await;
        let content = &replay["response"]["response"]["mcp_response"]["result"]["content"];
        assert_eq!(content[0]["text"], "a chart", "{replay}");
        assert_eq!(content[1], json!({"type": "image", "data": "aGk=", "mimeType": "image/png"}), "{replay}");
    }

    #[tokio::test]
    async fn messages_for_other_servers_and_garbage_get_errors() {
        let (mut bridge, _) = bridge(echo_gate());
        let other = bridge
            .accept("r0", "other", &json!({"jsonrpc": "2.0", "method": "tools/list", "id": 1}))
            .unwrap();
        assert!(other.to_json().contains("\"subtype\":\"error\""));
        let garbage =
            bridge.accept("r1", "tools", &json!({"jsonrpc": "2.0", "id": 5, "nonsense": true})).unwrap();
        let value: Value = serde_json::from_str(&garbage.to_json()).unwrap();
        assert_eq!(value["response"]["response"]["mcp_response"]["error"]["code"], -32600);
        assert_eq!(value["response"]["response"]["mcp_response"]["id"], 5);
    }

    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
