//! A hostile guest looking for a way around its grants rather than breaking its host: IP
//! addresses spelled so that the allow-list and the resolver read them differently.

use tollgate_sandbox::{CallError, Manifests, ToolSet};
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir, sandbox};

async fn hostile(manifest: &str) -> (ToolsDir, ToolSet) {
    let dir = ToolsDir::new().component("hostile", guests::HOSTILE).manifest("hostile", manifest);
    let tools = dir.load().await;
    (dir, tools)
}

async fn get(tools: &ToolSet, url: &str) -> Result<String, CallError> {
    let arguments = serde_json::json!({ "url": url }).to_string();
    tools.call("http_get", &arguments, None).await.map(|output| output.text())
}

#[tokio::test]
async fn an_address_in_a_resolver_only_spelling_is_refused_even_under_a_wildcard_host() {
    let server = TestServer::start(200, "reached").await;
    let port = server.addr.port();
    let (_dir, tools) = hostile(&format!("allowed_outbound_hosts = [\"http://*:{port}\"]\n")).await;
    for host in ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "127.0.0.1."] {
        let error = get(&tools, &format!("http://{host}:{port}/{host}")).await.unwrap_err();
        assert!(error.message_for_model().contains("denied"), "{host}: {error}");
    }
    let spelled: Vec<String> = server.take().into_iter().map(|r| r.path).collect();
    assert!(spelled.is_empty(), "the resolver read these as 127.0.0.1 and they went out: {spelled:?}");
    assert_eq!(get(&tools, &format!("http://127.0.0.1:{port}/plain")).await.unwrap(), "200 reached");
}

#[tokio::test]
async fn a_grant_with_a_leading_zero_is_refused_at_load_not_read_as_octal() {
    // `127.0.0.010` reads as 127.0.0.10 to a person and as 127.0.0.8 to the resolver.
    let octal = TestServer::start_on("127.0.0.8:0".parse().unwrap(), "reached 127.0.0.8").await;
    let port = octal.addr.port();
    let dir = ToolsDir::new()
        .component("hostile", guests::HOSTILE)
        .manifest("hostile", &format!("allowed_outbound_hosts = [\"http://127.0.0.010:{port}\"]\n"));
    let loaded = sandbox().load_tools(&dir.tools(), &Manifests::default()).await;
    if let Ok(tools) = &loaded {
        let answer = get(tools, &format!("http://127.0.0.010:{port}/octal")).await;
        assert!(octal.received().is_empty(), "the grant `127.0.0.010` reached 127.0.0.8: {answer:?}");
    }
    let Err(error) = loaded else { panic!("the manifest `127.0.0.010` loaded") };
    let text = error.to_string();
    assert!(text.contains("127.0.0.010") && text.contains("127.0.0.8"), "{text}");
}

#[tokio::test]
async fn an_address_matches_its_grant_in_every_ipv6_spelling() {
    let v4 = TestServer::start(200, "v4").await;
    let v6 = TestServer::start_on("[::1]:0".parse().unwrap(), "v6").await;
    let manifest = format!(
        "allowed_outbound_hosts = [\"http://127.0.0.1:{}\", \"http://[0:0::1]:{}\", \"tcp://[0:0:0:0:0:0:0:1]:{}\"]\n",
        v4.addr.port(),
        v6.addr.port(),
        v6.addr.port()
    );
    let (_dir, tools) = hostile(&manifest).await;
    let mapped = get(&tools, &format!("http://[::ffff:127.0.0.1]:{}/mapped", v4.addr.port())).await;
    assert_eq!(mapped.as_deref(), Ok("200 v4"), "an IPv4-mapped IPv6 address is its IPv4 address");
    let short = get(&tools, &format!("http://[::1]:{}/short", v6.addr.port())).await;
    assert_eq!(short.as_deref(), Ok("200 v6"), "`[0:0::1]` is `[::1]`");
    let connect = serde_json::json!({ "addr": v6.addr.to_string() }).to_string();
    let tcp = tools.call("tcp_connect", &connect, None).await.map(|o| o.text());
    assert_eq!(tcp.as_deref(), Ok("connected"), "`tcp://[0:0:0:0:0:0:0:1]` grants `[::1]`");
}
