//! Webhooks end to end: `tollgate serve --webhooks FILE`, the real CLI awaiting approval of a
//! refund, and a loopback receiver (in this test) that fails the first deliveries.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_api::webhooks::config::decode_secret;
use tollgate_api::webhooks::sign::{VerifyError, verify};

use crate::served::Served;
use crate::world::{Refund, World};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How the receiver answers one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Answer {
    Status(u16),
    /// Reads the request, then closes the connection without an answer.
    Drop,
}

#[derive(Clone, Debug)]
pub(crate) struct Received {
    at: Instant,
    at_ms: i64,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    answer: Answer,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn accepted(&self) -> bool {
        matches!(self.answer, Answer::Status(s) if (200..300).contains(&s))
    }
}

/// A loopback HTTP receiver that answers the n-th request with `script[n]` (then 204).
pub(crate) struct Receiver {
    pub(crate) url: String,
    log: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub(crate) async fn start(script: Vec<Answer>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let task = tokio::spawn({
            let log = log.clone();
            async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let log = log.clone();
                    let script = script.clone();
                    tokio::spawn(async move {
                        let Some((headers, body)) = read_request(&mut stream).await else { return };
                        let answer = {
                            let mut log = log.lock().unwrap();
                            let answer = script.get(log.len()).copied().unwrap_or(Answer::Status(204));
                            let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
                            log.push(Received {
                                at: Instant::now(),
                                at_ms: i64::try_from(at_ms).unwrap(),
                                headers,
                                body,
                                answer,
                            });
                            answer
                        };
                        if let Answer::Status(code) = answer {
                            let reply = format!(
                                "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            );
                            let _ = stream.write_all(reply.as_bytes()).await;
                        }
                        let _ = stream.shutdown().await;
                    });
                }
            }
        });
        Receiver { url, log, task }
    }

    pub(crate) fn requests(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    pub(crate) async fn wait_until(&self, what: &str, done: impl Fn(&[Received]) -> bool, world: &World) {
        let start = Instant::now();
        while !done(&self.requests()) {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "timed out waiting for {what}; received {:#?}\n{}",
                self.requests().iter().map(|r| (r.answer, r.json())).collect::<Vec<_>>(),
                world.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One HTTP/1.1 request: lower-cased headers and the body (by `content-length`).
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(HashMap<String, String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = buf[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((headers, body))
}

pub(crate) fn write_hooks(world: &World, url: &str) -> String {
    let path = world.dir.path().join("hooks.toml");
    std::fs::write(world.dir.path().join("hook.secret"), format!("{SECRET}\n")).unwrap();
    std::fs::write(
        &path,
        format!(
            "[[webhooks]]\nname = \"ops\"\nurl = \"{url}\"\nsecret_file = \"hook.secret\"\n\
             events = [\"interrupt.created\", \"interrupt.escalated\", \"interrupt.decided\", \
             \"turn.completed\", \"turn.failed\"]\ntimeout_secs = 2\nretry_initial_secs = 3\nmax_attempts = 5\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_fails_twice_gets_every_event_signed_with_stable_ids_across_a_restart() {
    let Some(world) = World::new("webhooks", Refund::SingleAttemptWithApproval).await else { return };
    let receiver = Receiver::start(vec![Answer::Status(500), Answer::Drop]).await;
    let hooks = write_hooks(&world, &receiver.url);
    let served = Served::start_with(&world, "serve-a", "127.0.0.1:0", &["--webhooks", &hooks]).await;

    world.send("s", REFUND).await;
    receiver.wait_until("the first delivery", |r| !r.is_empty(), &world).await;
    // Once the failed attempt is recorded (due again in about 3 s), SIGKILL the server.
    let outbox = world.store.outbox().expect("an outbox");
    let start = Instant::now();
    while !outbox.deliveries(0, 10).await.unwrap().iter().any(|d| d.last_error.is_some()) {
        assert!(start.elapsed() < Duration::from_secs(30), "the failed attempt was never recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    served.kill().await;
    let killed = Instant::now();
    let served = Served::start_with(&world, "serve-b", "127.0.0.1:0", &["--webhooks", &hooks]).await;

    receiver.wait_until("interrupt.created accepted", |r| r.iter().any(Received::accepted), &world).await;
    let waiting = world.snapshot("s").await;
    assert_eq!(waiting.status, "awaiting_approval", "{}", world.diagnostics());
    let interrupt = waiting.pending_interrupts[0].interrupt_id.clone();
    world.decide("s", &interrupt, true, None, "k1").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    world.send("s", "fail 500").await;
    let failed = world.wait_idle_after("s", 2).await;
    assert!(failed.last_turn_error.is_some());
    receiver
        .wait_until("four events accepted", |r| r.iter().filter(|r| r.accepted()).count() >= 4, &world)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // nothing more arrives
    drop(served);

    let requests = receiver.requests();
    let key = decode_secret(SECRET).unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    for r in &requests {
        let checked = verify(
            &key,
            r.header("webhook-id"),
            r.header("webhook-timestamp"),
            r.header("webhook-signature"),
            &r.body,
            i64::try_from(now).unwrap(),
            300,
        );
        assert_eq!(checked, Ok(()), "every delivery verifies: {r:?}");
        assert_eq!(r.header("content-type"), "application/json");
    }
    let mut tampered = requests[0].clone();
    tampered.body[10] ^= 1;
    let checked = verify(
        &key,
        tampered.header("webhook-id"),
        tampered.header("webhook-timestamp"),
        tampered.header("webhook-signature"),
        &tampered.body,
        i64::try_from(now).unwrap(),
        300,
    );
    assert_eq!(checked, Err(VerifyError::NoMatch), "a tampered body does not verify");

    // The first event: refused, dropped, then accepted, under one id with one body, the retry
    // after the kill sent by the restarted server.
    let answers: Vec<Answer> = requests.iter().take(3).map(|r| r.answer).collect();
    assert_eq!(answers, [Answer::Status(500), Answer::Drop, Answer::Status(204)]);
    let first_id = requests[0].header("webhook-id");
    assert!(
        requests.iter().take(3).all(|r| r.header("webhook-id") == first_id && r.json() == requests[0].json())
    );
    assert!(requests[1].at > killed, "the retry came after the restart");
    assert!(first_id.starts_with("msg_"));

    let accepted: Vec<&Received> = requests.iter().filter(|r| r.accepted()).collect();
    let mut by_type: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in &accepted {
        let body = r.json();
        by_type.entry(body["type"].as_str().unwrap().to_owned()).or_default().push(body);
    }
    let types: Vec<(&str, usize)> = by_type.iter().map(|(t, v)| (t.as_str(), v.len())).collect();
    assert_eq!(
        types,
        [("interrupt.created", 1), ("interrupt.decided", 1), ("turn.completed", 1), ("turn.failed", 1)],
        "every event once it answers 2xx"
    );
    let mut ids: Vec<&str> = accepted.iter().map(|r| r.header("webhook-id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "one id per event");
    let created = &by_type["interrupt.created"][0]["data"];
    assert_eq!(
        (created["session_id"].as_str(), created["interrupt_id"].as_str(), created["tool_name"].as_str()),
        (Some("s"), Some(interrupt.as_str()), Some("create_refund"))
    );
    assert_eq!(created["arguments"], serde_json::json!({"order_id": "7", "amount_cents": 500}));
    let decided = &by_type["interrupt.decided"][0]["data"];
    assert_eq!(
        (decided["interrupt_id"].as_str(), decided["approved"].as_bool()),
        (Some(interrupt.as_str()), Some(true))
    );
    assert_eq!(
        decided["decided_by"], "tollgate:local",
        "the principal, as the audit row names it: {decided}"
    );
    let completed = &by_type["turn.completed"][0]["data"];
    assert_eq!(completed["turn_id"], created["turn_id"]);
    let turn_failed = &by_type["turn.failed"][0]["data"];
    assert!(turn_failed["reason"].is_string() && turn_failed["error"].is_string(), "{turn_failed}");

    // Figures, not assertions: how long after its event each delivery arrived.
    let events = world.events("s").await;
    let created_at = |seq: i64| events.iter().find(|e| e.seq == seq).expect("the event").created_at;
    for r in accepted {
        let body = r.json();
        let seq = body["data"]["event_seq"].as_i64().unwrap();
        eprintln!(
            "webhook {:<18} delivered {:>6} ms after its event ({} attempt(s))",
            body["type"].as_str().unwrap(),
            r.at_ms - created_at(seq),
            requests.iter().filter(|q| q.header("webhook-id") == r.header("webhook-id")).count()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_servers_on_postgres_send_each_event_once() {
    let Some(db) = crate::pg_database().await else { return };
    let Some(world) = World::on_db("webhooks on PostgreSQL", Refund::SingleAttemptWithApproval, &db).await
    else {
        return;
    };
    let receiver = Receiver::start(Vec::new()).await;
    let hooks = write_hooks(&world, &receiver.url);
    let a = Served::start_with(&world, "serve-a", "127.0.0.1:0", &["--webhooks", &hooks]).await;
    let b = Served::start_with(&world, "serve-b", "127.0.0.1:0", &["--webhooks", &hooks]).await;

    world.send("s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    world.decide("s", &waiting.pending_interrupts[0].interrupt_id, true, None, "k1").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    receiver.wait_until("three events", |r| r.len() >= 3, &world).await;
    // Longer than a poll of both loops: a second sender would have sent by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop((a, b));

    let requests = receiver.requests();
    let mut types: Vec<String> =
        requests.iter().map(|r| r.json()["type"].as_str().unwrap().to_owned()).collect();
    types.sort_unstable();
    assert_eq!(types, ["interrupt.created", "interrupt.decided", "turn.completed"], "each event sent once");
    let deliveries = world.store.outbox().unwrap().deliveries(0, 100).await.unwrap();
    assert!(
        deliveries.iter().all(|d| d.state == tollgate_store::DeliveryState::Delivered && d.attempt == 1),
        "{deliveries:?}"
    );
    let events = world.events("s").await;
    for r in &requests {
        let body = r.json();
        let seq = body["data"]["event_seq"].as_i64().unwrap();
        let at = events.iter().find(|e| e.seq == seq).expect("the event").created_at;
        eprintln!(
            "webhook {:<18} delivered {:>6} ms after its event (PostgreSQL, two servers)",
            body["type"].as_str().unwrap(),
            r.at_ms - at
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_webhooks_file_stops_tollgate_api_naming_the_file_line_and_key_before_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("api.db");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[webhooks]]\nurl = \"http://127.0.0.1:9/\"\nsecret = \"{SECRET}\"\nevents = [\"turn.done\"]\n"
        ),
    )
    .unwrap();
    let Err(refused) = crate::tls::ApiServer::start(&db, &["--webhooks", bad.to_str().unwrap()], &[]).await
    else {
        panic!("tollgate api started with a bad webhooks file");
    };
    assert!(!refused.success);
    let want = format!("{}:4: webhook 1: `events`: unknown event `turn.done`", bad.display());
    assert!(refused.stderr.contains(&want), "{}", refused.stderr);
    assert!(!db.exists(), "the store was opened before the webhooks file was checked");

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[[webhooks]]\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"HOOK_SECRET\"\nevents = [\"turn.failed\"]\n",
    )
    .unwrap();
    let api = crate::tls::ApiServer::start(
        &db,
        &["--webhooks", good.to_str().unwrap()],
        &[("HOOK_SECRET", SECRET)],
    )
    .await
    .expect("tollgate api starts with a good webhooks file");
    assert!(api.log_text().contains("sending webhooks to 1 endpoint(s)"), "{}", api.log_text());
    api.stop().await;
}
