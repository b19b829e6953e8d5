//! What the Worker's model proxy adds to a model request: the same streamed request to the scripted
//! mock model, direct and through the proxy (token check, key swap, usage read from the stream),
//! one at a time on loopback with a keep-alive client.
//!
//! Prints p50, p99 and max of the whole request (to the last byte of the SSE stream) for each way,
//! and the difference of the medians. `PROXY_BENCH_REQUESTS` (default 2000) requests each, after
//! 100 warm-up requests; the two ways alternate so drift hits both alike.
//!
//! Run: `cargo bench -p tollgate --bench proxy` (no CLI needed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_mock_model::MockModel;
use tollgate_process::metrics::Metrics;
use tollgate_worker::proxy::{Credential, ModelProxy, SpendLimit, Upstream};

fn body() -> String {
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": true,
        "messages": [{"role": "user", "content": "say a short answer of a few words, streamed as SSE"}],
    })
    .to_string()
}

async fn one(client: &reqwest::Client, url: &str, key: &str, body: &str) -> Duration {
    let start = Instant::now();
    let answer = client
        .post(url)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(body.to_owned())
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200);
    let bytes = answer.bytes().await.expect("the stream");
    assert!(bytes.ends_with(b"\n\n"));
    start.elapsed()
}

fn row(name: &str, times: &mut [Duration]) -> (String, f64) {
    times.sort();
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    let p50 = at(0.5);
    (format!("| {name} | {} | {p50:.3} ms | {:.3} ms | {:.3} ms |\n", times.len(), at(0.99), at(1.0)), p50)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let requests: usize =
        std::env::var("PROXY_BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let mock = MockModel::start().await.expect("the mock starts");
    let proxy = ModelProxy::start(
        Upstream::new(&mock.base_url(), Credential::ApiKey("sk-bench".into())),
        Arc::new(Metrics::default()),
    )
    .await
    .expect("the proxy starts");
    let token = proxy.register(SpendLimit::default());
    tollgate_api_types::tls::install_crypto_provider();
    let client = reqwest::Client::builder().no_proxy().tcp_nodelay(true).build().unwrap();
    let direct_url = format!("{}/v1/messages?beta=true", mock.base_url());
    let proxied_url = format!("{}/v1/messages?beta=true", proxy.base_url());
    let body = body();
    for _ in 0..100 {
        one(&client, &direct_url, "dummy", &body).await;
        one(&client, &proxied_url, token.token(), &body).await;
    }
    let (mut direct, mut proxied) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    for _ in 0..requests {
        direct.push(one(&client, &direct_url, "dummy", &body).await);
        proxied.push(one(&client, &proxied_url, token.token(), &body).await);
    }
    let summary = token.summary();
    assert_eq!(summary.requests as usize, requests + 100);
    let (direct_row, direct_p50) = row("direct to the mock", &mut direct);
    let (proxied_row, proxied_p50) = row("through the proxy", &mut proxied);
    println!("\nOne streamed model request on loopback, {requests} each:\n");
    println!("| way | requests | p50 | p99 | max |\n|---|---|---|---|---|");
    print!("{direct_row}{proxied_row}");
    println!(
        "\nAdded by the proxy at p50: {:.3} ms ({:.2}x the direct request)",
        proxied_p50 - direct_p50,
        proxied_p50 / direct_p50
    );
}
