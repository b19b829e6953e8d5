//! The script language: what a test writes in a prompt to make the mock model answer a certain way.
//!
//! This module owns parsing only: text in, [`Script`] out, no I/O. Reading the script out of a request and
//! choosing the reply is [`crate::plan`]'s job. Read [`Script`] first, then [`parse`].
//!
//! # Grammar
//!
//! A script is one or more clauses joined by `;;`. At most one clause is an *action*:
//!
//! | clause | kind | meaning |
//! | --- | --- | --- |
//! | `say <text>` | action | answer `said: <text>` (the text runs to the next `;;` or the end, trimmed) |
//! | `recall` | action | answer with every earlier prompt and tool result the request carries |
//! | `see` | action | answer `saw: ` and one description per image of the prompt's message (`image/png 67 bytes sha256:…`) |
//! | `call <tool> [<json>] && call …` | action | call the tools in one reply (input `{}` when no JSON), then quote their results |
//! | `call <tool> <json> again <json>` | (in a `call`) | a call the gate refused is called again with the second input instead of the first |
//! | `pause <gate>` | modifier | park the request until the test opens the gate |
//! | `fail [<status>]` | modifier | answer with an HTTP error, 500 by default |
//! | `drip <deltas> <ms>` | modifier | stream each text block in `<deltas>` text deltas, `<ms>` apart (default: two, at once) |
//! | `hold <gate>` | modifier | stream the first half of the text deltas, then park until the test opens the gate |
//! | `tokens <n>` | modifier | report `<n>` input tokens in the reply's usage (a conversation that fills the context, so the CLI compacts it before its next request) |
//! | `think <text>` | modifier | open the reply with a thinking block of `<text>` (to the next `;;`), streamed as thinking deltas |
//!
//! Modifiers written before a `call` act on the reply that calls the tools; modifiers written after it act
//! on the final answer that quotes the results. For every other script all modifiers act on the one reply.
//! Modifiers run in order: `pause a ;; fail` waits at `a`, then fails.
//!
//! ```
//! use tollgate_mock_model::script::{parse, Action, Modifier, ScriptedCall};
//!
//! let script = parse(r#"call lookup_order {"order_id":"7"} && call ping ;; pause after-lookup"#).unwrap();
//! assert_eq!(
//!     script.action,
//!     Action::Call(vec![
//!         ScriptedCall { tool: "lookup_order".into(), input: serde_json::json!({"order_id": "7"}), again: None },
//!         ScriptedCall { tool: "ping".into(), input: serde_json::json!({}), again: None },
//!     ])
//! );
//! assert_eq!(script.after, vec![Modifier::Pause("after-lookup".into())]);
//! ```

use serde_json::Value;

/// A parsed prompt script. See the module docs for the grammar.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// Modifiers written before the action (all modifiers when there is no action).
    pub before: Vec<Modifier>,
    /// What the model answers.
    pub action: Action,
    /// Modifiers written after the action.
    pub after: Vec<Modifier>,
}

/// The answering part of a script.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `say <text>`: answer `said: <text>`.
    Say(String),
    /// `recall`: list the earlier prompts and tool results.
    Recall,
    /// `see`: describe the images of the message that holds the script.
    See,
    /// `call …`: call these tools in one reply, in this order.
    Call(Vec<ScriptedCall>),
    /// Only modifiers were written: answer `ok` once they have run.
    None,
}

/// One `call <tool> <json>`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedCall {
    /// The tool name as written. The reply uses the name the request's `tools` array knows it by:
    /// `lookup_order` becomes `mcp__tools__lookup_order` when only that is offered.
    pub tool: String,
    /// The arguments object.
    pub input: Value,
    /// `again <json>`: the input of a repeat, when the model calls it again after the gate
    /// refused it ("call it again by itself"), instead of `input`.
    pub again: Option<Value>,
}

/// A clause that changes how (or whether) a reply is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Modifier {
    /// `pause <gate>`: wait until the test opens the gate.
    Pause(String),
    /// `fail [<status>]`: answer with this HTTP status and an Anthropic error body.
    Fail(u16),
    /// `drip <deltas> <ms>`: stream each text block in this many deltas, this many ms apart.
    Drip {
        /// Text deltas per text block (at least 1).
        deltas: u32,
        /// The wait before each delta after the first, in milliseconds.
        every_ms: u64,
    },
    /// `hold <gate>`: park the streamed reply halfway through its text until the gate opens.
    Hold(String),
    /// `tokens <n>`: report this many input tokens in the reply's usage.
    Tokens(u64),
    /// `think <text>`: the reply opens with a thinking block of this text.
    Think(String),
}

/// Why a prompt is not a script. The mock answers such a prompt with a text naming the error.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ScriptError {
    /// The prompt is empty.
    #[error("the prompt is empty")]
    Empty,
    /// A clause starts with a word that is not a command.
    #[error(
        "unknown command `{word}` (commands: say, recall, see, call, pause, fail, drip, hold, tokens, think)"
    )]
    UnknownCommand {
        /// The first word of the clause.
        word: String,
    },
    /// A command lacks its argument.
    #[error("`{command}` needs {what}")]
    MissingArgument {
        /// The command.
        command: &'static str,
        /// What was expected.
        what: &'static str,
    },
    /// The JSON after `call <tool>` does not parse, or is not an object.
    #[error("the input of `call {tool}` is not a JSON object: {message}")]
    BadInput {
        /// The tool.
        tool: String,
        /// The parser's message.
        message: String,
    },
    /// `fail` is followed by something other than an HTTP error status.
    #[error("`fail {text}`: the status must be a number from 400 to 599")]
    BadStatus {
        /// The text after `fail`.
        text: String,
    },
    /// Two actions (say, recall, see, call) in one script.
    #[error("a script has at most one of say, recall, see, call")]
    TwoActions,
    /// Something follows a clause that is neither `;;` nor `&&` where allowed.
    #[error("unexpected text `{rest}`")]
    Trailing {
        /// The unexpected text.
        rest: String,
    },
}

/// The clause separator.
const CLAUSE_SEP: &str = ";;";
/// Joins tool calls of one reply.
const CALL_SEP: &str = "&&";

/// Parses a prompt text (already trimmed or not) into a [`Script`].
pub fn parse(text: &str) -> Result<Script, ScriptError> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(ScriptError::Empty);
    }
    let mut script = Script { before: Vec::new(), action: Action::None, after: Vec::new() };
    loop {
        let (word, after_word) = split_word(rest);
        rest = after_word;
        match word {
            "say" => {
                let (said, after) = clause_text(rest, "say")?;
                set_action(&mut script, Action::Say(said.to_owned()))?;
                rest = after;
            }
            "think" => {
                let (thought, after) = clause_text(rest, "think")?;
                push_modifier(&mut script, Modifier::Think(thought.to_owned()));
                rest = after;
            }
            "recall" => set_action(&mut script, Action::Recall)?,
            "see" => set_action(&mut script, Action::See)?,
            "call" => {
                let mut calls = Vec::new();
                loop {
                    let (call, after_call) = parse_call(rest)?;
                    calls.push(call);
                    rest = after_call.trim_start();
                    match rest.strip_prefix(CALL_SEP) {
                        Some(next) => {
                            let (word, after_word) = split_word(next);
                            if word != "call" {
                                return Err(ScriptError::Trailing { rest: next.trim().to_owned() });
                            }
                            rest = after_word;
                        }
                        None => break,
                    }
                }
                set_action(&mut script, Action::Call(calls))?;
            }
            "pause" => {
                let (gate, after_gate) = split_word(rest);
                if gate.is_empty() || gate == CLAUSE_SEP {
                    return Err(ScriptError::MissingArgument { command: "pause", what: "a gate name" });
                }
                push_modifier(&mut script, Modifier::Pause(gate.to_owned()));
                rest = after_gate;
            }
            "hold" => {
                let (gate, after_gate) = split_word(rest);
                if gate.is_empty() || gate == CLAUSE_SEP {
                    return Err(ScriptError::MissingArgument { command: "hold", what: "a gate name" });
                }
                push_modifier(&mut script, Modifier::Hold(gate.to_owned()));
                rest = after_gate;
            }
            "drip" => {
                const WHAT: &str = "a delta count (1 to 100000) and a wait in ms (0 to 60000)";
                let (deltas, after_deltas) = split_word(rest);
                let (every, after_every) = split_word(after_deltas);
                let deltas = deltas.parse::<u32>().ok().filter(|n| (1..=100_000).contains(n));
                let every_ms = every.parse::<u64>().ok().filter(|ms| *ms <= 60_000);
                let (Some(deltas), Some(every_ms)) = (deltas, every_ms) else {
                    return Err(ScriptError::MissingArgument { command: "drip", what: WHAT });
                };
                push_modifier(&mut script, Modifier::Drip { deltas, every_ms });
                rest = after_every;
            }
            "tokens" => {
                let (count, after_count) = split_word(rest);
                let Some(count) = count.parse::<u64>().ok().filter(|n| *n <= 10_000_000) else {
                    return Err(ScriptError::MissingArgument {
                        command: "tokens",
                        what: "an input token count (0 to 10000000)",
                    });
                };
                push_modifier(&mut script, Modifier::Tokens(count));
                rest = after_count;
            }
            "fail" => {
                let (status, after_status) = split_word(rest);
                let status = if status.is_empty() || status == CLAUSE_SEP {
                    500
                } else {
                    rest = after_status;
                    match status.parse::<u16>() {
                        Ok(code @ 400..=599) => code,
                        _ => return Err(ScriptError::BadStatus { text: status.to_owned() }),
                    }
                };
                push_modifier(&mut script, Modifier::Fail(status));
            }
            "" => return Err(ScriptError::Trailing { rest: rest.to_owned() }),
            other => return Err(ScriptError::UnknownCommand { word: other.to_owned() }),
        }
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(script);
        }
        match rest.strip_prefix(CLAUSE_SEP) {
            Some(next) if !next.trim().is_empty() => rest = next.trim_start(),
            _ => return Err(ScriptError::Trailing { rest: rest.to_owned() }),
        }
    }
}

/// The text of a `say` or `think` clause (to the next `;;`, trimmed, not empty) and what follows.
fn clause_text<'a>(rest: &'a str, command: &'static str) -> Result<(&'a str, &'a str), ScriptError> {
    let end = rest.find(CLAUSE_SEP).unwrap_or(rest.len());
    let text = rest[..end].trim();
    if text.is_empty() {
        return Err(ScriptError::MissingArgument { command, what: "a text" });
    }
    Ok((text, &rest[end..]))
}

fn set_action(script: &mut Script, action: Action) -> Result<(), ScriptError> {
    if script.action != Action::None {
        return Err(ScriptError::TwoActions);
    }
    script.action = action;
    Ok(())
}

fn push_modifier(script: &mut Script, modifier: Modifier) {
    if script.action == Action::None {
        script.before.push(modifier);
    } else {
        script.after.push(modifier);
    }
}

/// Parses `<tool> [<json> [again <json>]]` and returns the call and the text after it.
fn parse_call(text: &str) -> Result<(ScriptedCall, &str), ScriptError> {
    let (tool, rest) = split_word(text);
    if tool.is_empty() || tool == CLAUSE_SEP || tool == CALL_SEP {
        return Err(ScriptError::MissingArgument { command: "call", what: "a tool name" });
    }
    let rest = rest.trim_start();
    if !rest.starts_with('{') {
        let input = Value::Object(Default::default());
        return Ok((ScriptedCall { tool: tool.to_owned(), input, again: None }, rest));
    }
    let (input, rest) = parse_input(tool, rest)?;
    let (word, after_word) = split_word(rest);
    if word != "again" {
        return Ok((ScriptedCall { tool: tool.to_owned(), input, again: None }, rest));
    }
    let after_word = after_word.trim_start();
    if !after_word.starts_with('{') {
        return Err(ScriptError::MissingArgument { command: "again", what: "a JSON object" });
    }
    let (again, rest) = parse_input(tool, after_word)?;
    Ok((ScriptedCall { tool: tool.to_owned(), input, again: Some(again) }, rest))
}

/// Reads exactly one JSON object at the start of `text`, so `&&` or `;;` inside its strings do
/// not split it, and returns it and the text after it.
fn parse_input<'a>(tool: &str, text: &'a str) -> Result<(Value, &'a str), ScriptError> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(input @ Value::Object(_))) => {
            let end = values.byte_offset();
            Ok((input, &text[end..]))
        }
        Some(Ok(_)) => {
            Err(ScriptError::BadInput { tool: tool.to_owned(), message: "not an object".to_owned() })
        }
        Some(Err(err)) => Err(ScriptError::BadInput { tool: tool.to_owned(), message: err.to_string() }),
        None => Err(ScriptError::BadInput { tool: tool.to_owned(), message: "no JSON".to_owned() }),
    }
}

/// Splits off the first whitespace-delimited word. `;;` and `&&` glued to a word end it.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let mut end = text.find(char::is_whitespace).unwrap_or(text.len());
    for sep in [CLAUSE_SEP, CALL_SEP] {
        match text.find(sep) {
            Some(0) => end = end.min(sep.len()),
            Some(at) => end = end.min(at),
            None => {}
        }
    }
    text.split_at(end)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(tool: &str, input: Value) -> ScriptedCall {
        ScriptedCall { tool: tool.to_owned(), input, again: None }
    }

    #[test]
    fn again_gives_a_call_the_input_of_its_repeat() {
        let script = parse(
            r#"call refund {"order_id":"7"} && call refund {"order_id":"8","amount_cents":500} again {"order_id":"8","amount_cents":400}"#,
        )
        .unwrap();
        let Action::Call(calls) = script.action else { panic!("{script:?}") };
        assert_eq!(calls[0].again, None);
        assert_eq!(calls[1].input, json!({"order_id": "8", "amount_cents": 500}));
        assert_eq!(calls[1].again, Some(json!({"order_id": "8", "amount_cents": 400})));
        assert_eq!(
            parse(r#"call a {"x":1} again"#),
            Err(ScriptError::MissingArgument { command: "again", what: "a JSON object" })
        );
    }

    #[test]
    fn drip_and_hold_pace_the_reply_and_name_what_they_need() {
        let script = parse("drip 40 25 ;; hold half ;; say a long answer").unwrap();
        assert_eq!(
            script.before,
            vec![Modifier::Drip { deltas: 40, every_ms: 25 }, Modifier::Hold("half".into())]
        );
        let what = "a delta count (1 to 100000) and a wait in ms (0 to 60000)";
        for bad in ["drip", "drip 0 5", "drip 3", "drip 3 x ;; say a"] {
            assert_eq!(parse(bad), Err(ScriptError::MissingArgument { command: "drip", what }), "{bad}");
        }
        assert_eq!(parse("hold"), Err(ScriptError::MissingArgument { command: "hold", what: "a gate name" }));
    }

    #[test]
    fn say_takes_the_rest_of_the_clause_as_its_text() {
        let script = parse("  say hello from  mock \n").unwrap();
        assert_eq!(script.action, Action::Say("hello from  mock".into()));
        assert!(script.before.is_empty() && script.after.is_empty());
    }

    #[test]
    fn think_opens_the_reply_it_is_written_before_and_see_is_an_action() {
        let script = parse("think the order is late ;; call lookup_order ;; think now answer").unwrap();
        assert_eq!(script.before, vec![Modifier::Think("the order is late".into())]);
        assert_eq!(script.after, vec![Modifier::Think("now answer".into())]);
        assert_eq!(parse("see ;; think what is this").unwrap().action, Action::See);
        assert_eq!(parse("think"), Err(ScriptError::MissingArgument { command: "think", what: "a text" }));
        assert_eq!(parse("see ;; recall"), Err(ScriptError::TwoActions));
    }

    #[test]
    fn say_text_stops_at_the_clause_separator() {
        let script = parse("say hi there;; pause g1").unwrap();
        assert_eq!(script.action, Action::Say("hi there".into()));
        assert_eq!(script.after, vec![Modifier::Pause("g1".into())]);
    }

    #[test]
    fn calls_joined_by_ampersands_form_one_reply() {
        let script = parse(r#"call a {"x":1} && call b {"y":"&& ;; not a separator"}&&call c"#).unwrap();
        assert_eq!(
            script.action,
            Action::Call(vec![
                call("a", json!({"x": 1})),
                call("b", json!({"y": "&& ;; not a separator"})),
                call("c", json!({})),
            ])
        );
    }

    #[test]
    fn modifiers_before_and_after_a_call_are_kept_apart() {
        let script = parse("pause before ;; call a ;; pause after ;; fail 529").unwrap();
        assert_eq!(script.before, vec![Modifier::Pause("before".into())]);
        assert_eq!(script.after, vec![Modifier::Pause("after".into()), Modifier::Fail(529)]);
    }

    #[test]
    fn fail_alone_means_http_500() {
        let script = parse("fail").unwrap();
        assert_eq!(script.action, Action::None);
        assert_eq!(script.before, vec![Modifier::Fail(500)]);
    }

    #[test]
    fn a_pause_alone_is_a_script_without_action() {
        let script = parse("pause g1").unwrap();
        assert_eq!(
            script,
            Script { before: vec![Modifier::Pause("g1".into())], action: Action::None, after: vec![] }
        );
    }

    #[test]
    fn ordinary_prose_is_an_unknown_command() {
        assert_eq!(parse("hello there"), Err(ScriptError::UnknownCommand { word: "hello".into() }));
        assert_eq!(parse("   "), Err(ScriptError::Empty));
    }

    #[test]
    fn malformed_scripts_name_their_error() {
        assert_eq!(parse("say"), Err(ScriptError::MissingArgument { command: "say", what: "a text" }));
        assert_eq!(
            parse("pause"),
            Err(ScriptError::MissingArgument { command: "pause", what: "a gate name" })
        );
        assert_eq!(parse("call"), Err(ScriptError::MissingArgument { command: "call", what: "a tool name" }));
        assert_eq!(parse("fail soon"), Err(ScriptError::BadStatus { text: "soon".into() }));
        assert_eq!(parse("fail 200"), Err(ScriptError::BadStatus { text: "200".into() }));
        assert_eq!(parse("say a ;; recall"), Err(ScriptError::TwoActions));
        assert_eq!(parse("recall please"), Err(ScriptError::Trailing { rest: "please".into() }));
        assert_eq!(parse("recall ;;"), Err(ScriptError::Trailing { rest: ";;".into() }));
        assert_eq!(parse("call a && say b"), Err(ScriptError::Trailing { rest: "say b".into() }));
        assert!(matches!(parse(r#"call a {"x":"#), Err(ScriptError::BadInput { tool, .. }) if tool == "a"));
    }
}
