//! Principals end to end: `tollgate auth add` writes the auth file, `tollgate serve --auth FILE`
//! runs the real CLI against the mock model, and a refund whose policy names
//! `approvers = ["finance"]` waits for approval. Who may decide it is checked through HTTP (every
//! answer validated against the OpenAPI document) and through the CLI client; the decision lands
//! in the audit trail, the snapshot, the event stream, `session show` and `GET /v1/audit`.

use serde_json::{Value, json};

use crate::served::{Served, add_principal};
use crate::world::{Refund, World, api};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// Gives the example agent's refund policy `approvers = ["finance"]`.
fn restrict_refunds_to_finance(world: &World) {
    world.refund_policy_with(r#"approvers = ["finance"]"#);
}

/// A client command run as the holder of `token`: its success, stdout and stderr.
async fn as_principal(served: &Served, token: &str, args: &[&str]) -> (bool, String, String) {
    let output =
        served.client_command(args).env("TOLLGATE_TOKEN", token).output().await.expect("run tollgate");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_approver_of_the_policys_group_who_did_not_start_the_session_decides_and_is_audited() {
    let Some(world) = World::new("auth: who may decide a refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    restrict_refunds_to_finance(&world);
    let file = world.dir.path().join("auth.toml");
    let vera = add_principal(&world, &file, "vera", &["viewer"], &[]).await;
    let carl = add_principal(&world, &file, "carl", &["client", "approver"], &["finance"]).await;
    let olga = add_principal(&world, &file, "olga", &["approver"], &["ops"]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(![&vera, &carl, &olga, &fina].iter().any(|t| stored.contains(t.as_str())), "hashes only");
    let again =
        world.tollgate().args(["auth", "add", "vera", "--role", "viewer", "--auth"]).arg(&file).output();
    let again = again.await.unwrap();
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already has"));

    let file_arg = file.to_str().unwrap();
    let served = Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file_arg]).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());

    // A viewer may not start a session; a client may.
    let (ok, _, err) = as_principal(&served, &vera, &["session", "start", "s", "--message", REFUND]).await;
    assert!(!ok && err.contains("role_required") && err.contains("`client` or `admin`"), "{err}");
    let (ok, out, err) = as_principal(&served, &carl, &["session", "start", "s", "--message", REFUND]).await;
    assert!(ok, "{out}{err}\n{}", world.diagnostics());
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    let decide = format!("{url}/v1/sessions/s/interrupts/{id}");
    let approve = |token: &str| {
        http.post(&decide)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(r#"{"approved":true}"#)
    };

    // Who are you: no token, an unknown token.
    let none =
        api(http.post(&decide).header("content-type", "application/json").body(r#"{"approved":true}"#)).await;
    assert_eq!((none.status, &none.body["error"]["code"]), (401, &json!("unauthorized")));
    let unknown = api(approve("tg_not-a-token")).await;
    assert_eq!((unknown.status, &unknown.body["error"]["code"]), (401, &json!("unauthorized")));
    let (ok, _, err) = as_principal(&served, "tg_not-a-token", &["approvals", "approve", "s", &id]).await;
    assert!(!ok && err.contains("401"), "{err}");

    // Not allowed: the role, the session's own starter, a group the policy does not name.
    let viewer = api(approve(&vera)).await;
    assert_eq!(
        (viewer.status, &viewer.body["error"]["code"]),
        (403, &json!("role_required")),
        "{}",
        viewer.text
    );
    assert_eq!(viewer.body["error"]["needed"], json!(["approver", "admin"]));
    let (ok, _, err) = as_principal(&served, &vera, &["approvals", "approve", "s", &id]).await;
    assert!(!ok && err.contains("needs the role `approver` or `admin`"), "{err}");
    let own = api(approve(&carl)).await;
    assert_eq!((own.status, &own.body["error"]["code"]), (403, &json!("own_session")), "{}", own.text);
    let (ok, _, err) = as_principal(&served, &carl, &["approvals", "approve", "s", &id]).await;
    assert!(!ok && err.contains("started session `s`") && err.contains("separation of duties"), "{err}");
    let other_group = api(approve(&olga)).await;
    assert_eq!((other_group.status, &other_group.body["error"]["code"]), (403, &json!("group_required")));
    assert_eq!(other_group.body["error"]["needed"], json!(["finance"]));
    let (ok, _, err) =
        as_principal(&served, &olga, &["approvals", "reject", "s", &id, "--message", "no"]).await;
    assert!(!ok && err.contains("`finance`") && err.contains("`ops`"), "{err}");
    let still = world.snapshot("s").await;
    assert_eq!(still.status, "awaiting_approval", "nothing was decided");
    assert!(still.decisions.is_empty(), "refusals write no audit row: {:?}", still.decisions);

    // An approver of the finance group decides; the refund runs once.
    let (ok, out, err) = as_principal(&served, &fina, &["approvals", "approve", "s", &id]).await;
    assert!(ok && out.contains("approved"), "{out}{err}");
    let done = world.wait_for("s", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the refund ran once");

    // The snapshot (validated) names who started and who decided.
    let snapshot = api(http.get(format!("{url}/v1/sessions/s")).bearer_auth(&vera)).await;
    assert_eq!(snapshot.status, 200);
    assert_eq!(snapshot.body["started_by"], "carl");
    let decisions = snapshot.body["decisions"].as_array().expect("decisions").clone();
    let [decision] = decisions.as_slice() else { panic!("one decision: {decisions:?}") };
    assert_eq!(decision["principal"], "fina");
    assert_eq!(decision["decision"], "approved");
    assert_eq!(decision["tool_name"], "create_refund");
    assert_eq!(decision["interrupt_id"], json!(id));
    assert_eq!(decision["input"], json!({"order_id": "7", "amount_cents": 500}));
    assert_eq!(decision["edited_input"], Value::Null);
    let decided_at = decision["decided_at"].as_i64().expect("a time");
    let events = world.events("s").await;
    let recorded: Vec<_> = events.iter().filter(|e| e.kind == "decision_recorded").collect();
    assert_eq!(recorded.len(), 1, "{events:?}");
    let payload: Value = serde_json::from_str(recorded[0].payload.get()).unwrap();
    assert_eq!((&payload["principal"], &payload["decision"]), (&json!("fina"), &json!("approved")));
    let (ok, shown, err) = as_principal(&served, &vera, &["session", "show", "s"]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("started by: carl") && shown.contains("fina approved create_refund"), "{shown}");

    // GET /v1/audit (validated) filters by principal, session and time.
    let audit = |query: &str| api(http.get(format!("{url}/v1/audit{query}")).bearer_auth(&vera));
    let count =
        |answer: &crate::world::Answer| answer.body["entries"].as_array().map_or(usize::MAX, Vec::len);
    for (query, expected) in [
        ("", 1),
        ("?principal=fina", 1),
        ("?principal=olga", 0),
        ("?session_id=s", 1),
        ("?session_id=other", 0),
        (&format!("?since={decided_at}&until={}", decided_at + 1), 1),
        (&format!("?since={}", decided_at + 1), 0),
        (&format!("?until={decided_at}"), 0),
    ] {
        let answer = audit(query).await;
        assert_eq!((answer.status, count(&answer)), (200, expected), "{query}: {}", answer.text);
    }
    let bad = audit("?since=yesterday").await;
    assert_eq!((bad.status, &bad.body["error"]["field"]), (400, &json!("since")), "{}", bad.text);
    let (ok, listed, err) =
        as_principal(&served, &vera, &["approvals", "audit", "--principal", "fina"]).await;
    assert!(ok && listed.contains("s ") && listed.contains("fina approved"), "{listed}{err}");
    // The trail is append-only for the API: no route writes it.
    let delete = api(http.delete(format!("{url}/v1/audit")).bearer_auth(&fina)).await;
    assert_eq!(delete.status, 405);
    served.stop().await;
}

/// `tollgate api` does not load the agent: the approvers come from the interrupt the Worker
/// stored. On PostgreSQL, with the `--token` shortcut beside the file (an ordinary admin there).
#[tokio::test(flavor = "multi_thread")]
async fn an_api_without_the_agent_enforces_the_approvers_the_worker_stored_on_postgres() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "auth: tollgate api on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    restrict_refunds_to_finance(&world);
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let olga = add_principal(&world, &file, "olga", &["approver"], &["ops"]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let served =
        Served::start_api(&world, "api", &["--auth", file.to_str().unwrap(), "--token", "the-admin-token"])
            .await;
    let _worker = world.worker("w");
    let (url, http) = (served.url.clone(), reqwest::Client::new());

    let body = json!({"session_id": "p", "message": REFUND}).to_string();
    let created = api(http
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(&carl)
        .header("content-type", "application/json")
        .body(body))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let waiting = world.wait_for("p", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    let inbox = api(http.get(format!("{url}/v1/interrupts")).bearer_auth(&olga)).await;
    assert_eq!(inbox.body["interrupts"][0]["request"]["approvers"], json!(["finance"]), "{}", inbox.text);

    let decide = format!("{url}/v1/sessions/p/interrupts/{id}");
    let reject = |token: &str| {
        http.post(&decide)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(r#"{"approved":false,"message":"not this order"}"#)
    };
    for token in [&olga, "the-admin-token"] {
        let refused = api(reject(token)).await;
        assert_eq!(
            (refused.status, &refused.body["error"]["code"]),
            (403, &json!("group_required")),
            "{}",
            refused.text
        );
        assert_eq!(refused.body["error"]["needed"], json!(["finance"]));
    }
    let client = api(reject(&carl)).await;
    assert_eq!((client.status, &client.body["error"]["code"]), (403, &json!("role_required")));
    let decided = api(reject(&fina)).await;
    assert_eq!(decided.status, 200, "{}", decided.text);
    let replayed = api(reject(&fina)).await;
    assert_eq!((replayed.status, &replayed.body["replayed"]), (200, &json!(true)));
    world.wait_for("p", "the rejection's turn", |s| s.status == "idle").await;
    assert_eq!(world.payments.count(), 0, "a rejected refund never runs");

    let trail = api(http.get(format!("{url}/v1/audit?session_id=p")).bearer_auth("the-admin-token")).await;
    let entries = trail.body["entries"].as_array().expect("entries").clone();
    assert_eq!(entries.len(), 1, "one decision, one row, the replay none: {}", trail.text);
    assert_eq!(entries[0]["principal"], "fina");
    assert_eq!(entries[0]["decision"], "rejected");
    assert_eq!(entries[0]["reason"], "not this order");
    let page = api(http.get(format!("{url}/v1/audit?limit=1")).bearer_auth(&carl)).await;
    assert_eq!(page.body["next_after"], entries[0]["audit_id"], "a full page points past its last row");
    let next =
        api(http.get(format!("{url}/v1/audit?limit=1&after={}", entries[0]["audit_id"])).bearer_auth(&carl))
            .await;
    assert_eq!(
        (next.body["entries"].as_array().map(Vec::len), &next.body["next_after"]),
        (Some(0), &Value::Null)
    );
    served.stop().await;
}

/// What `command` (a `tollgate serve` that must refuse to start) says on stderr, once it exited
/// unsuccessfully.
async fn refusal(mut command: tokio::process::Command) -> String {
    let refused =
        tokio::time::timeout(std::time::Duration::from_secs(60), command.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    println!("finding: {}", stderr.trim());
    assert!(!refused.status.success(), "{stderr}");
    stderr
}

/// A policy naming an approvers group no approver or admin of the auth file is in would leave its
/// calls waiting for ever: `serve` refuses to start, naming the tool, the group and the nearest
/// group there is; with a member of the group it starts.
#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_a_policy_whose_approvers_group_has_no_approver() {
    let Some(world) =
        World::new("auth: an approvers group with nobody in it", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    restrict_refunds_to_finance(&world);
    let file = world.dir.path().join("auth.toml");
    add_principal(&world, &file, "vera", &["viewer"], &["finance"]).await;
    add_principal(&world, &file, "fina", &["approver"], &["finanse"]).await;
    let serve = || {
        let mut command = world.tollgate();
        command
            .args(["serve", "--agent"])
            .arg(&world.agent)
            .args(["--db", &world.db, "--listen", "127.0.0.1:0", "--auth"])
            .arg(&file)
            .stdin(std::process::Stdio::null());
        command
    };
    let stderr = refusal(serve()).await;
    assert!(
        stderr.contains("`create_refund`: approvers group `finance` has no approver or admin in it (did you mean `finanse`?)")
            && stderr.contains("are `finanse`"),
        "{stderr}"
    );
    // A viewer in the group does not count; an approver does.
    add_principal(&world, &file, "fred", &["approver"], &["finance"]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    served.stop().await;

    // Two different approvers for a high-risk refund, with one approver in `finance`: refused,
    // naming who may decide; a second approver in the group lets it start.
    world.refund_policy_with("high_risk_approvers = 2");
    let stderr = refusal(serve()).await;
    assert!(
        stderr.contains("`create_refund`: high_risk_approvers = 2, but only 1 may decide it (fred)"),
        "{stderr}"
    );
    add_principal(&world, &file, "gina", &["admin"], &["finance"]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    served.stop().await;
}

/// Who decides, decided once in the session service for every face: a face asks only a principal
/// who may decide the call and otherwise tells its user who is awaited; the starter is refused
/// under separation of duties and decides under the single-user setting
/// (`separation_of_duties = false`). On the store alone: no CLI, no HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn the_session_service_asks_only_who_may_decide_and_names_who_is_awaited_otherwise() {
    use std::sync::Arc;

    use tollgate_engine::session::client::HumanDecision;
    use tollgate_sessions::agents::SessionAgent;
    use tollgate_sessions::error::ClientError;
    use tollgate_sessions::rights::{Caller, Denied, Role, Rules};
    use tollgate_sessions::service::{Deciders, Sessions};

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn tollgate_store::Store> =
        Arc::new(tollgate_store::SqliteStore::open(&dir.path().join("store.db")).await.unwrap());
    tollgate_sessions::writes::start_by(store.as_ref(), "s-1", SessionAgent::default(), "carl")
        .await
        .unwrap();
    tollgate_testing::park::park_started(
        store.as_ref(),
        "s-1",
        json!({"order_id": "7", "amount_cents": 500}),
    )
    .await;
    let person = |name: &str| Caller {
        name: name.to_owned(),
        roles: [Role::Client, Role::Approver].into(),
        groups: Default::default(),
        sole: false,
        agents: None,
    };
    let (carl, dana) = (person("carl"), person("dana"));
    let strict = Sessions::new(store.clone(), Rules::default(), None);
    let single = Sessions::new(store.clone(), Rules { separation_of_duties: false }, None);

    let awaited = strict.deciders(&carl, "s-1", "toolu_s-1").await.unwrap();
    assert_eq!(
        awaited,
        Deciders::Awaited(
            "waiting for approval by an approver other than carl, who started the session".into()
        )
    );
    assert_eq!(strict.deciders(&dana, "s-1", "toolu_s-1").await.unwrap(), Deciders::Caller);
    assert_eq!(single.deciders(&carl, "s-1", "toolu_s-1").await.unwrap(), Deciders::Caller);

    let approve = HumanDecision { approved: true, ..HumanDecision::default() };
    let refused = strict.decide(&carl, "s-1", "toolu_s-1", &approve, None).await.unwrap_err();
    assert!(matches!(refused, ClientError::Denied(Denied::OwnSession { .. })), "{refused}");
    let decided =
        single.decide(&carl, "s-1", "toolu_s-1", &approve, None).await.expect("the starter decides");
    assert!(!decided.replayed);
    let snapshot = single.snapshot(&carl, "s-1").await.unwrap();
    assert_eq!(snapshot.decisions.last().map(|d| d.principal.as_str()), Some("carl"));
}
