//! The `tollgate-api` binary: the API alone, as `tollgate api` serves it, with no Worker linked in.
//! (The API's routes are tested end to end, with Workers, in `host/tollgate/tests/durable`.)

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tollgate_api_types::client::ApiClient;

const BINARY: &str = env!("CARGO_BIN_EXE_tollgate-api");

/// Not one byte of wasmtime is linked into it: the Worker (sandbox, CLI runner) stays out.
#[test]
fn the_api_binary_links_no_wasmtime() {
    let binary = std::fs::read(BINARY).expect("the built tollgate-api binary");
    let mentions = |needle: &[u8]| binary.windows(needle.len()).any(|w| w == needle);
    assert!(mentions(b"tollgate API on "), "the check reads the binary's text");
    assert!(!mentions(b"wasmtime"), "tollgate-api links wasmtime");
}

/// It serves the API over a store with no Worker: a session it starts is stored with its first
/// message queued, its snapshot answers, and SIGTERM stops it with exit code 0.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_binary_serves_sessions_over_a_store_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = format!("sqlite://{}", dir.path().join("tollgate.db").display());
    let mut child = tokio::process::Command::new(BINARY)
        .args(["--db", &db, "--listen", "127.0.0.1:0", "--insecure-open"])
        .env_remove("TOLLGATE_TOKEN")
        .env_remove("TOLLGATE_TOKEN_FILE")
        .env_remove("TOLLGATE_LISTEN")
        .env_remove("TOLLGATE_TLS_CERT")
        .env_remove("TOLLGATE_TLS_KEY")
        .env_remove("TOLLGATE_WEBHOOKS")
        .env_remove("TOLLGATE_AUTH_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start tollgate-api");
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            if let Some(rest) = line.strip_prefix("tollgate API on ") {
                return rest.split_whitespace().next().expect("an address").to_owned();
            }
        }
        panic!("tollgate-api ended before it said where it listens");
    })
    .await
    .expect("tollgate-api says where it listens");

    let client = ApiClient::new(&url, None).expect("a client");
    let created = client.create_session(Some("s-1"), Some("hello")).await.expect("create a session");
    assert!(created.created, "{created:?}");
    assert!(created.message.is_some(), "the first message has its receipt: {created:?}");
    let snapshot = client.snapshot("s-1").await.expect("its snapshot");
    assert_eq!(snapshot.session_id, "s-1");
    assert_eq!(snapshot.status, "running", "the turn waits for a Worker: {snapshot:?}");

    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: kill(2) on the child this test started and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("tollgate-api stops on SIGTERM")
        .expect("its exit status");
    assert!(status.success(), "{status}");
}
