//! Subagents and permission modes against the pinned CLI: a `Task` subagent's read runs and its
//! deferrable write is denied with a text it reads, its transcript comes back apart from the
//! main one and its model calls are counted; the defer and resume cycle and two writes in one
//! reply under `dontAsk`.

use serde_json::{Value, json};
use tollgate_claude::{SegmentReport, SegmentSpec, Start};
use tollgate_engine::gate::DeferredCall;
use tollgate_engine::record::Outcome;
use tollgate_mock_model::{MockModel, tool_result};
use tollgate_protocol::{ResumeText, TranscriptEntry};

use crate::util::{
    Payments, against_mock, completed, deferred, describe_with, dir, example_tools, gate, real_cli, run,
};

/// One session: the mock, payments, a project, and the entries stored so far.
struct Session {
    cli: tollgate_claude::CliBinary,
    mock: MockModel,
    payments: Payments,
    project: tempfile::TempDir,
    mode: Option<&'static str>,
    id: String,
    entries: Vec<TranscriptEntry>,
}

impl Session {
    async fn start(cli: tollgate_claude::CliBinary, mode: Option<&'static str>) -> Session {
        Session {
            cli,
            mock: MockModel::start().await.expect("start the mock model"),
            payments: Payments::start().await.expect("start payments"),
            project: dir(),
            mode,
            id: String::new(),
            entries: Vec::new(),
        }
    }

    /// Runs a segment (fresh, or resuming the pending call with `record`) and keeps its entries.
    async fn segment(
        &mut self,
        prompt: Option<&str>,
        record: Option<tollgate_engine::record::ToolCallRecord>,
    ) -> (SegmentReport, String) {
        let start = match prompt {
            Some(prompt) if self.id.is_empty() => {
                Start::Fresh { prompt: tollgate_protocol::UserPrompt::blocks([prompt]) }
            }
            _ => {
                let mut transcript = ResumeText::default();
                transcript.push_entries(self.entries.iter().map(TranscriptEntry::as_str));
                let prompt = prompt.map(|p| tollgate_protocol::UserPrompt::blocks([p]));
                Start::Resume { session_id: self.id.clone(), transcript, prompt }
            }
        };
        let mut spec =
            against_mock(SegmentSpec::with_start(self.cli.clone(), self.project.path(), start), &self.mock);
        spec.permission_mode = self.mode.map(str::to_owned);
        let tools = example_tools(&self.payments);
        let gate = match record {
            Some(record) => gate(&*tools).resuming(record),
            None => gate(&*tools),
        };
        let (report, _) = run(spec, gate, tools.clone()).await;
        let text = describe_with(&report, &self.mock);
        if let Some(id) = report.outcome.session_id() {
            self.id = id.to_owned();
        }
        self.entries.extend(report.outcome.entries().iter().cloned());
        (report, text)
    }

    /// Runs a deferred refund the way its step does, and records it.
    async fn run_step(&self, call: &DeferredCall) -> tollgate_engine::record::ToolCallRecord {
        let key = format!("{}/turn-1/{}", self.id, call.tool_use_id);
        let (output, is_error) =
            example_tools(&self.payments).run_deferred(&call.tool_name, &call.arguments, &key).await.unwrap();
        assert!(!is_error, "{output}");
        call.record(Outcome::Succeeded { output })
    }
}

#[tokio::test]
async fn a_subagents_read_runs_its_write_is_denied_with_a_text_it_reads_and_its_transcript_and_calls_count() {
    let Some((cli, _slot)) = real_cli("a subagent's calls").await else { return };
    let mut session = Session::start(cli, None).await;
    let prompt =
        r#"call lookup_order {"order_id":"7"} && call create_refund {"order_id":"7","amount_cents":100}"#;
    let task = json!({"description": "refund order 7", "subagent_type": "general-purpose", "prompt": prompt});
    let (report, text) = session.segment(Some(&format!("call Task {task}")), None).await;
    let result = completed(&report, &text);

    // The subagent's model call after its tools carries the read's output and the denial.
    let requests = session.mock.message_requests();
    let body = requests
        .iter()
        .filter_map(|r| r.body.clone())
        .find(|b| b.to_string().contains("did not run. A subagent cannot call it"))
        .unwrap_or_else(|| panic!("no request carries the denial\n{text}"));
    let ids: Vec<String> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["id"].as_str().map(str::to_owned))
        .collect();
    let [read, write] = &ids[..] else { panic!("{ids:?}\n{text}") };
    let (output, is_error) = tool_result(&body, read).unwrap();
    assert!(!is_error && output.contains(r#""status":"delivered""#), "{output}");
    let (denial, is_error) = tool_result(&body, write).unwrap();
    assert!(is_error, "{denial}");
    assert_eq!(
        denial,
        "PreToolUse:mcp__tools__create_refund hook error: mcp__tools__create_refund did not run. A subagent \
         cannot call it, because its calls run outside this turn. Call mcp__tools__create_refund from the main \
         conversation instead."
    );
    // ... and its report, which the main conversation answers with, says why.
    assert!(result.contains("Call mcp__tools__create_refund from the main conversation instead."), "{text}");
    assert_eq!(session.payments.count(), 0, "{text}");

    // Its transcript comes back apart from the main one, and its model calls count.
    let [subagent] = report.outcome.subagents() else { panic!("{:?}\n{text}", report.outcome.subagents()) };
    let joined: String = subagent.entries.iter().map(TranscriptEntry::as_str).collect();
    assert!(
        joined.contains(r#""type":"agent_metadata""#) && joined.contains("from the main conversation"),
        "{joined}"
    );
    let main: String = report.outcome.entries().iter().map(TranscriptEntry::as_str).collect();
    assert!(
        !main.contains(&subagent.agent_id) || !main.contains(r#""isSidechain":true"#),
        "subagent entries leaked"
    );
    let stats = &report.stats;
    assert_eq!((stats.model_calls, stats.subagent_model_calls), (2, 2), "{text}");
    assert_eq!(requests.len(), 4, "{text}");
}

#[tokio::test]
async fn under_dont_ask_a_write_defers_and_resumes_and_two_writes_in_one_reply_each_run_once() {
    let Some((cli, _slot)) = real_cli("dontAsk: defer, resume, two writes").await else { return };
    let mut session = Session::start(cli, Some("dontAsk")).await;
    let script = r#"call create_refund {"order_id":"7","amount_cents":100} && call create_refund {"order_id":"8","amount_cents":200}"#;
    let (report, text) = session.segment(Some(script), None).await;
    let first = deferred(&report, &text);
    assert_eq!(first.arguments["order_id"], "7", "{text}");
    assert_eq!(session.payments.count(), 0, "{text}");

    let record = session.run_step(&first).await;
    let (report, text) = session.segment(None, Some(record)).await;
    let again = deferred(&report, &text);
    assert_eq!(again.arguments["order_id"], "8", "the refused second write is called again\n{text}");

    let record = session.run_step(&again).await;
    let (report, text) = session.segment(None, Some(record)).await;
    let result = completed(&report, &text);
    assert_eq!(result.matches("called create_refund: {").count(), 2, "{text}");
    assert_eq!(session.payments.count(), 2, "each write ran once\n{text}");
    let last = session.mock.message_requests().last().and_then(|r| r.body.clone()).unwrap_or(Value::Null);
    assert!(!last.to_string().contains("don't ask mode"), "the CLI denied a call itself\n{text}");
}
