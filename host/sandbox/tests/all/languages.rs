//! The example tools in every guest language, built from source and loaded into one sandbox:
//! Rust (the baseline, built by `tollgate-test-guests`), Go, JavaScript and Python (built once per
//! test binary by `scripts/build-guests.sh` into `target/guests/`). The same calls must give the
//! same results in all four, including the idempotency key the payments service receives,
//! `is-error` outputs, a `retryable` error, an allowed and a denied HTTP request. Then the
//! hostile-guest checks (deadline, memory cap, next call works) for a Go and a JavaScript guest.
//!
//! The Go, JavaScript and Python toolchains come from `scripts/install-guest-toolchains.sh`; when
//! one is missing, these tests fail and say so (they never skip).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tollgate_sandbox::{CallError, DeferredExecution, ToolSet};
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir};

/// The languages built by `scripts/build-guests.sh`.
const BUILT: [&str; 3] = ["go", "js", "python"];

/// The component `name` (orders, payments, hostile) of `lang`.
fn component(lang: &str, name: &str) -> String {
    if lang == "rust" {
        return match name {
            "orders" => guests::ORDERS,
            "payments" => guests::PAYMENTS,
            "hostile" => guests::HOSTILE,
            _ => unreachable!("no Rust guest {name}"),
        }
        .to_string();
    }
    guests::built(lang, name).display().to_string()
}

/// A payments service on 127.0.0.1 that records every request and answers by the order id in
/// the JSON body: "refuse" → 422, "busy" → 503, anything else → 201 with a refund naming the
/// idempotency key it got. Stops when dropped.
async fn payments_service() -> TestServer {
    TestServer::respond_with(|request| {
        let order = serde_json::from_str::<serde_json::Value>(&request.body)
            .ok()
            .and_then(|v| v["order_id"].as_str().map(str::to_string))
            .unwrap_or_default();
        let key = request.header("idempotency-key").unwrap_or("").to_string();
        match order.as_str() {
            "refuse" => (422, r#"{"error":"amount exceeds the order total"}"#.to_string()),
            "busy" => (503, "busy".to_string()),
            _ => (201, serde_json::json!({"refund_id": format!("r-{order}"), "key": key}).to_string()),
        }
    })
    .await
}

fn execution(attempt: u32) -> DeferredExecution {
    DeferredExecution::new("session-42", "turn-1", "toolu_01", attempt)
}

/// A call's result as one comparable line.
fn outcome(result: &Result<tollgate_sandbox::ToolOutput, CallError>) -> String {
    match result {
        Ok(output) if output.is_error => format!("is-error: {}", output.text()),
        Ok(output) => format!("ok: {}", output.text()),
        Err(CallError::Failed { message, .. }) => format!("failed: {message}"),
        Err(CallError::Retryable { message, .. }) => format!("retryable: {message}"),
        Err(other) => format!("host error: {other}"),
    }
}

/// The WIT leaves the detail after these prefixes to each language (the Rust example's HTTP
/// client words its errors its own way); everything else must match exactly.
fn without_detail(line: &str) -> String {
    for prefix in ["retryable: payments service unreachable:", "failed: outbound request denied:"] {
        if line.starts_with(prefix) {
            return format!("{prefix} …");
        }
    }
    line.to_string()
}

/// The tools directory of `lang`'s two examples, the payments one granted `hosts` and `config`.
fn examples(lang: &str, hosts: &str, config: &str) -> ToolsDir {
    ToolsDir::new()
        .component("orders", &component(lang, "orders"))
        .component("payments", &component(lang, "payments"))
        .manifest(
            "payments",
            &format!("allowed_outbound_hosts = [{hosts}]\ntimeout_ms = 20000\n[config]\n{config}"),
        )
}

/// Runs every scenario against `lang`'s examples and returns (scenario, outcome) pairs.
async fn scenarios(lang: &str, payments: &TestServer) -> Vec<(&'static str, String)> {
    let allowed = format!("\"http://{}\"", payments.addr);
    let config = format!("PAYMENTS_URL = \"{}\"\n", payments.url());
    let dir = examples(lang, &allowed, &config);
    let tools = dir.load().await;
    let mut out = Vec::new();
    let mut record = |name, result: Result<_, CallError>| out.push((name, outcome(&result)));

    record("lookup a known order", tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await);
    record("lookup order 99", tools.call("lookup_order", r#"{"order_id":"99"}"#, None).await);
    record("lookup an unknown order", tools.call("lookup_order", r#"{"order_id":"100"}"#, None).await);
    record("lookup order 07", tools.call("lookup_order", r#"{"order_id":"07"}"#, None).await);
    record(
        "refund with a reason",
        tools
            .call(
                "create_refund",
                r#"{"order_id":"7","amount_cents":2500,"reason":"late delivery"}"#,
                Some(&execution(1)),
            )
            .await,
    );
    record(
        "refund without a reason",
        tools.call("create_refund", r#"{"order_id":"8","amount_cents":1}"#, Some(&execution(1))).await,
    );
    record(
        "refund refused (422)",
        tools
            .call("create_refund", r#"{"order_id":"refuse","amount_cents":99999}"#, Some(&execution(1)))
            .await,
    );
    record(
        "refund, service busy (503), attempt 1",
        tools.call("create_refund", r#"{"order_id":"busy","amount_cents":100}"#, Some(&execution(1))).await,
    );
    record(
        "refund, service busy (503), attempt 2",
        tools.call("create_refund", r#"{"order_id":"busy","amount_cents":100}"#, Some(&execution(2))).await,
    );
    record(
        "refund inline (no execution)",
        tools.call("create_refund", r#"{"order_id":"7","amount_cents":100}"#, None).await,
    );

    // What the payments service received, in order: method, path, key, content type and body.
    let received = payments.take();
    let expected_bodies = [
        serde_json::json!({"order_id":"7","amount_cents":2500,"reason":"late delivery"}),
        serde_json::json!({"order_id":"8","amount_cents":1,"reason":null}),
        serde_json::json!({"order_id":"refuse","amount_cents":99999,"reason":null}),
        serde_json::json!({"order_id":"busy","amount_cents":100,"reason":null}),
        serde_json::json!({"order_id":"busy","amount_cents":100,"reason":null}),
    ];
    assert_eq!(received.len(), expected_bodies.len(), "{lang}: the service received {received:#?}");
    for (request, expected) in received.iter().zip(&expected_bodies) {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/refunds"),
            "{lang}: {request:?}"
        );
        assert_eq!(
            request.header("idempotency-key"),
            Some("session-42/turn-1/toolu_01"),
            "{lang}: {request:?}"
        );
        assert!(
            request.header("content-type").is_some_and(|t| t.starts_with("application/json")),
            "{lang}: {request:?}"
        );
        let body: serde_json::Value = serde_json::from_str(&request.body)
            .unwrap_or_else(|e| panic!("{lang}: the body is not JSON ({e}): {request:?}"));
        assert_eq!(&body, expected, "{lang}: {request:?}");
    }

    // Refused by the host: PAYMENTS_URL names a port the manifest does not allow.
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_addr = elsewhere.local_addr().unwrap().to_string();
    let denied_url = format!("PAYMENTS_URL = \"http://{elsewhere_addr}\"\n");
    let denied = examples(lang, &allowed, &denied_url).load().await;
    let started = Instant::now();
    // The sandbox names the refused address (each language's own port) and the allow-list.
    let result =
        denied.call("create_refund", r#"{"order_id":"7","amount_cents":100}"#, Some(&execution(1))).await;
    record(
        "refund to a host not on the allow-list",
        result.map_err(|error| match error {
            CallError::Failed { tool, message, stderr } => {
                CallError::Failed { tool, message: message.replace(&elsewhere_addr, "<elsewhere>"), stderr }
            }
            other => other,
        }),
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{lang}: a denied request took {:?}",
        started.elapsed()
    );
    drop(elsewhere);

    // Allowed but nobody listens: a transport error.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let unreachable = examples(
        lang,
        &format!("\"http://{closed_addr}\""),
        &format!("PAYMENTS_URL = \"http://{closed_addr}\"\n"),
    )
    .load()
    .await;
    record(
        "refund, service unreachable",
        unreachable
            .call("create_refund", r#"{"order_id":"7","amount_cents":100}"#, Some(&execution(1)))
            .await,
    );

    let unconfigured = examples(lang, &allowed, "").load().await;
    record(
        "refund without PAYMENTS_URL",
        unconfigured
            .call("create_refund", r#"{"order_id":"7","amount_cents":100}"#, Some(&execution(1)))
            .await,
    );
    assert!(payments.take().is_empty(), "{lang}: refused calls reached the service");
    out
}

/// What `list-tools` says, reduced to what must agree across languages: names, annotations, and
/// the schema's shape (types, required, minimum, additionalProperties; not titles or prose).
fn tool_shapes(tools: &ToolSet) -> BTreeMap<String, String> {
    tools
        .tools()
        .iter()
        .map(|t| {
            let s = &t.input_schema;
            let mut required: Vec<String> =
                s["required"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
            required.sort();
            let properties: BTreeMap<String, String> = s["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), format!("{} min {}", v["type"], v["minimum"])))
                .collect();
            let a = &t.annotations;
            let shape = format!(
                "type {} required {required:?} properties {properties:?} additionalProperties {} | read_only {} idempotent {} destructive {} open_world {}",
                s["type"], s["additionalProperties"], a.read_only, a.idempotent, a.destructive, a.open_world
            );
            (t.name.clone(), shape)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_gives_the_same_results_for_the_same_calls() {
    guests::built_guests();
    let payments = payments_service().await;
    let langs = ["rust", "go", "js", "python"];
    let mut results: BTreeMap<&str, Vec<(&str, String)>> = BTreeMap::new();
    let mut shapes = BTreeMap::new();
    for lang in langs {
        shapes.insert(lang, tool_shapes(&examples(lang, "", "").load().await));
        results.insert(lang, scenarios(lang, &payments).await);
    }

    // Shown with --nocapture: every scenario's outcome, per language.
    for (i, (scenario, _)) in results["rust"].iter().enumerate() {
        eprintln!("{scenario}:");
        for lang in langs {
            eprintln!("  {lang:>6}: {}", results[lang][i].1);
        }
    }

    let mut report = String::new();
    let baseline = &results["rust"];
    for lang in langs {
        for ((scenario, got), (_, want)) in results[lang].iter().zip(baseline) {
            if without_detail(got) != without_detail(want) {
                report.push_str(&format!("{scenario}:\n  rust: {want}\n  {lang}: {got}\n"));
            }
        }
        if shapes[lang] != shapes["rust"] {
            report.push_str(&format!(
                "list-tools:\n  rust: {:?}\n  {lang}: {:?}\n",
                shapes["rust"], shapes[lang]
            ));
        }
    }
    // The SDKs of Go, JavaScript and Python also agree on the detail.
    for lang in ["js", "python"] {
        for ((scenario, got), (_, want)) in results[lang].iter().zip(&results["go"]) {
            if got != want {
                report.push_str(&format!("{scenario} (exact):\n  go: {want}\n  {lang}: {got}\n"));
            }
        }
    }
    assert!(report.is_empty(), "the languages disagree:\n{report}");

    // And the results are the specified ones (checked once, on the Go column).
    let go: BTreeMap<&str, &str> = results["go"].iter().map(|(k, v)| (*k, v.as_str())).collect();
    let key = "session-42/turn-1/toolu_01";
    assert_eq!(
        go["lookup a known order"],
        r#"ok: {"order_id":"7","status":"delivered","total_cents":4200,"currency":"EUR"}"#
    );
    assert_eq!(
        go["lookup order 99"],
        r#"ok: {"order_id":"99","status":"delivered","total_cents":59400,"currency":"EUR"}"#
    );
    assert_eq!(go["lookup an unknown order"], "is-error: order 100 not found");
    assert_eq!(go["lookup order 07"], "is-error: order 07 not found");
    assert_eq!(go["refund with a reason"], format!(r#"ok: {{"key":"{key}","refund_id":"r-7"}}"#));
    assert_eq!(go["refund without a reason"], format!(r#"ok: {{"key":"{key}","refund_id":"r-8"}}"#));
    assert_eq!(
        go["refund refused (422)"],
        r#"is-error: refund refused: {"error":"amount exceeds the order total"}"#
    );
    assert_eq!(go["refund, service busy (503), attempt 1"], "retryable: payments service returned 503");
    assert_eq!(go["refund, service busy (503), attempt 2"], "retryable: payments service returned 503");
    assert_eq!(go["refund inline (no execution)"], "failed: create_refund must run as a deferred call");
    assert!(
        go["refund to a host not on the allow-list"].starts_with(
            "failed: outbound request denied: HTTP-request-denied (the sandbox denied outbound access to \
             http://<elsewhere>/refunds: not on this tool's allow-list, which is http://127.0.0.1:"
        ),
        "{}",
        go["refund to a host not on the allow-list"]
    );
    assert_eq!(
        go["refund, service unreachable"],
        "retryable: payments service unreachable: connection-refused"
    );
    assert_eq!(go["refund without PAYMENTS_URL"], "failed: PAYMENTS_URL is not configured");
}

async fn hostile(lang: &str, manifest: &str) -> (ToolsDir, ToolSet) {
    let dir = ToolsDir::new().component("hostile", &component(lang, "hostile")).manifest("hostile", manifest);
    let tools = dir.load().await;
    (dir, tools)
}

async fn assert_next_call_works(lang: &str, tools: &ToolSet) {
    let output = tools.call("echo", r#"{"text":"still here"}"#, None).await;
    assert_eq!(outcome(&output), r#"ok: {"text":"still here"}"#, "{lang}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_in_go_or_javascript_is_stopped_near_its_deadline() {
    for lang in ["go", "js"] {
        let (_dir, tools) = hostile(lang, "timeout_ms = 300\n").await;
        let started = Instant::now();
        let error = tools.call("spin", "{}", None).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(
            error,
            CallError::DeadlineExceeded { tool: "spin".into(), limit: Duration::from_millis(300) },
            "{lang}"
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
            "{lang}: stopped after {took:?}"
        );
        assert_next_call_works(lang, &tools).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_in_go_or_javascript_is_stopped_at_the_cap() {
    for lang in ["go", "js"] {
        let (_dir, tools) = hostile(lang, "memory_mb = 48\ntimeout_ms = 20000\n").await;
        let started = Instant::now();
        let error = tools.call("memory_bomb", "{}", None).await.unwrap_err();
        assert_eq!(
            error,
            CallError::MemoryLimit { tool: "memory_bomb".into(), limit_bytes: 48 << 20 },
            "{lang}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{lang}: stopped after {:?}", started.elapsed());
        assert_next_call_works(lang, &tools).await;
    }
}

#[test]
fn the_guest_build_writes_every_component_and_its_manifest() {
    let dir = guests::built_guests();
    for lang in BUILT {
        for name in ["orders", "payments"] {
            assert!(dir.join(lang).join(format!("{name}.wasm")).is_file(), "{lang}/{name}.wasm");
            assert!(dir.join(lang).join(format!("{name}.toml")).is_file(), "{lang}/{name}.toml");
        }
    }
    for lang in ["go", "js"] {
        assert!(dir.join(lang).join("hostile.wasm").is_file(), "{lang}/hostile.wasm");
    }
}

/// An uncaught exception in a Python or JavaScript tool (the `throwing` guests: a write that
/// posts, then fails reading the answer) keeps its traceback for the log and the record; the
/// model reads only the exception's name and message.
#[tokio::test]
async fn an_uncaught_exception_keeps_its_traceback_out_of_what_the_model_reads() {
    let service = payments_service().await;
    for (lang, marker) in [("python", "Traceback (most recent call last)"), ("js", "@bundle.js:")] {
        let dir = ToolsDir::new()
            .component("throwing", &guests::built(lang, "throwing").display().to_string())
            .manifest(
                "throwing",
                &format!(
                    "allowed_outbound_hosts = [\"http://127.0.0.1:{}\"]\n[config]\nPAYMENTS_URL = \"{}\"\n",
                    service.addr.port(),
                    service.url()
                ),
            );
        let tools = dir.load().await;
        let arguments = r#"{"order_id":"7","amount_cents":100}"#;
        let error = tools.call("charge_then_throw", arguments, Some(&execution(1))).await.unwrap_err();
        let stderr = error.guest_stderr().unwrap_or_else(|| panic!("{lang}: no stderr with {error:?}"));
        assert!(stderr.contains(marker) && stderr.contains("refund"), "{lang}: {stderr}");
        assert!(stderr.contains("\n  | "), "{lang}: its lines are kept, indented: {stderr}");
        let for_model = error.message_for_model();
        assert!(!for_model.contains(marker) && !for_model.contains('\n'), "{lang}: {for_model}");
    }
}
