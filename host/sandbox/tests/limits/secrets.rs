//! A secret granted to a tool from the environment is read at load, reaches the tool, and never
//! reaches a log line, whatever the level, nor a debug print of the loaded manifests.

use crate::util::TestServer;
use crate::{CapturedLog, assert_a_working_call_follows, hostile, serial};

#[tokio::test]
async fn a_config_secret_reaches_the_tool_and_no_log_line() {
    let _serial = serial().await;
    let secret = format!("sk-live-{}-{}", std::process::id(), "Zq8vW3");
    // SAFETY: set before anything of this test reads the environment; no other test reads it.
    unsafe { std::env::set_var("TOLLGATE_LIMITS_TEST_SECRET", &secret) };
    let allowed = TestServer::start(200, "charged").await;
    let denied = TestServer::start(200, "should never be seen").await;

    let log = CapturedLog::start();
    let manifest = format!(
        "allowed_outbound_hosts = [\"http://{}\"]\n[config]\nSECRET = {{ env = \"TOLLGATE_LIMITS_TEST_SECRET\" }}\n",
        allowed.addr
    );
    let (_dir, tools) = hostile(&manifest).await;
    // Read once, at load: changing the environment afterwards changes nothing.
    // SAFETY: as above.
    unsafe { std::env::set_var("TOLLGATE_LIMITS_TEST_SECRET", "changed-after-load") };
    let args = serde_json::json!({"allowed_url": allowed.url(), "denied_url": denied.url()}).to_string();
    let output = tools.call("use_secret", &args, None).await.unwrap();
    let debug_print = format!("{:?}", tools.components());
    let described =
        tools.components().iter().flat_map(|c| c.manifest.describe()).collect::<Vec<_>>().join("\n");
    let text = log.text();
    drop(log);

    assert_eq!(output.text(), "200 charged; denied: true");
    assert_eq!(allowed.received()[0].header("authorization"), Some(format!("Bearer {secret}").as_str()));
    assert!(denied.received().is_empty());
    assert!(text.contains("using the secret"), "the guest's own log line is there:\n{text}");
    assert!(text.contains("outbound request denied") && text.contains("/steal"), "{text}");
    assert!(!text.contains(&secret), "the secret is in the log:\n{text}");
    assert!(!text.contains("key="), "a denied request's query is not logged:\n{text}");
    assert!(!debug_print.contains(&secret), "the secret is in a debug print: {debug_print}");
    assert!(described.contains("SECRET (env TOLLGATE_LIMITS_TEST_SECRET, set)"), "{described}");
    assert!(!described.contains(&secret), "{described}");
    assert_a_working_call_follows().await;
}
