//! The HTTP API's contract checked by tools we did not write, against a live `tollgate api` on
//! SQLite with a bearer token on 127.0.0.1: `openapi-spec-validator` on the served
//! `/openapi.json`, and a time-bounded Schemathesis pass (every check, a fixed seed) that fails on
//! any 5xx, any answer the document does not allow, any schema-valid request refused and any
//! schema-violating one accepted (`schemathesis.toml` beside this file says where one check cannot
//! hold, and why).
//!
//! Both come from PyPI into `.tools/api-venv` (`scripts/install-api-checks.sh`, run by
//! `scripts/setup.sh`). Without them the tests fail, naming what to install, unless
//! `TOLLGATE_SKIP_MISSING` names `schemathesis`, when they skip with a message
//! (`tollgate_store_testing::skip`).

use std::path::PathBuf;
use std::process::Output;

use crate::tls::{ApiServer, Pki};
use crate::world::root;

/// The bearer token of the server under test.
const TOKEN: &str = "contract-test-token-4f1d2c";

/// How long Schemathesis fuzzes, in seconds (its `--max-time`).
const FUZZ_SECS: u32 = 60;

/// The checker `name` from `.tools/api-venv/bin`; or `None` (after `!! SKIPPED`) when it is not
/// installed and `TOLLGATE_SKIP_MISSING` names `schemathesis`, a failure when it is not installed
/// otherwise.
fn checker(test: &str, name: &str) -> Option<PathBuf> {
    let tools = std::env::var_os("TOLLGATE_TOOLS").map_or_else(|| root().join(".tools"), PathBuf::from);
    let path = tools.join("api-venv/bin").join(name);
    if path.exists() {
        return Some(path);
    }
    let detail = format!("{name} is not installed at {}", path.display());
    tollgate_store_testing::skip::missing(
        tollgate_store_testing::skip::Dependency::Schemathesis,
        test,
        &detail,
    );
    None
}

async fn server(pki: &Pki) -> ApiServer {
    tollgate_api_types::tls::install_crypto_provider();
    ApiServer::start(&pki.dir.path().join("api.db"), &[], &[("TOLLGATE_TOKEN", TOKEN)])
        .await
        .expect("tollgate api starts")
}

/// `output`'s exit status, stdout and stderr, for a failure's message.
fn shown(output: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_document_is_valid_openapi_by_openapi_spec_validator() {
    let test = "contract: openapi-spec-validator";
    let Some(validator) = checker(test, "openapi-spec-validator") else { return };
    let pki = Pki::new();
    let server = server(&pki).await;
    // Served without a token: a client reads the contract before it has one.
    let answer = reqwest::get(format!("{}/openapi.json", server.url)).await.expect("the API answers");
    assert_eq!(answer.status(), 200, "/openapi.json needs no token");
    let document = pki.dir.path().join("openapi.json");
    std::fs::write(&document, answer.text().await.expect("a body")).expect("write the document");
    let output = tokio::process::Command::new(&validator).arg(&document).output().await.expect("run it");
    assert!(output.status.success(), "openapi-spec-validator refuses the document: {}", shown(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("OK"), "{}", shown(&output));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let test = "contract: schemathesis";
    let Some(schemathesis) = checker(test, "schemathesis") else { return };
    let pki = Pki::new();
    let server = server(&pki).await;
    let config = root().join("host/tollgate/tests/durable/schemathesis.toml");
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(&schemathesis)
        // Its cache and reports go to the test's folder, not the repository.
        .current_dir(pki.dir.path())
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{}/openapi.json", server.url))
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        // Every check: `schemathesis.toml` enables them all (`--checks all` would override its
        // one exception).
        .args(["--seed", "20261204", "--max-examples", "50"])
        .args(["--max-time", &FUZZ_SECS.to_string(), "--request-timeout", "10", "--workers", "1"])
        .output()
        .await
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Its summary: "N generated, M found K unique failures, S skipped" (or "N passed, …").
    let summary = stdout
        .lines()
        .skip_while(|line| !line.starts_with("Test cases:"))
        .nth(1)
        .map_or("(no summary)", str::trim);
    eprintln!("schemathesis: {summary} in {:.0} s", started.elapsed().as_secs_f64());
    assert!(output.status.success(), "Schemathesis found failures: {}", shown(&output));
    assert!(summary.contains("generated") || summary.contains("passed"), "{}", shown(&output));
    assert!(!summary.contains("found"), "{}", shown(&output));
    server.stop().await;
}
