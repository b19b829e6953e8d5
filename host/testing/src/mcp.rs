//! An MCP client of a server's `/mcp/{agent}` (rmcp's, over Streamable HTTP), as the tests and the
//! benchmark call it.

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};

/// A connected MCP client.
pub type Client = RunningService<RoleClient, ClientConfig>;

/// A client of `url`'s `/mcp/{agent}` as the holder of `token`: one that declares the Tasks
/// extension (the 2026-07-28 protocol, capabilities in each request), or a plain one (the
/// `initialize` handshake, as the Claude Code CLI makes).
///
/// # Panics
/// When it cannot connect.
pub async fn client(url: &str, agent: &str, token: &str, tasks: bool) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp/{agent}")).auth_header(token),
    );
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    let info = ClientConfig::new(capabilities, Implementation::new("tollgate-test", "1"));
    if tasks {
        let lifecycle =
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        info.serve_with_lifecycle(transport, lifecycle).await.expect("an MCP client connects")
    } else {
        info.serve(transport).await.expect("an MCP client connects")
    }
}
