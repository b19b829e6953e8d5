//! The agent's own hooks, subagents and compaction through Workers, the store and the real CLI:
//! a `tollgate:agent@0.2.0` factory's WASM hooks on a refund that waits for approval; a `Task`
//! subagent whose read runs and whose write is refused, stored and counted with the session; a
//! session compacted by the CLI that goes on on other Workers. Each test's session has a name of
//! its own, so their workspaces (`<temp dir>/tollgate-workspaces-<uid>/<session>`) do not meet.

use std::path::PathBuf;

use crate::world::{Refund, World};

/// A copy of the world's agent with `factory` as its options factory (or, with `None`, the static
/// `options` table instead of one), and `Agent` (the `Task` tool) reading.
fn agent_with(world: &World, name: &str, factory: Option<&str>, options: &str) -> PathBuf {
    let dir = world.dir.path().join(name);
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    for tool in ["orders.wasm", "payments.wasm"] {
        std::fs::copy(world.agent.join("tools").join(tool), dir.join("tools").join(tool)).unwrap();
    }
    let mut config = std::fs::read_to_string(world.agent.join("tollgate.toml")).unwrap();
    config = config.replace(
        "Grep = { effect = \"read\" }",
        "Grep = { effect = \"read\" }\nAgent = { effect = \"read\" }",
    );
    match factory {
        Some(factory) => {
            std::fs::copy(factory, dir.join("agent.wasm")).unwrap();
        }
        None => {
            config = config.replace("options_factory = \"agent.wasm\"", "");
            config.push_str(options);
        }
    }
    std::fs::write(dir.join("tollgate.toml"), config).unwrap();
    dir
}

/// The text of the mock's model calls' bodies, in order.
fn requests(world: &World) -> Vec<String> {
    world.mock.message_requests().iter().map(|r| r.body.clone().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_0_2_factorys_hooks_rewrite_a_refund_add_context_block_a_prompt_and_make_the_model_go_on() {
    let Some(world) = World::new("hooks: a 0.2.0 factory", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let agent = agent_with(&world, "hooked", Some(tollgate_test_guests::HOOKS_FACTORY), "");
    let worker = world.worker_of("w1", &agent);

    // PreToolUse rewrites the refund to 1000 cents; the gate still asks for approval.
    world.send("features-hooks", r#"call create_refund {"order_id":"7","amount_cents":5000}"#).await;
    let waiting = world.wait_for("features-hooks", "the approval", |s| s.status == "awaiting_approval").await;
    let pending = &waiting.pending_interrupts[0];
    assert_eq!(pending.arguments["amount_cents"], 1000, "{waiting:#?}\n{}", world.diagnostics());
    assert_eq!(world.payments.count(), 0, "nothing runs before the approval");
    // UserPromptSubmit's context reached the model with the prompt.
    assert!(requests(&world)[0].contains("UserPromptSubmit hook additional context: the customer is ACME"));

    world.decide("features-hooks", &pending.interrupt_id.clone(), true, None, "k1").await;
    let done = world.wait_idle_after("features-hooks", 1).await;
    assert_eq!(world.payments.count(), 1, "{}", world.diagnostics());
    assert!(world.payments.requests()[0].text.contains(r#""amount_cents":1000"#));
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(answer.starts_with("called create_refund: "), "{done:#?}");
    // PostToolUse ran on the resumed call, with the recorded output, and the model read it.
    assert!(
        requests(&world).last().unwrap().contains("PostToolUse:mcp__tools__create_refund hook additional context: checked by the application hook: mcp__tools__create_refund"),
        "{}",
        world.diagnostics()
    );

    // Stop: a reply the hook does not let end makes the model go on once.
    world.send("features-hooks", "say hook:continue").await;
    let done = world.wait_idle_after("features-hooks", 2).await;
    assert_eq!(done.messages.last().unwrap().text, "said: continued after the stop hook", "{done:#?}");

    // UserPromptSubmit blocks a prompt: no model call, the turn says why.
    let before = world.mock.message_requests().len();
    world.send("features-hooks", "say hook:block-prompt").await;
    let done = world.wait_idle_after("features-hooks", 3).await;
    assert_eq!(world.mock.message_requests().len(), before, "{}", world.diagnostics());
    let ended =
        world.events("features-hooks").await.into_iter().rfind(|e| e.kind == "turn_completed").unwrap();
    assert!(
        ended.payload.get().contains("UserPromptSubmit operation blocked by hook"),
        "{}",
        ended.payload.get()
    );
    assert!(done.last_turn_error.is_none(), "{done:#?}");
    worker.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagents_read_runs_its_write_is_refused_and_its_transcript_and_calls_are_kept_with_the_session() {
    let Some(world) = World::new("subagents through a Worker", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let agent = agent_with(&world, "tasked", None, "\n[options]\ntools = [\"Read\", \"Task\"]\n");
    let worker = world.worker_of("w1", &agent);
    let prompt =
        r#"call lookup_order {"order_id":"7"} && call create_refund {"order_id":"7","amount_cents":100}"#;
    let task = serde_json::json!({"description": "refund order 7", "subagent_type": "general-purpose", "prompt": prompt});
    world.send("features-subagent", &format!("call Task {task}")).await;
    let done = world.wait_idle_after("features-subagent", 1).await;
    assert!(done.last_turn_error.is_none(), "{done:#?}\n{}", world.diagnostics());
    assert_eq!(world.payments.count(), 0, "a subagent's write never runs");
    assert!(done.pending_interrupts.is_empty() && done.tool_calls.is_empty(), "{done:#?}");

    // The subagent read why, and the main conversation's answer carries its report.
    let answer = &done.messages.last().unwrap().text;
    assert!(
        answer.contains("Call mcp__tools__create_refund from the main conversation instead."),
        "{done:#?}"
    );
    assert!(answer.contains(r#""status":"delivered""#), "its read ran: {done:#?}");

    // Its transcript is kept with the session: a subagent message after the Task call (whose
    // reply has no text of its own), before the answer.
    let roles: Vec<&str> = done.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "subagent", "assistant"], "{done:#?}");
    let subagent = &done.messages[1].text;
    assert!(subagent.starts_with("general-purpose: refund order 7\n\ncall lookup_order"), "{subagent}");
    let items =
        tollgate_sessions::reads::read_all_items(world.store.as_ref(), "features-subagent").await.unwrap();
    assert_eq!(items.iter().filter(|i| i.kind == "subagent").count(), 1);
    let stored = world.store.read_transcript("features-subagent").await.unwrap().chunks.concat();
    assert!(!stored.contains(r#""isSidechain":true"#), "the resume transcript holds no subagent entry");

    // Every model call counts, the subagent's two included.
    assert_eq!(world.mock.message_requests().len(), 4, "{}", world.diagnostics());
    assert_eq!(done.usage.model_calls, 4, "{done:#?}");
    worker.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_the_cli_compacted_goes_on_on_other_workers() {
    let Some(world) = World::new("compaction across Workers", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let agent = agent_with(&world, "long", None, "\n[options]\ntools = [\"Read\"]\n");
    // A full context (the mock reports 990,000 input tokens): the next turn compacts first.
    let first = world.worker_of("w1", &agent);
    world.send("features-compaction", "tokens 990000 ;; say remember order 7").await;
    world.wait_idle_after("features-compaction", 1).await;
    first.kill().await;

    let second = world.worker_of("w2", &agent);
    world.send("features-compaction", "recall").await;
    let done = world.wait_idle_after("features-compaction", 2).await;
    assert!(done.last_turn_error.is_none(), "{done:#?}\n{}", world.diagnostics());
    let recalled = &done.messages.last().unwrap().text;
    assert!(recalled.contains("summary:\n- prompt: tokens 990000 ;; say remember order 7"), "{done:#?}");
    let stored = world.store.read_transcript("features-compaction").await.unwrap().chunks.concat();
    assert!(stored.contains(r#""subtype":"compact_boundary""#), "the compaction is in the stored transcript");
    second.kill().await;

    // A third Worker resumes the compacted session: the model still has the summary.
    let third = world.worker_of("w3", &agent);
    world.send("features-compaction", "recall").await;
    let done = world.wait_idle_after("features-compaction", 3).await;
    assert!(done.last_turn_error.is_none(), "{done:#?}\n{}", world.diagnostics());
    let recalled = &done.messages.last().unwrap().text;
    assert!(recalled.contains("summary:\n- prompt: tokens 990000 ;; say remember order 7"), "{done:#?}");
    let failed = world
        .events("features-compaction")
        .await
        .into_iter()
        .filter(|e| e.kind == "turn_failed" || e.kind == "attempt_failed")
        .count();
    assert_eq!(failed, 0, "{}", world.diagnostics());
    third.kill().await;
}

/// A deferred write whose Python tool charges and then throws: the call is `outcome_unknown`
/// (it may have charged), its record keeps the tool's traceback for the operator, and the model
/// reads the failure's one line, never the traceback.
#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_tool_that_throws_keeps_its_traceback_in_the_record_and_out_of_the_models_reading() {
    let Some(world) =
        World::new("features: a traceback in the record", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    std::fs::copy(tollgate_test_guests::built("python", "throwing"), world.agent.join("tools/throwing.wasm"))
        .unwrap();
    let path = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "[policies]\n",
        "[policies]\ncharge_then_throw = { effect = \"non_idempotent_write\", requires_approval = false }\n",
        1,
    ) + "\n[tools.throwing]\nallowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n\
         config = { PAYMENTS_URL = { env = \"PAYMENTS_URL\" } }\n";
    std::fs::write(&path, text).unwrap();
    let worker = world.worker("w1");
    world.send("thrown", r#"call charge_then_throw {"order_id":"7","amount_cents":100}"#).await;
    let done = world.wait_idle_after("thrown", 1).await;
    let call = done.tool_calls.iter().find(|c| c.tool_name == "charge_then_throw").expect("the call");
    let record = serde_json::to_value(call).unwrap();
    assert_eq!(record["status"], "outcome_unknown", "{record:#}\n{}", world.diagnostics());
    let traceback = call.diagnostics.as_deref().unwrap_or_default();
    println!("finding: the record's diagnostics: {traceback}");
    assert!(traceback.contains("Traceback (most recent call last)"), "{record:#}");
    assert!(!requests(&world).iter().any(|r| r.contains("Traceback")), "the model read the traceback");
    worker.terminate().await;
}
