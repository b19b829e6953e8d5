//! TLS and the bearer token end to end: `tollgate api` on a SQLite file as a child process with a
//! certificate generated at test time (rcgen), and the `tollgate session` client binary calling
//! it with `--ca-cert`, `--token-file` and their environment variables. No model and no CLI:
//! these tests exercise the transport only.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Every variable through which a test's own environment could reach the processes it starts.
const OURS: [&str; 9] = [
    "TOLLGATE_TOKEN",
    "TOLLGATE_TOKEN_FILE",
    "TOLLGATE_TLS_CERT",
    "TOLLGATE_TLS_KEY",
    "TOLLGATE_CA_CERT",
    "TOLLGATE_URL",
    "TOLLGATE_LISTEN",
    "TOLLGATE_DB",
    "RUST_LOG",
];

/// A test CA, a server certificate it signed (for `127.0.0.1` and `localhost`), and the key of
/// another certificate, as PEM files in a temporary folder.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub other_key: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new().prefix("tollgate-tls-").tempdir().expect("temp dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "Tollgate test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().expect("server key");
        let server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("params");
        let server_cert = server_params.signed_by(&server_key, &issuer).expect("server certificate");
        let other_key = KeyPair::generate().expect("another key");
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write PEM");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            path
        };
        Pki {
            ca: write("ca.pem", ca_cert.pem()),
            cert: write("server.pem", server_cert.pem()),
            key: write("server.key", server_key.serialize_pem()),
            other_key: write("other.key", other_key.serialize_pem()),
            dir,
        }
    }

    /// A file in the folder with `text` and `mode`.
    pub fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }
}

/// A `tollgate api` child process on a SQLite file.
pub struct ApiServer {
    /// `http://…` or `https://…`, as the server printed it.
    pub url: String,
    /// Everything it wrote on stderr so far.
    pub log: Arc<Mutex<String>>,
    child: tokio::process::Child,
    /// The state folder of its user (a token it made itself is there).
    state: PathBuf,
}

/// The state folder `tollgate api` on `db` and its clients use: beside the store.
fn state_home(db: &Path) -> PathBuf {
    db.parent().unwrap_or(db).join("state")
}

/// How `tollgate api` ended when it did not start: its exit status and stderr.
#[derive(Debug)]
pub struct Refused {
    pub success: bool,
    pub stderr: String,
}

impl ApiServer {
    /// Starts `tollgate api --db sqlite://DB --listen 127.0.0.1:0 ARGS` with `env`; `Err` when it
    /// exits before saying where it listens.
    pub async fn start(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<ApiServer, Refused> {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        for name in OURS {
            command.env_remove(name);
        }
        command
            .args(["api", "--db", &format!("sqlite://{}", db.display())])
            // A token the server makes itself goes beside the store, not into the real state folder.
            .env("XDG_STATE_HOME", state_home(db))
            .args(if args.contains(&"--listen") { &[][..] } else { &["--listen", "127.0.0.1:0"][..] })
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start tollgate api");
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let log = Arc::new(Mutex::new(String::new()));
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                log.lock().unwrap().push_str(&format!("{line}\n"));
                if let Some(rest) = line.strip_prefix("tollgate API on ") {
                    return Some(rest.split_whitespace().next().expect("an address").to_owned());
                }
            }
            None
        })
        .await
        .expect("tollgate api neither started nor exited within 30 s");
        let Some(url) = url else {
            let status = child.wait().await.expect("wait");
            return Err(Refused { success: status.success(), stderr: log.lock().unwrap().clone() });
        };
        let keep = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Ok(ApiServer { url, log, child, state: state_home(db) })
    }

    /// Its stderr so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether its stderr says `needle` within 10 s: a line the server logs after its client gave
    /// up (a refused handshake) may reach us after the client's exit.
    pub async fn logs(&self, needle: &str) -> bool {
        for _ in 0..200 {
            if self.log_text().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// `tollgate ARGS --url URL` (a client command) with `env` and nothing of ours inherited; it
    /// finds a token the server made itself, as a client of the same user would.
    pub async fn client(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        for name in OURS {
            command.env_remove(name);
        }
        command
            .env("XDG_STATE_HOME", &self.state)
            .args(args)
            .args(["--url", &self.url])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("run tollgate")
    }

    /// SIGTERM, and wait until it has exited.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: sending a signal to our own child's pid.
            unsafe { libc::kill(i32::try_from(pid).expect("pid"), libc::SIGTERM) };
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok(output: &Output, what: &str) -> String {
    let (stdout, stderr) = text(output);
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    stdout
}

fn failed(output: &Output, what: &str) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(2), "{what} should fail:\nstdout: {stdout}\nstderr: {stderr}");
    stderr
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_serves_https_and_the_cli_client_reaches_it_with_ca_cert() {
    let pki = Pki::new();
    let token = pki.file("token", "tls-token\n", 0o600);
    let db = pki.dir.path().join("api.db");
    let args = ["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.key), "--token-file", s(&token)];
    let server = ApiServer::start(&db, &args, &[]).await.expect("tollgate api starts with TLS");
    assert!(server.url.starts_with("https://127.0.0.1:"), "{}", server.url);

    let started = server
        .client(&["session", "start", "tls-1", "--ca-cert", s(&pki.ca), "--token-file", s(&token)], &[])
        .await;
    ok(&started, "session start over https");
    // The same through the environment variables.
    let env = [("TOLLGATE_CA_CERT", s(&pki.ca)), ("TOLLGATE_TOKEN_FILE", s(&token))];
    let listed = ok(&server.client(&["session", "list", "--json"], &env).await, "session list over https");
    let page: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    crate::world::assert_schema("SessionPage", &page);
    assert_eq!(page["sessions"][0]["session_id"], "tls-1", "{page}");

    // Plain HTTP to the TLS port is not answered as HTTP.
    tollgate_api_types::tls::install_crypto_provider();
    let plain = server.url.replace("https://", "http://");
    let answer = reqwest::Client::new().get(format!("{plain}/healthz")).send().await;
    assert!(answer.is_err(), "plain HTTP was answered: {answer:?}");
    // A TLS client that trusts the CA gets the API itself.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let https = reqwest::Client::builder().tls_certs_only([ca]).build().unwrap();
    let health = crate::world::api(https.get(format!("{}/healthz", server.url))).await;
    assert_eq!(health.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_without_the_ca_is_refused_with_a_clear_tls_error() {
    let pki = Pki::new();
    let db = pki.dir.path().join("api.db");
    let args = ["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.key)];
    let server = ApiServer::start(&db, &args, &[("RUST_LOG", "info")]).await.expect("starts");

    let stderr = failed(&server.client(&["session", "list"], &[]).await, "session list without the CA");
    assert!(stderr.contains(&format!("the TLS connection to {}", server.url)), "{stderr}");
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");
    assert!(stderr.contains("--ca-cert"), "the error says how to trust the CA: {stderr}");
    assert!(!stderr.contains("rustls_platform_verifier"), "the failure is reported once: {stderr}");

    // Another CA's certificate does not make the server trusted either.
    let other = Pki::new();
    let stderr =
        failed(&server.client(&["session", "list", "--ca-cert", s(&other.ca)], &[]).await, "with another CA");
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");

    // A CA file that is not a certificate is named.
    let stderr =
        failed(&server.client(&["session", "list", "--ca-cert", s(&pki.key)], &[]).await, "with a key as CA");
    assert!(stderr.contains(&format!("the CA certificate file {}", pki.key.display())), "{stderr}");
    assert!(stderr.contains("no `-----BEGIN CERTIFICATE-----`"), "{stderr}");

    // The server logged the refused handshakes and kept serving.
    assert!(server.logs("a TLS handshake failed").await, "{}", server.log_text());
    let env = [("TOLLGATE_CA_CERT", s(&pki.ca))];
    ok(&server.client(&["session", "list"], &env).await, "session list with the CA");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_that_does_not_match_its_key_is_refused_at_start_naming_both_files() {
    let pki = Pki::new();
    let db = pki.dir.path().join("api.db");
    let args = ["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.other_key)];
    let Err(refused) = ApiServer::start(&db, &args, &[]).await else {
        panic!("tollgate api started with a key of another certificate");
    };
    assert!(!refused.success);
    let stderr = refused.stderr;
    assert!(stderr.contains(&pki.cert.display().to_string()), "{stderr}");
    assert!(stderr.contains(&pki.other_key.display().to_string()), "{stderr}");
    assert!(stderr.contains("does not fit the certificate"), "{stderr}");
    assert!(!db.exists(), "the store was opened before the certificate was checked");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_or_unparsable_pem_files_are_refused_at_start_naming_the_file_and_the_reason() {
    let pki = Pki::new();
    let db = pki.dir.path().join("api.db");
    let garbage = pki.file("garbage.pem", "not a certificate\n", 0o600);
    let broken = pki.file("broken.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n", 0o600);
    let missing = pki.dir.path().join("missing.pem");
    let cases: [(&[&str], String, &str); 6] = [
        (
            &["--tls-cert", s(&missing), "--tls-key", s(&pki.key)],
            format!("cannot read the certificate file {}", missing.display()),
            "No such file",
        ),
        (
            &["--tls-cert", s(&garbage), "--tls-key", s(&pki.key)],
            format!("the certificate file {} is not usable", garbage.display()),
            "no `-----BEGIN CERTIFICATE-----` section",
        ),
        (
            &["--tls-cert", s(&broken), "--tls-key", s(&pki.key)],
            format!("the certificate file {} is not usable", broken.display()),
            "not valid PEM",
        ),
        (
            &["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.cert)],
            format!("the private key file {} is not usable", pki.cert.display()),
            "no `PRIVATE KEY`",
        ),
        (&["--tls-cert", s(&pki.cert)], "--tls-cert needs --tls-key".to_owned(), "private key"),
        (&["--tls-key", s(&pki.key)], "--tls-key needs --tls-cert".to_owned(), "certificate"),
    ];
    for (args, names, reason) in cases {
        let Err(refused) = ApiServer::start(&db, args, &[]).await else {
            panic!("tollgate api started with {args:?}");
        };
        assert!(!refused.success);
        assert!(refused.stderr.contains(&names), "{args:?}: {}", refused.stderr);
        assert!(refused.stderr.contains(reason), "{args:?}: {}", refused.stderr);
        assert!(!db.exists(), "{args:?}: the store was opened before the certificate was checked");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_comes_from_a_file_or_the_environment_and_on_the_command_line_it_warns() {
    let pki = Pki::new();
    let db = pki.dir.path().join("api.db");

    // A private token file: no warning; the client needs the token, from a file or the environment.
    let token = pki.file("token", "file-token\n", 0o600);
    let server = ApiServer::start(&db, &["--token-file", s(&token)], &[]).await.expect("starts");
    let stderr = failed(&server.client(&["session", "list"], &[]).await, "session list without a token");
    assert!(stderr.contains("401"), "{stderr}");
    ok(&server.client(&["session", "list", "--token-file", s(&token)], &[]).await, "with --token-file");
    ok(
        &server.client(&["session", "list"], &[("TOLLGATE_TOKEN", "file-token")]).await,
        "with TOLLGATE_TOKEN",
    );
    let log = server.log_text();
    assert!(!log.contains("WARN"), "{log}");
    server.stop().await;

    // A token file others can read: it works, with a warning.
    let shared = pki.file("shared-token", "shared\n", 0o644);
    let server = ApiServer::start(&db, &[], &[("TOLLGATE_TOKEN_FILE", s(&shared))]).await.expect("starts");
    ok(
        &server.client(&["session", "list"], &[("TOLLGATE_TOKEN_FILE", s(&shared))]).await,
        "shared token file",
    );
    let log = server.log_text();
    assert!(
        log.contains(&format!("the token file {} can be read by its group or by others", shared.display())),
        "{log}"
    );
    server.stop().await;

    // --token on the command line works and warns; TOLLGATE_TOKEN does not warn.
    let server = ApiServer::start(&db, &["--token", "argv-token"], &[]).await.expect("starts");
    let log = server.log_text();
    assert!(log.contains("/proc/PID/cmdline") && log.contains("--token-file"), "{log}");
    ok(&server.client(&["session", "list"], &[("TOLLGATE_TOKEN", "argv-token")]).await, "argv token");
    server.stop().await;
    let server = ApiServer::start(&db, &[], &[("TOLLGATE_TOKEN", "env-token")]).await.expect("starts");
    assert!(!server.log_text().contains("cmdline"), "{}", server.log_text());
    let wrong =
        failed(&server.client(&["session", "list"], &[("TOLLGATE_TOKEN", "nope")]).await, "wrong token");
    assert!(wrong.contains("401"), "{wrong}");
    server.stop().await;

    // An empty token file, a missing one, or a token and a file together stop the server at start.
    let empty = pki.file("empty-token", "\n", 0o600);
    let missing = pki.dir.path().join("no-token");
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], String);
    let cases: [Case<'_>; 3] = [
        (
            &["--token-file", s(&empty)],
            &[],
            format!("the token file {} is not usable: it is empty", empty.display()),
        ),
        (&["--token-file", s(&missing)], &[], format!("cannot read the token file {}", missing.display())),
        (&["--token-file", s(&token)], &[("TOLLGATE_TOKEN", "x")], "give one".to_owned()),
    ];
    for (args, env, expected) in cases {
        let Err(refused) = ApiServer::start(&db, args, env).await else { panic!("started with {args:?}") };
        assert!(refused.stderr.contains(&expected), "{args:?}: {}", refused.stderr);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_beyond_loopback_warns_and_on_loopback_does_not() {
    let pki = Pki::new();
    let db = pki.dir.path().join("api.db");
    let server = ApiServer::start(&db, &[], &[]).await.expect("starts");
    assert!(!server.log_text().contains("plain HTTP"), "{}", server.log_text());
    server.stop().await;
    let server = ApiServer::start(&db, &["--listen", "0.0.0.0:0"], &[]).await.expect("starts");
    let log = server.log_text();
    assert!(log.contains("serving plain HTTP on 0.0.0.0:") && log.contains("--tls-cert"), "{log}");
    server.stop().await;
    // With TLS, no warning on any address.
    let args = ["--listen", "0.0.0.0:0", "--tls-cert", s(&pki.cert), "--tls-key", s(&pki.key)];
    let server = ApiServer::start(&db, &args, &[]).await.expect("starts");
    assert!(!server.log_text().contains("plain HTTP"), "{}", server.log_text());
    server.stop().await;
}
