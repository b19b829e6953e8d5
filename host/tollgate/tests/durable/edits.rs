//! Edit before approve through `tollgate serve` and the real CLI: an approver changes a refund's
//! amount and a `Bash` command; the edited input is what runs, the record and the audit row keep
//! both inputs, and the model is told. An edit that does not fit the tool's schema is refused
//! with 400 naming the field, and nothing is stored.

use serde_json::{Value, json};

use crate::served::Served;
use crate::world::{Refund, World, api};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// `POST …/interrupts/{id}` with `body` (the answer validated against the OpenAPI document).
async fn decide(served: &Served, session: &str, id: &str, body: Value) -> crate::world::Answer {
    let url = format!("{}/v1/sessions/{session}/interrupts/{id}", served.url);
    api(reqwest::Client::new().post(url).bearer_auth("t0ken").json(&body)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approver_edits_a_refunds_amount_the_edited_amount_is_paid_and_the_model_is_told() {
    let Some(world) = World::new("edit: a refund's amount", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    world.send("s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    let open = world.store.interrupt("s", &id).await.unwrap().expect("the interrupt");
    let request: Value = serde_json::from_str(open.request.get()).unwrap();
    assert!(
        request["input_schema"]["properties"]["amount_cents"].is_object(),
        "the Worker stored the tool's input schema with the interrupt: {request}"
    );

    // Refused before anything is stored: the wrong type (named by path), a missing field, an
    // edit with a rejection.
    let wrong = decide(
        &served,
        "s",
        &id,
        json!({"approved": true, "updated_input": {"order_id": "7", "amount_cents": "lots"}}),
    )
    .await;
    assert_eq!(
        (wrong.status, &wrong.body["error"]["field"]),
        (400, &json!("updated_input")),
        "{}",
        wrong.text
    );
    assert!(wrong.text.contains("/amount_cents"), "{}", wrong.text);
    let missing =
        decide(&served, "s", &id, json!({"approved": true, "updated_input": {"order_id": "7"}})).await;
    assert_eq!(missing.status, 400, "{}", missing.text);
    assert!(missing.text.contains("amount_cents"), "{}", missing.text);
    let rejected = decide(
        &served,
        "s",
        &id,
        json!({"approved": false, "updated_input": {"order_id": "7", "amount_cents": 1}}),
    )
    .await;
    assert_eq!(
        (rejected.status, &rejected.body["error"]["field"]),
        (400, &json!("updated_input")),
        "{}",
        rejected.text
    );
    let still = world.snapshot("s").await;
    assert_eq!(still.status, "awaiting_approval", "nothing was decided");
    assert!(still.decisions.is_empty(), "no audit row: {:?}", still.decisions);
    assert_eq!(world.payments.count(), 0);

    // Through the CLI client: approve with the amount halved.
    let output = served
        .client_command(&[
            "approvals",
            "approve",
            "s",
            &id,
            "--input",
            r#"{"order_id":"7","amount_cents":250}"#,
        ])
        .env("TOLLGATE_TOKEN", "t0ken")
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && out.contains("approved with the edited input"),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done = world.wait_for("s", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // The payments stand-in received the edited amount, once, under the call's own key.
    let paid = world.payments.requests();
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert!(paid[0].body.contains("250") && !paid[0].body.contains("500"), "{}", paid[0].body);
    assert_eq!(paid[0].idempotency_key, format!("s/{}/{id}", done.tool_calls[0].turn_id));

    // The record and the audit row keep both inputs.
    let call = &done.tool_calls[0];
    assert_eq!(call.arguments, json!({"order_id": "7", "amount_cents": 250}));
    assert_eq!(call.original_arguments, Some(json!({"order_id": "7", "amount_cents": 500})));
    let [decision] = done.decisions.as_slice() else { panic!("one decision: {:?}", done.decisions) };
    assert_eq!(decision.input, Some(json!({"order_id": "7", "amount_cents": 500})));
    assert_eq!(decision.edited_input, Some(json!({"order_id": "7", "amount_cents": 250})));
    let shown = served
        .client_command(&["session", "show", "s"])
        .env("TOLLGATE_TOKEN", "t0ken")
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("edited to"), "{shown}");
    assert!(
        shown.lines().any(|l| l.contains("create_refund") && l.contains("250") && l.contains("(edited)")),
        "{shown}"
    );

    // The model read that the approver changed the input, and how.
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model saw the refund's result");
    assert!(!is_error, "{seen}");
    assert!(
        seen.starts_with("The approver changed the input from ")
            && seen.contains(r#""amount_cents":500"#)
            && seen.contains(r#""amount_cents":250"#),
        "{seen}"
    );
    served.stop().await;
}

/// The support agent's options factory requires approval for a `Bash` command with `;`. The
/// approver replaces the command: the resumed segment's CLI runs the edited one (the gate's
/// `allow` + `updatedInput`), the original never runs, and the model reads the edit in the
/// hook's `additionalContext`.
#[tokio::test(flavor = "multi_thread")]
async fn an_approver_edits_a_bash_command_only_the_edited_command_runs_and_the_model_is_told() {
    let Some(world) = World::new("edit: a Bash command", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let marker = world.dir.path().join("original-ran");
    let original = format!("touch {}; echo original-output", marker.display());
    world.send("s", &format!("call Bash {}", json!({"command": original}))).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert_eq!(id, world.bash_call_id(&original));
    let open = world.store.interrupt("s", &id).await.unwrap().expect("the interrupt");
    let request: Value = serde_json::from_str(open.request.get()).unwrap();
    assert_eq!(request["input_schema"]["required"], json!(["command"]), "{request}");

    let bad = decide(&served, "s", &id, json!({"approved": true, "updated_input": {"command": 7}})).await;
    assert_eq!((bad.status, &bad.body["error"]["field"]), (400, &json!("updated_input")), "{}", bad.text);
    assert!(bad.text.contains("/command"), "{}", bad.text);
    assert_eq!(world.snapshot("s").await.status, "awaiting_approval");

    let edited = json!({"command": "echo edited-ran-$((6+1))"});
    let ok = decide(&served, "s", &id, json!({"approved": true, "updated_input": edited})).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let done = world.wait_for("s", "the turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    let (seen, is_error) = world.tool_result_seen(&id).expect("the model saw the command's result");
    assert!(seen.contains("edited-ran-7") && !is_error, "the edited command ran: {seen}");
    assert!(!seen.contains("original-output"), "{seen}");
    assert!(!marker.exists(), "the original command never ran");
    let call = &done.tool_calls[0];
    assert_eq!(call.arguments, edited);
    assert_eq!(call.original_arguments, Some(json!({"command": original})));
    assert_eq!(done.decisions[0].edited_input, Some(edited.clone()));

    // What the model received after the call: the note of the edit, somewhere in its request.
    let after = world
        .mock
        .message_requests()
        .into_iter()
        .rev()
        .find(|r| r.tool_result(&id).is_some())
        .expect("a request with the result");
    let body = after.body.clone().unwrap_or_default().to_string();
    // CLI 2.1.328 puts the hook's `additionalContext` in a system reminder beside the result.
    let messages = after.body.clone().unwrap_or_default()["messages"].clone();
    let with_result = messages
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["content"].as_array().is_some_and(|c| c.iter().any(|b| b["tool_use_id"] == json!(id))))
        .expect("the message with the result");
    let note = format!(
        "PreToolUse:Bash hook additional context: The approver changed the input from {} to {}.",
        json!({"command": original}),
        edited
    );
    let told = with_result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|b| b["type"] == "text" && b["text"].as_str().is_some_and(|t| t.contains(&note)));
    assert!(told, "{note}\n{body}");
    served.stop().await;
}

/// `tollgate api` does not load the agent: on PostgreSQL it checks an edit against the schema the
/// Worker stored with the interrupt (visible in the inbox), refuses one that does not fit with
/// nothing stored, and the accepted one runs on the Worker.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_without_the_agent_checks_an_edit_against_the_stored_schema_on_postgres() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "edit: tollgate api on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    let _worker = world.worker("w");
    world.send("p", REFUND).await;
    let waiting = world.wait_for("p", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    let http = reqwest::Client::new();
    let inbox = api(http.get(format!("{}/v1/interrupts", served.url)).bearer_auth("t0ken")).await;
    let schema = &inbox.body["interrupts"][0]["request"]["input_schema"];
    assert!(schema["properties"]["amount_cents"].is_object(), "{}", inbox.text);

    let bad = decide(
        &served,
        "p",
        &id,
        json!({"approved": true, "updated_input": {"order_id": "7", "amount_cents": -5}}),
    )
    .await;
    assert_eq!((bad.status, &bad.body["error"]["field"]), (400, &json!("updated_input")), "{}", bad.text);
    assert!(bad.text.contains("/amount_cents"), "{}", bad.text);
    let not_object = decide(&served, "p", &id, json!({"approved": true, "updated_input": [1]})).await;
    assert_eq!(not_object.status, 400, "{}", not_object.text);
    let still = world.snapshot("p").await;
    assert_eq!((still.status.as_str(), still.decisions.len()), ("awaiting_approval", 0));

    let edit = json!({"order_id": "7", "amount_cents": 120});
    let ok = decide(&served, "p", &id, json!({"approved": true, "updated_input": edit})).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let done = world.wait_for("p", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let paid = world.payments.requests();
    assert!(paid.len() == 1 && paid[0].body.contains("120"), "{paid:?}");
    assert_eq!(done.decisions[0].edited_input, Some(edit));
    served.stop().await;
}
