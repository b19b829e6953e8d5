//! Whether the tool names an agent's configuration uses name a tool it has, with a did-you-mean
//! for those that do not. A policy for `wether` when the tool is `weather` would otherwise be
//! accepted and never apply: the real tool falls back to `default_effect`, which for an agent
//! whose default is `read` runs a misspelled *write's* calls inline. Pure: the caller passes the
//! names and the tools.
//!
//! A name is known when it is one of the agent's custom tools, a Claude Code built-in (exactly as
//! the CLI spells it: a policy for `bash` would never match `Bash`), or an MCP tool's name
//! (`mcp__<server>__<tool>`, which only the CLI's configuration knows).
//!
//! ```
//! use tollgate_engine::tool_names::unknown_tools;
//!
//! let unknown = unknown_tools(["wether", "Bash", "mcp__github__create_issue", "weather"], &["weather"]);
//! assert_eq!(unknown.len(), 1);
//! assert_eq!(unknown[0].to_string(), "`wether` names no tool of this agent (did you mean `weather`?)");
//! ```

use std::fmt;

use crate::catalog::CLAUDE_CODE_BUILT_IN_TOOL_NAMES;

/// A name that names no tool, and the closest one that does, if any is close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTool {
    /// The name as written.
    pub name: String,
    /// The known name it is probably a misspelling of.
    pub suggestion: Option<String>,
}

impl fmt::Display for UnknownTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` names no tool of this agent", self.name)?;
        match &self.suggestion {
            Some(known) => write!(f, " (did you mean `{known}`?)"),
            None => f.write_str(" (its custom tools, Claude Code's built-ins or an `mcp__` name)"),
        }
    }
}

/// The names of `names` that name none of `custom` (the agent's custom tools), no built-in and no
/// MCP tool, in order, each with a suggestion.
pub fn unknown_tools<'a>(names: impl IntoIterator<Item = &'a str>, custom: &[&str]) -> Vec<UnknownTool> {
    names
        .into_iter()
        .filter(|name| {
            !custom.contains(name)
                && !CLAUDE_CODE_BUILT_IN_TOOL_NAMES.contains(name)
                && !name.starts_with("mcp__")
        })
        .map(|name| UnknownTool {
            name: name.to_owned(),
            suggestion: closest(
                name,
                custom.iter().copied().chain(CLAUDE_CODE_BUILT_IN_TOOL_NAMES.iter().copied()),
            ),
        })
        .collect()
}

/// The candidate closest to `name` when it is close: a difference of letter case only, or at
/// most a third of its letters edited (at least one, at most three).
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let lower = name.to_lowercase();
    let most = (name.chars().count() / 3).clamp(1, 3);
    candidates
        .map(|candidate| (distance(&lower, &candidate.to_lowercase()), candidate))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, candidate)| (*d, *candidate))
        .map(|(_, candidate)| candidate.to_owned())
}

/// The optimal string alignment distance (Levenshtein with adjacent transpositions) of `a` and
/// `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUSTOM: &[&str] = &["lookup_order", "create_refund", "weather"];

    fn suggestion(name: &str) -> Option<String> {
        let unknown = unknown_tools([name], CUSTOM);
        assert_eq!(unknown.len(), 1, "{name} should be unknown");
        unknown[0].suggestion.clone()
    }

    #[test]
    fn custom_tools_built_ins_and_mcp_names_are_known() {
        let names =
            ["lookup_order", "Bash", "WebFetch", "Task", "mcp__github__create_issue", "mcp__tools__x"];
        assert_eq!(unknown_tools(names, CUSTOM), []);
    }

    #[test]
    fn a_misspelling_gets_the_name_it_is_closest_to() {
        assert_eq!(suggestion("wether").as_deref(), Some("weather"));
        assert_eq!(suggestion("create_refnud").as_deref(), Some("create_refund"), "a transposition");
        assert_eq!(suggestion("lookup_orders").as_deref(), Some("lookup_order"));
        assert_eq!(
            suggestion("bash").as_deref(),
            Some("Bash"),
            "the CLI's spelling, which a policy must use"
        );
        assert_eq!(suggestion("webfetch").as_deref(), Some("WebFetch"));
        assert_eq!(suggestion("Writ").as_deref(), Some("Write"));
    }

    #[test]
    fn a_name_far_from_every_tool_gets_no_suggestion() {
        assert_eq!(suggestion("send_invoice"), None);
        assert_eq!(suggestion("x"), None);
        let text = unknown_tools(["send_invoice"], CUSTOM)[0].to_string();
        assert!(text.contains("`send_invoice` names no tool") && text.contains("mcp__"), "{text}");
    }

    #[test]
    fn the_distance_counts_edits_and_transpositions() {
        assert_eq!(distance("weather", "wether"), 1);
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("refund", "refund"), 0);
    }
}
