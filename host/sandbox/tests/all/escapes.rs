//! A hostile guest looking for a way around its grants rather than breaking its host: IP
//! addresses spelled so that the allow-list and the resolver read them differently, and symbolic
//! links that point out of a writable folder for other programs to follow.

use std::path::Path;

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
async fn a_denied_request_names_its_destination_and_the_allow_list_in_the_tools_error() {
    let server = TestServer::start(200, "reached").await;
    let port = server.addr.port();
    let (_dir, tools) = hostile(&format!("allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]\n")).await;
    let error = get(&tools, "http://example.invalid:8080/pay?token=s3cret").await.unwrap_err();
    let text = error.message_for_model();
    // The guest's own message, then the sandbox's: the destination without its query (a
    // credential, maybe), and the allow-list.
    let explained = format!(
        "(the sandbox denied outbound access to http://example.invalid:8080/pay: not on this tool's \
         allow-list, which is http://127.0.0.1:{port})"
    );
    assert!(text.ends_with(&explained), "{text}");
    // A call that was not refused says nothing of it.
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

/// A hostile guest with `/out` granted writable on `out`.
async fn writable(out: &Path) -> (ToolsDir, ToolSet) {
    hostile(&format!("[[dirs]]\npath = \"{}\"\nguest = \"/out\"\nwritable = true\n", out.display())).await
}

async fn make_link(tools: &ToolSet, target: &str, link: &str) -> Result<String, CallError> {
    let arguments = serde_json::json!({ "target": target, "link": link }).to_string();
    tools.call("make_link", &arguments, None).await.map(|output| output.text())
}

#[tokio::test]
async fn a_link_out_of_a_writable_grant_is_refused_when_made() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("deep")).unwrap();
    let (_dir, tools) = writable(out.path()).await;
    let links = [
        ("../../../../etc/passwd", "/out/passwd"),
        ("..", "/out/up"),
        ("../..", "/out/deep/up"),
        ("deep/../..", "/out/down-and-up"),
        ("/etc/passwd", "/out/absolute"),
        // It lands inside today, but renaming the link or a folder above it moves it out.
        ("../deep", "/out/deep/sibling"),
    ];
    for (target, link) in links {
        let made = make_link(&tools, target, link).await;
        let on_disk = out.path().join(link.trim_start_matches("/out/"));
        let left = std::fs::read_link(&on_disk).ok();
        assert!(left.is_none(), "`{link} -> {target}` was left on disk ({made:?}): {left:?}");
        let error = made.unwrap_err();
        assert!(error.message_for_model().contains("not permitted"), "{link}: {error}");
    }
    assert_eq!(
        tools.call("echo", r#"{"text":"still here"}"#, None).await.unwrap().text(),
        "still here (attempt 1, key None)"
    );
}

#[tokio::test]
async fn a_link_that_lands_inside_cannot_be_renamed_out() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("a")).unwrap();
    let (_dir, tools) = writable(out.path()).await;
    // `/out/a/up -> ..` is `/out`; moved to `/out/up`, the same link is the grant's parent.
    let _ = make_link(&tools, "..", "/out/a/up").await;
    let moved = tools.call("rename", r#"{"from":"/out/a/up","to":"/out/up"}"#, None).await;
    let escaped = out.path().join("up");
    if let Ok(target) = std::fs::read_link(&escaped) {
        let lands = std::fs::canonicalize(&escaped).unwrap();
        panic!("`/out/up -> {}` ({moved:?}) lands on {}", target.display(), lands.display());
    }
    assert!(std::fs::read_link(out.path().join("a/up")).is_err(), "the climbing link was never made");
}

#[tokio::test]
async fn links_that_point_down_inside_the_grant_keep_working() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(out.path().join("runs/42")).unwrap();
    std::fs::write(out.path().join("runs/42/report.txt"), "run 42").unwrap();
    let (_dir, tools) = writable(out.path()).await;
    for (target, link) in
        [("runs/42", "/out/latest"), (".", "/out/here"), ("./report.txt", "/out/runs/42/copy")]
    {
        assert_eq!(make_link(&tools, target, link).await.unwrap(), "linked", "{link} -> {target}");
        let on_disk = out.path().join(link.trim_start_matches("/out/"));
        assert_eq!(std::fs::read_link(on_disk).unwrap(), Path::new(target));
    }
    for path in ["/out/latest/report.txt", "/out/here/runs/42/copy", "/out/here/latest/copy"] {
        let read = tools.call("read_file", &serde_json::json!({ "path": path }).to_string(), None).await;
        assert_eq!(read.map(|o| o.text()).as_deref(), Ok("run 42"), "{path}");
    }
}
