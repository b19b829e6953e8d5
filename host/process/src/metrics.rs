//! Process metrics in the Prometheus text format: counters and fixed-bucket histograms the
//! Worker updates, rendered by the API's `/metrics`; and [`TokenCounts`], one model response's
//! token counts, which the model proxy reads and prices and the metrics add up.
//!
//! Hand-rolled on purpose: a handful of series, no registry crate. Label values come from a
//! closed set (step kinds, results), so the series count stays bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use tollgate_engine::session::{FailureReason, StepKind};

/// Bucket bounds of the duration histograms, in seconds.
const BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (bound, count) in BUCKETS.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

#[derive(Default)]
struct Inner {
    steps: BTreeMap<(String, &'static str), u64>,
    step_seconds: BTreeMap<String, Histogram>,
    sandbox_traps: u64,
    turn_failures: BTreeMap<&'static str, u64>,
    poison_steps: BTreeMap<String, u64>,
    model_requests: BTreeMap<&'static str, u64>,
    model_seconds: Histogram,
    model_tokens: TokenCounts,
    model_cost_usd: f64,
    warm_clis: BTreeMap<&'static str, u64>,
    mcp_calls: BTreeMap<(String, &'static str), u64>,
    /// The tool components of the Worker's agent that did not load at its last look, by agent:
    /// `(component, reason)`. `None` until the Worker first looked.
    unavailable_tools: Option<(String, Vec<(String, String)>)>,
}

/// Token counts of one response (the Messages API's `usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    /// `input_tokens`: uncached input.
    pub input: u64,
    /// `output_tokens`.
    pub output: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation: u64,
    /// `cache_read_input_tokens`.
    pub cache_read: u64,
}

impl TokenCounts {
    /// Every input token, cached or not.
    pub fn all_input(&self) -> u64 {
        self.input + self.cache_creation + self.cache_read
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &TokenCounts) {
        self.input += other.input;
        self.output += other.output;
        self.cache_creation += other.cache_creation;
        self.cache_read += other.cache_read;
    }
}

/// The process's metrics. Share it behind an `Arc`.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// `agent="…",agent_version="…"`: the labels of the agent this process's Worker serves, on
    /// every series the Worker counts (none without a Worker).
    agent: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Labels every series the Worker counts with the agent it serves and its version (the
    /// first call wins: a process serves one agent).
    pub fn set_agent(&self, name: &str, version: &str) {
        let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = self.agent.set(format!("agent=\"{}\",agent_version=\"{}\"", escape(name), escape(version)));
    }

    /// A `tools/call` through `/mcp/{agent}` was answered with `answer` (`result`, `error_result`,
    /// `task`, `refused`).
    pub fn mcp_call(&self, agent: &str, answer: &'static str) {
        *self.inner.lock().expect("metrics lock").mcp_calls.entry((agent.to_owned(), answer)).or_default() +=
            1;
    }

    /// A step of `kind` ended with `result` (`committed`, `lease_lost`, `parked`, `store_error`,
    /// `released`) after `took`.
    pub fn step(&self, kind: &str, result: &'static str, took: Duration) {
        let mut inner = self.inner.lock().expect("metrics lock");
        *inner.steps.entry((kind.to_owned(), result)).or_default() += 1;
        inner.step_seconds.entry(kind.to_owned()).or_default().observe(took.as_secs_f64());
    }

    /// The tool components of `agent` (the Worker's) that did not load at its last look at
    /// `tools/`, as `(component, reason)`; empty when every one loaded.
    pub fn set_unavailable_tools(&self, agent: &str, components: Vec<(String, String)>) {
        self.inner.lock().expect("metrics lock").unavailable_tools = Some((agent.to_owned(), components));
    }

    /// What [`Metrics::set_unavailable_tools`] set last: the agent and its unavailable components
    /// (`None`: no Worker of this process looked at its tools yet).
    pub fn unavailable_tools(&self) -> Option<(String, Vec<(String, String)>)> {
        self.inner.lock().expect("metrics lock").unavailable_tools.clone()
    }

    /// A tool call trapped or ran out of time or memory in the sandbox.
    pub fn sandbox_trap(&self) {
        self.inner.lock().expect("metrics lock").sandbox_traps += 1;
    }

    /// A turn ended failed, for `reason` (one of `tollgate_engine::session::failure_reason`, or
    /// `other`).
    pub fn turn_failed(&self, reason: &'static str) {
        *self.inner.lock().expect("metrics lock").turn_failures.entry(reason).or_default() += 1;
    }

    /// A step of `kind` failed on every attempt and gave up: its turn failed, or (a tool step)
    /// its call was recorded `outcome_unknown`.
    pub fn poison_step(&self, kind: &str) {
        *self.inner.lock().expect("metrics lock").poison_steps.entry(kind.to_owned()).or_default() += 1;
    }

    /// A model request through the proxy ended with `result` (`ok`, `upstream_error`,
    /// `unreachable`, `unauthorized`, `spend_limit`), after `took` when it was forwarded, with the
    /// tokens and cost its answer reported.
    pub fn model_request(
        &self,
        result: &'static str,
        took: Option<Duration>,
        usage: Option<(TokenCounts, f64)>,
    ) {
        let mut inner = self.inner.lock().expect("metrics lock");
        *inner.model_requests.entry(result).or_default() += 1;
        if let Some(took) = took {
            inner.model_seconds.observe(took.as_secs_f64());
        }
        if let Some((tokens, cost)) = usage {
            inner.model_tokens.add(&tokens);
            inner.model_cost_usd += cost;
        }
    }

    /// Pre-started CLIs (the Worker's pool): `n` of them had `outcome` — `started`, `hit`
    /// (a segment ran on one), `miss` (a segment started its own), `expired` (killed unused after
    /// the time to live), `discarded` (exited or wrote before it was taken), `refused` (a parked
    /// one refused its claim; the segment then started its own).
    pub fn warm_cli(&self, outcome: &'static str, n: u64) {
        *self.inner.lock().expect("metrics lock").warm_clis.entry(outcome).or_default() += n;
    }

    /// How many pre-started CLIs had `outcome` so far (see [`Metrics::warm_cli`]).
    pub fn warm_cli_count(&self, outcome: &str) -> u64 {
        self.inner.lock().expect("metrics lock").warm_clis.get(outcome).copied().unwrap_or(0)
    }

    /// The Prometheus text, with the figures the caller read from the store.
    pub fn render(&self, store: &StoreFigures) -> String {
        let mut out = self.render_worker();
        if let Some(agent) = self.agent.get() {
            out = with_labels(&out, agent);
        }
        if let Some(open) = store.open_interrupts {
            out.push_str("# HELP tollgate_open_interrupts Decisions waiting for a human, in the store.\n");
            out.push_str("# TYPE tollgate_open_interrupts gauge\n");
            let _ = writeln!(out, "tollgate_open_interrupts {open}");
        }
        if let Some(by_agent) = &store.open_interrupts_by_agent {
            out.push_str(
                "# HELP tollgate_waiting_approvals Decisions waiting for a human, by the agent of their session \
                 (\"\": sessions that name none).\n",
            );
            out.push_str("# TYPE tollgate_waiting_approvals gauge\n");
            for (agent, n) in by_agent {
                let agent = agent.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "tollgate_waiting_approvals{{agent=\"{agent}\"}} {n}");
            }
        }
        // The store's reports, for every agent; this process's Worker's own look for its agent
        // when the store has none of it (0 once it looked: the series exists before a failure).
        let mut unavailable: BTreeMap<String, usize> = BTreeMap::new();
        if let Some((agent, components)) = self.unavailable_tools() {
            unavailable.insert(agent, components.len());
        }
        for (agent, n) in store.tools_unavailable.iter().flatten() {
            unavailable.insert(agent.clone(), *n);
        }
        if !unavailable.is_empty() {
            out.push_str(
                "# HELP tollgate_tool_components_unavailable Tool components of each agent that a Worker \
                 could not load at its last look at tools/ (distinct names across its Workers' reports; \
                 each named by /healthz, the inbox and the log).\n",
            );
            out.push_str("# TYPE tollgate_tool_components_unavailable gauge\n");
            for (agent, n) in &unavailable {
                let agent = agent.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "tollgate_tool_components_unavailable{{agent=\"{agent}\"}} {n}");
            }
        }
        let mcp = self.inner.lock().expect("metrics lock").mcp_calls.clone();
        if !mcp.is_empty() {
            out.push_str(
                "# HELP tollgate_mcp_calls_total tools/call requests through /mcp/{agent} this process answered, by \
                 agent and answer: a result, an error result (the tool failed, was rejected, or its outcome is \
                 unknown), a task (it waits for approval), or refused (a bad call; nothing stored).\n",
            );
            out.push_str("# TYPE tollgate_mcp_calls_total counter\n");
            for ((agent, answer), n) in &mcp {
                let agent = agent.replace('\\', "\\\\").replace('"', "\\\"");
                let _ =
                    writeln!(out, "tollgate_mcp_calls_total{{agent=\"{agent}\",answer=\"{answer}\"}} {n}");
            }
        }
        if let Some(unclaimable) = &store.unclaimable {
            out.push_str(
                "# HELP tollgate_unclaimable_steps Steps due for longer than the bound that no Worker claimed, by \
                 agent (\"\": sessions that name none): no Worker serves the agent or its pinned bundle, or all \
                 are busy.\n",
            );
            out.push_str("# TYPE tollgate_unclaimable_steps gauge\n");
            for steps in unclaimable {
                let agent = steps.agent.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "tollgate_unclaimable_steps{{agent=\"{agent}\"}} {}", steps.steps);
            }
        }
        out
    }

    /// The series the Worker counts, without the agent's labels.
    fn render_worker(&self) -> String {
        let inner = self.inner.lock().expect("metrics lock");
        let mut out = String::new();
        out.push_str("# HELP tollgate_steps_total Steps this process ran, by kind and result.\n");
        out.push_str("# TYPE tollgate_steps_total counter\n");
        for ((kind, result), n) in &inner.steps {
            let _ = writeln!(out, "tollgate_steps_total{{kind=\"{kind}\",result=\"{result}\"}} {n}");
        }
        out.push_str(
            "# HELP tollgate_step_duration_seconds How long steps took, by kind: RunModel is one CLI segment, \
             CallTool and CallSingleAttemptTool one tool call.\n",
        );
        out.push_str("# TYPE tollgate_step_duration_seconds histogram\n");
        for (kind, h) in &inner.step_seconds {
            for (bound, count) in BUCKETS.iter().zip(&h.counts) {
                let _ = writeln!(
                    out,
                    "tollgate_step_duration_seconds_bucket{{kind=\"{kind}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "tollgate_step_duration_seconds_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "tollgate_step_duration_seconds_sum{{kind=\"{kind}\"}} {}", h.sum);
            let _ = writeln!(out, "tollgate_step_duration_seconds_count{{kind=\"{kind}\"}} {}", h.count);
        }
        out.push_str(
            "# HELP tollgate_sandbox_traps_total Tool calls that trapped or hit a limit in the sandbox.\n",
        );
        out.push_str("# TYPE tollgate_sandbox_traps_total counter\n");
        let _ = writeln!(out, "tollgate_sandbox_traps_total {}", inner.sandbox_traps);
        out.push_str("# HELP tollgate_turn_failures_total Turns that ended failed, by reason.\n");
        out.push_str("# TYPE tollgate_turn_failures_total counter\n");
        let reasons =
            FailureReason::ALL.iter().map(|r| r.as_str()).chain(inner.turn_failures.keys().copied());
        for reason in reasons.collect::<std::collections::BTreeSet<_>>() {
            let n = inner.turn_failures.get(reason).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_turn_failures_total{{reason=\"{reason}\"}} {n}");
        }
        out.push_str(
            "# HELP tollgate_poison_steps_total Steps that failed on every attempt and gave up, by kind.\n",
        );
        out.push_str("# TYPE tollgate_poison_steps_total counter\n");
        let kinds = [StepKind::RunModel, StepKind::CallTool, StepKind::CallSingleAttemptTool]
            .into_iter()
            .map(|kind| kind.as_str().to_owned())
            .chain(inner.poison_steps.keys().cloned());
        for kind in kinds.collect::<std::collections::BTreeSet<_>>() {
            let n = inner.poison_steps.get(&kind).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_poison_steps_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str(
            "# HELP tollgate_model_requests_total Model API requests through the Worker's proxy, by result \
             (ok, upstream_error, unreachable, unauthorized, spend_limit).\n",
        );
        out.push_str("# TYPE tollgate_model_requests_total counter\n");
        for (result, n) in &inner.model_requests {
            let _ = writeln!(out, "tollgate_model_requests_total{{result=\"{result}\"}} {n}");
        }
        out.push_str(
            "# HELP tollgate_model_request_duration_seconds How long forwarded model requests took, to the \
             end of the answer.\n",
        );
        out.push_str("# TYPE tollgate_model_request_duration_seconds histogram\n");
        let h = &inner.model_seconds;
        for (bound, count) in BUCKETS.iter().zip(h.counts.iter().chain(std::iter::repeat(&0))) {
            let _ = writeln!(out, "tollgate_model_request_duration_seconds_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "tollgate_model_request_duration_seconds_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "tollgate_model_request_duration_seconds_sum {}", h.sum);
        let _ = writeln!(out, "tollgate_model_request_duration_seconds_count {}", h.count);
        out.push_str("# HELP tollgate_model_tokens_total Tokens the model API reported, by kind.\n");
        out.push_str("# TYPE tollgate_model_tokens_total counter\n");
        let t = &inner.model_tokens;
        for (kind, n) in [
            ("input", t.input),
            ("output", t.output),
            ("cache_creation_input", t.cache_creation),
            ("cache_read_input", t.cache_read),
        ] {
            let _ = writeln!(out, "tollgate_model_tokens_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str(
            "# HELP tollgate_model_cost_usd_total What the model requests cost at list prices, in USD.\n",
        );
        out.push_str("# TYPE tollgate_model_cost_usd_total counter\n");
        let _ = writeln!(out, "tollgate_model_cost_usd_total {}", inner.model_cost_usd);
        out.push_str(
            "# HELP tollgate_warm_clis_total Pre-started CLIs, by outcome (started, hit, miss, expired, \
             discarded, refused).\n",
        );
        out.push_str("# TYPE tollgate_warm_clis_total counter\n");
        for outcome in ["started", "hit", "miss", "expired", "discarded", "refused"] {
            let n = inner.warm_clis.get(outcome).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_warm_clis_total{{outcome=\"{outcome}\"}} {n}");
        }
        out
    }
}

/// `text` (Prometheus samples) with `labels` added to every sample line.
fn with_labels(text: &str, labels: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            out.push_str(line);
        } else if let Some(brace) = line.find('{') {
            out.push_str(&line[..=brace]);
            out.push_str(labels);
            out.push(',');
            out.push_str(&line[brace + 1..]);
        } else if let Some(space) = line.find(' ') {
            out.push_str(&line[..space]);
            out.push('{');
            out.push_str(labels);
            out.push('}');
            out.push_str(&line[space..]);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// What `/metrics` reads from the store for each scrape (`None`: the read failed, left out).
#[derive(Clone, Debug, Default)]
pub struct StoreFigures {
    /// Open interrupts.
    pub open_interrupts: Option<i64>,
    /// Open interrupts by the agent of their session.
    pub open_interrupts_by_agent: Option<Vec<(String, i64)>>,
    /// Steps due and unclaimed for longer than the bound, by agent.
    pub unclaimable: Option<Vec<tollgate_store::UnclaimedSteps>>,
    /// Tool components that Workers could not load, by agent ([`unavailable_by_agent`]).
    pub tools_unavailable: Option<Vec<(String, usize)>>,
}

/// How many distinct tool components the Workers' `reports` name, by agent (a component broken
/// for two Workers of one agent counts once), and 0 for each of the `known` agents they do not
/// name.
pub fn unavailable_by_agent(
    reports: &[tollgate_store::UnavailableTools],
    known: &[&str],
) -> Vec<(String, usize)> {
    let mut names: BTreeMap<&str, std::collections::BTreeSet<&str>> =
        known.iter().map(|agent| (*agent, std::collections::BTreeSet::new())).collect();
    for report in reports {
        let entry = names.entry(report.agent.as_str()).or_default();
        entry.extend(report.components.iter().map(|c| c.component.as_str()));
    }
    names.into_iter().map(|(agent, components)| (agent.to_owned(), components.len())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_counts_and_lands_in_every_bucket_at_or_above_its_duration() {
        let metrics = Metrics::default();
        metrics.step("RunModel", "committed", Duration::from_millis(700));
        metrics.step("RunModel", "lease_lost", Duration::from_millis(20));
        metrics.sandbox_trap();
        let figures = StoreFigures {
            open_interrupts: Some(3),
            open_interrupts_by_agent: Some(vec![("billing".into(), 2), (String::new(), 1)]),
            unclaimable: Some(vec![tollgate_store::UnclaimedSteps {
                agent: "bil\"ling".into(),
                steps: 2,
                oldest_due_at: 1,
            }]),
            tools_unavailable: None,
        };
        let text = metrics.render(&figures);
        assert!(text.contains("tollgate_unclaimable_steps{agent=\"bil\\\"ling\"} 2"), "{text}");
        assert!(text.contains("tollgate_waiting_approvals{agent=\"billing\"} 2"), "{text}");
        assert!(text.contains("tollgate_waiting_approvals{agent=\"\"} 1"), "{text}");
        assert!(text.contains("tollgate_steps_total{kind=\"RunModel\",result=\"committed\"} 1"));
        assert!(text.contains("tollgate_step_duration_seconds_bucket{kind=\"RunModel\",le=\"0.5\"} 1"));
        assert!(text.contains("tollgate_step_duration_seconds_bucket{kind=\"RunModel\",le=\"1\"} 2"));
        assert!(text.contains("tollgate_step_duration_seconds_bucket{kind=\"RunModel\",le=\"+Inf\"} 2"));
        assert!(text.contains("tollgate_step_duration_seconds_count{kind=\"RunModel\"} 2"));
        assert!(text.contains("tollgate_sandbox_traps_total 1"));
        assert!(text.contains("tollgate_open_interrupts 3"));
        // A Worker's process labels its own series with its agent, not the store's figures.
        metrics.set_agent("support", "sha256:0123456789ab");
        let text = metrics.render(&figures);
        let labels = "agent=\"support\",agent_version=\"sha256:0123456789ab\"";
        assert!(
            text.contains(&format!(
                "tollgate_steps_total{{{labels},kind=\"RunModel\",result=\"committed\"}}"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("tollgate_sandbox_traps_total{{{labels}}} 1")), "{text}");
        assert!(text.contains("tollgate_open_interrupts 3"), "{text}");
    }

    #[test]
    fn unavailable_tool_components_are_a_gauge_of_the_workers_agent_once_it_looked() {
        let metrics = Metrics::default();
        assert!(!metrics.render(&StoreFigures::default()).contains("tollgate_tool_components_unavailable"));
        metrics.set_unavailable_tools("support", vec![("broken".into(), "not WebAssembly".into())]);
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_tool_components_unavailable{agent=\"support\"} 1"), "{text}");
        metrics.set_unavailable_tools("support", Vec::new());
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_tool_components_unavailable{agent=\"support\"} 0"), "{text}");
    }

    #[test]
    fn the_stores_reports_count_each_agents_distinct_components_across_its_workers() {
        let report = |agent: &str, worker: &str, names: &[&str]| tollgate_store::UnavailableTools {
            agent: agent.into(),
            worker: worker.into(),
            digest: "sha256:a".into(),
            components: names
                .iter()
                .map(|name| tollgate_store::UnavailableComponent {
                    component: (*name).into(),
                    reason: "not a component".into(),
                    serving_last_good: false,
                })
                .collect(),
            changed_at: 1,
            reported_at: 2,
        };
        let reports = [
            report("billing", "w-1", &["ledger"]),
            report("support", "w-1", &["trapping", "truncated"]),
            report("support", "w-2", &["truncated"]),
        ];
        let by_agent = unavailable_by_agent(&reports, &["orders", "support"]);
        assert_eq!(
            by_agent,
            [("billing".to_owned(), 1), ("orders".to_owned(), 0), ("support".to_owned(), 2)]
        );
        // A process without a Worker (tollgate api) shows them; a Worker's own look counts for its
        // agent only while the store has no report of it.
        let metrics = Metrics::default();
        metrics.set_unavailable_tools("support", Vec::new());
        let text =
            metrics.render(&StoreFigures { tools_unavailable: Some(by_agent), ..StoreFigures::default() });
        for line in [
            "tollgate_tool_components_unavailable{agent=\"billing\"} 1",
            "tollgate_tool_components_unavailable{agent=\"support\"} 2",
            "tollgate_tool_components_unavailable{agent=\"orders\"} 0",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        let api = Metrics::default();
        let text =
            api.render(&StoreFigures { tools_unavailable: Some(Vec::new()), ..StoreFigures::default() });
        assert!(!text.contains("tollgate_tool_components_unavailable"), "nothing to say: {text}");
    }

    #[test]
    fn turn_failures_count_by_reason_and_poison_steps_by_kind_from_zero() {
        let metrics = Metrics::default();
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_turn_failures_total{reason=\"unusable_rows\"} 0"), "{text}");
        assert!(text.contains("tollgate_poison_steps_total{kind=\"RunModel\"} 0"), "{text}");
        metrics.turn_failed(FailureReason::SegmentFailed.as_str());
        metrics.turn_failed(FailureReason::SegmentFailed.as_str());
        metrics.poison_step("CallTool");
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_turn_failures_total{reason=\"segment_failed\"} 2"), "{text}");
        assert!(text.contains("tollgate_turn_failures_total{reason=\"spend_limit\"} 0"), "{text}");
        assert!(text.contains("tollgate_poison_steps_total{kind=\"CallTool\"} 1"), "{text}");
    }

    #[test]
    fn model_requests_count_by_result_with_their_latency_tokens_and_cost() {
        let metrics = Metrics::default();
        let tokens = TokenCounts { input: 10, output: 5, cache_creation: 2, cache_read: 3 };
        metrics.model_request("ok", Some(Duration::from_millis(30)), Some((tokens, 0.5)));
        metrics.model_request("ok", Some(Duration::from_millis(300)), Some((tokens, 0.25)));
        metrics.model_request("spend_limit", None, None);
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_model_requests_total{result=\"ok\"} 2"), "{text}");
        assert!(text.contains("tollgate_model_requests_total{result=\"spend_limit\"} 1"));
        assert!(text.contains("tollgate_model_request_duration_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("tollgate_model_request_duration_seconds_count 2"));
        assert!(text.contains("tollgate_model_tokens_total{kind=\"input\"} 20"));
        assert!(text.contains("tollgate_model_tokens_total{kind=\"cache_read_input\"} 6"));
        assert!(text.contains("tollgate_model_cost_usd_total 0.75"));
    }

    #[test]
    fn warm_clis_count_by_outcome_from_zero() {
        let metrics = Metrics::default();
        assert!(
            metrics.render(&StoreFigures::default()).contains("tollgate_warm_clis_total{outcome=\"hit\"} 0")
        );
        metrics.warm_cli("hit", 1);
        metrics.warm_cli("expired", 2);
        let text = metrics.render(&StoreFigures::default());
        assert!(text.contains("tollgate_warm_clis_total{outcome=\"hit\"} 1"), "{text}");
        assert!(text.contains("tollgate_warm_clis_total{outcome=\"expired\"} 2"), "{text}");
        assert_eq!(metrics.warm_cli_count("expired"), 2);
    }
}
