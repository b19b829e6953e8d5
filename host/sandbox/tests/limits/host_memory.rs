//! Guests that try to make the host hold memory for them: a request body the host would buffer,
//! header sets it would keep. Before: 1 GiB body with `memory_mb = 16` → 1.07 GB of host memory;
//! 10,000 header sets of 127 KiB → 1.29 GB.

use tollgate_sandbox::CallError;

use crate::util::TestServer;
use crate::{assert_a_working_call_follows, hostile, memory_growth, serial};

const MB: u64 = 1 << 20;

#[tokio::test]
async fn a_gigabyte_body_to_a_denied_host_is_drained_without_being_buffered() {
    let _serial = serial().await;
    let refused = TestServer::start(200, "should never be seen").await;
    let (_dir, tools) = hostile("memory_mb = 16\ntimeout_ms = 120000\n").await;
    let args = format!(r#"{{"authority":"{}","megabytes":1024}}"#, refused.addr);
    let (result, growth) = memory_growth(async || tools.call("upload", &args, None).await).await;
    let error = result.unwrap_err();
    // The whole body went through the host and was thrown away; then the request was refused.
    assert!(
        matches!(&error, CallError::Failed { message, .. }
            if message.contains("wrote 1073741824 bytes") && message.contains("HttpRequestDenied")),
        "{error}"
    );
    eprintln!("1 GiB body to a denied host: host memory grew by {} MiB", growth / MB);
    assert!(growth < 200 * MB, "the host grew by {} MiB (1.07 GB before the fix)", growth / MB);
    assert!(refused.received().is_empty(), "nothing reached the denied host");
    assert_a_working_call_follows().await;
}

#[tokio::test]
async fn a_body_to_a_denied_host_cannot_outlast_the_deadline() {
    let _serial = serial().await;
    let refused = TestServer::start(200, "").await;
    let (_dir, tools) = hostile("memory_mb = 16\ntimeout_ms = 300\n").await;
    let args = format!(r#"{{"authority":"{}","megabytes":100000}}"#, refused.addr);
    let started = std::time::Instant::now();
    let error = tools.call("upload", &args, None).await.unwrap_err();
    assert!(matches!(error, CallError::DeadlineExceeded { .. }), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "stopped after {:?}", started.elapsed());
    assert_a_working_call_follows().await;
}

#[tokio::test]
async fn header_sets_too_large_or_too_many_fail_the_call_within_the_tools_memory() {
    let _serial = serial().await;
    let (_dir, tools) = hostile("memory_mb = 16\n").await;

    // The attack as found: 10,000 header sets of 127 KiB, never freed.
    let (result, growth) =
        memory_growth(async || tools.call("header_hoard", r#"{"count":10000,"kib":127}"#, None).await).await;
    let error = result.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, CallError::Trapped { .. }), "{text}");
    assert!(text.contains("header set grew past 64 KiB") && text.contains("16 MiB tool"), "{text}");
    eprintln!("10,000 header sets of 127 KiB: host memory grew by {} MiB", growth / MB);
    assert!(growth < 200 * MB, "the host grew by {} MiB (1.29 GB before the fix)", growth / MB);

    // Within the size of one set, the number of live handles gives out.
    let (result, growth) =
        memory_growth(async || tools.call("header_hoard", r#"{"count":10000,"kib":60}"#, None).await).await;
    let error = result.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, CallError::Trapped { .. }), "{text}");
    assert!(text.contains("more than 256 wasi resources at once"), "{text}");
    assert!(growth < 200 * MB, "the host grew by {} MiB", growth / MB);

    // An ordinary number of ordinary headers is fine.
    let output = tools.call("header_hoard", r#"{"count":20,"kib":4}"#, None).await.unwrap();
    assert_eq!(output.text(), "holding 20 header sets");
    assert_a_working_call_follows().await;
}

#[tokio::test]
async fn an_allowed_upload_streams_through_the_smaller_body_chunks() {
    let _serial = serial().await;
    let server = TestServer::start(201, "stored").await;
    let (_dir, tools) =
        hostile(&format!("allowed_outbound_hosts = [\"http://{}\"]\nmemory_mb = 16\n", server.addr)).await;
    let args = format!(r#"{{"authority":"{}","megabytes":1}}"#, server.addr);
    let output = tools.call("upload", &args, None).await.unwrap();
    assert_eq!(output.text(), "wrote 1048576 bytes; status 201");
    assert_eq!(server.received()[0].body.len(), 1 << 20);
}
