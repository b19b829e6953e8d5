//! Debian's `chromium` driven through `chromedriver` (WebDriver, `fantoccini`): started on a free
//! loopback port with a fresh profile and the flags this machine needs (no sandbox, no network
//! but loopback), killed when dropped. The browser's console is read through chromedriver's log
//! endpoint, so a test can assert that the page logged no error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The flags every Chromium here runs with (this machine refuses outbound connections).
const FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// The Chromium binary and chromedriver, or `None`.
fn installed() -> Option<(PathBuf, PathBuf)> {
    // The real binary, not Debian's wrapper script, when it is there.
    let chromium =
        ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].iter().map(Path::new).find(|p| p.exists())?;
    let driver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())?;
    Some((chromium.to_owned(), driver.to_owned()))
}

/// A headless Chromium under chromedriver.
pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a browser session; or `None` (after `!! SKIPPED`) when Chromium
    /// is not installed and `TOLLGATE_SKIP_MISSING` names `browser`, a failure when it is not
    /// installed otherwise.
    pub async fn start(test: &str, dir: &Path) -> Option<Browser> {
        let Some((chromium, driver)) = installed() else {
            let detail = "no chromium and chromedriver (Debian packages chromium and chromium-driver)";
            tollgate_store_testing::skip::missing(
                tollgate_store_testing::skip::Dependency::Browser,
                test,
                detail,
            );
            return None;
        };
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("an address").port()
        };
        let log = dir.join("chromedriver.log");
        let child = tokio::process::Command::new(&driver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let start = Instant::now();
        while http.get(format!("{url}/status")).send().await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "chromedriver did not listen on {url}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::Builder::new().prefix("tollgate-chromium-").tempdir().expect("a profile dir");
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push("--window-size=1280,1000".to_owned());
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let serde_json::Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client =
            ClientBuilder::new(connector).capabilities(capabilities).connect(&url).await.unwrap_or_else(
                |e| {
                    panic!(
                        "start Chromium through chromedriver: {e}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    )
                },
            );
        Some(Browser { client, driver: child, _profile: profile })
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("run {script}: {e}"))
    }

    /// Waits (90 s at most, as the durable tests wait for a turn: a fresh machine compiles the
    /// agent's guests on the first segment) until `script` returns something truthy, and returns it.
    ///
    /// A script that throws counts as "not yet": right after a navigation the page may not have
    /// rendered the element the script reads (a CI run failed on exactly that). The last error is
    /// in the timeout's message, so a script that can never run still fails with its cause.
    pub async fn until(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        let start = Instant::now();
        loop {
            let last_error = match self.client.execute(script, args.clone()).await {
                Ok(value) => {
                    let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                        && value != json!(0)
                        && value != json!("");
                    if truthy {
                        return value;
                    }
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            if start.elapsed() > Duration::from_secs(90) {
                let text = self.js("return document.body.innerText", vec![]).await;
                panic!(
                    "timed out waiting for {what}{}; the page shows:\n{}",
                    last_error.map(|e| format!(" (the script last threw: {e})")).unwrap_or_default(),
                    text.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("find {css}: {e}"));
        element.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Types `text` into the element `css`, replacing what it holds.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("find {css}: {e}"));
        element.clear().await.unwrap_or_else(|e| panic!("clear {css}: {e}"));
        element.send_keys(text).await.unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Signs in on `url` with `token` and waits for the principal's name in the header.
    pub async fn sign_in(&self, url: &str, token: &str, name: &str) {
        self.client.goto(&format!("{url}/")).await.expect("open the page");
        self.client.wait().for_element(Locator::Css("#token")).await.expect("the sign-in form");
        self.type_into("#token", token).await;
        self.click("#sign-in-button").await;
        self.until(
            "the signed-in principal",
            "return document.getElementById('who-text').textContent.includes(arguments[0])",
            vec![json!(name)],
        )
        .await;
    }

    /// Saves a screenshot of the page as `target/screenshots/NAME.png` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshots folder");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        let path = path.canonicalize().unwrap_or(path);
        eprintln!("screenshot: {}", path.display());
        path
    }

    /// The browser console's entries since the last call: `(level, message)`.
    pub async fn console(&self) -> Vec<(String, String)> {
        let entries = self.client.issue_cmd(BrowserLog).await.expect("read the browser log");
        entries
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or("").to_owned(),
                            e["message"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs axe-core (the pinned copy scripts/install-axe-core.sh installs, injected into the page
    /// through this WebDriver session) on the page as it is, and asserts it finds no violation of
    /// any impact; `page` names the page in the failure.
    pub async fn assert_axe_clean(&self, page: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tools/axe-core/node_modules/axe-core/axe.min.js");
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("axe-core at {}: {e}; run scripts/install-axe-core.sh", path.display())
        });
        self.js(&format!("{source}\n;window.axe = axe; return true;"), vec![]).await;
        let found = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 window.axe.run(document)
                   .then((r) => done({ checked: r.passes.length, violations: r.violations.map((v) => ({ id: v.id,
                     impact: v.impact, help: v.help,
                     nodes: v.nodes.slice(0, 5).map((n) => `${n.target.join(' ')}: ${n.failureSummary}`) })) }))
                   .catch((e) => done({ checked: 0, violations: [{ id: 'axe-error', help: String(e) }] }));",
                vec![],
            )
            .await
            .unwrap_or_else(|e| panic!("run axe-core on {page}: {e}"));
        assert_eq!(found["violations"], json!([]), "axe-core violations on {page}:\n{found:#}");
        assert!(
            found["checked"].as_u64().is_some_and(|n| n > 10),
            "axe-core checked nothing on {page}: {found}"
        );
    }

    /// Asserts that Lighthouse's accessibility audit scores the current page 100: the pinned
    /// Lighthouse (`tools/lighthouse`, `scripts/install-lighthouse.sh`) attaches to this Chromium
    /// through its DevTools port and audits the page as the test left it (snapshot mode: signed
    /// in, nothing reloaded). Call it after [`Browser::assert_axe_clean`], which names the nodes.
    pub async fn assert_lighthouse_100(&self, page: &str) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let script = root.join("tools/lighthouse/audit.mjs");
        assert!(
            root.join("tools/lighthouse/node_modules/lighthouse").exists(),
            "Lighthouse is not installed in tools/lighthouse; run scripts/install-lighthouse.sh"
        );
        // Chromium writes the DevTools port chromedriver asked it to pick into the profile.
        let active = std::fs::read_to_string(self._profile.path().join("DevToolsActivePort"))
            .unwrap_or_else(|e| panic!("Chromium's DevToolsActivePort: {e}"));
        let port = active.lines().next().unwrap_or_default().to_owned();
        let url = self.client.current_url().await.expect("the current URL");
        let prefix = url.as_str().split('#').next().unwrap_or_default().to_owned();
        let output = tokio::process::Command::new("node")
            .arg(&script)
            .arg(&port)
            .arg(&prefix)
            .output()
            .await
            .unwrap_or_else(|e| panic!("run node {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "Lighthouse on {page} failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
        let found: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("Lighthouse's answer on {page}: {e}: {stdout}"));
        eprintln!("FIGURE Lighthouse accessibility on {page}: {}", found["score"]);
        assert!(
            found["score"].as_f64() == Some(1.0) && found["failing"] == json!([]),
            "Lighthouse accessibility on {page} is not 100:\n{found:#}"
        );
    }

    /// Asserts that the console has no error or warning since the last read.
    pub async fn assert_no_console_errors(&self, when: &str) {
        let bad: Vec<(String, String)> = self
            .console()
            .await
            .into_iter()
            .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
            .collect();
        assert!(bad.is_empty(), "the browser console has errors {when}: {bad:#?}");
    }

    /// Ends the browser session (Chromium quits), then chromedriver.
    pub async fn stop(mut self) {
        let _ = self.client.clone().close().await;
        let start = Instant::now();
        while !self.processes().is_empty() && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.kill_browser();
        let _ = self.driver.kill().await;
    }

    /// The pids of this browser's processes: those started with its profile folder.
    fn processes(&self) -> Vec<i32> {
        let flag = format!("--user-data-dir={}", self._profile.path().display());
        tollgate_testing::processes(|args| args.contains(&flag.as_bytes()))
    }

    /// SIGKILLs every process of this browser (a test that panicked never asked it to quit, and
    /// killing chromedriver alone leaves Chromium running).
    fn kill_browser(&self) {
        for pid in self.processes() {
            // SAFETY: a signal to a process this test's chromedriver started with our profile.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill_browser();
    }
}

/// chromedriver's `POST /session/{id}/se/log {"type":"browser"}`: the console's entries.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}
