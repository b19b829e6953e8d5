//! Which names a custom tool may take. Pure.
//!
//! A tool's name must be usable as an MCP tool name and must not be mistaken for something else:
//! never a Claude Code built-in in any letter case (the list lives in one place,
//! `tollgate_engine::catalog`), and never `mcp__…` (the CLI's prefix for MCP tools).

use tollgate_engine::catalog::is_built_in_name;

/// The longest tool name accepted.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Checks a custom tool's name; the error says what is wrong with it.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(format!("the name is longer than {MAX_TOOL_NAME_LEN} characters"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err("the name may hold only ASCII letters, digits, `_` and `-`".into());
    }
    if name.starts_with("mcp__") {
        return Err("the name starts with `mcp__`, the prefix Claude Code gives MCP tools".into());
    }
    if is_built_in_name(name) {
        return Err(format!(
            "`{name}` is a Claude Code built-in tool's name (letter case aside); choose another name"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_pass() {
        for name in ["lookup_order", "create-refund", "x", "Tool2", "bash_history", "reader"] {
            assert_eq!(check_tool_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn built_in_names_are_refused() {
        for name in [
            "Bash",
            "Read",
            "Write",
            "Edit",
            "Glob",
            "Grep",
            "WebFetch",
            "WebSearch",
            "Task",
            "Agent",
            "TodoWrite",
            "NotebookEdit",
            "bash",
            "READ",
            "webSearch",
            "ls",
        ] {
            let error = check_tool_name(name).unwrap_err();
            assert!(error.contains("built-in"), "{name}: {error}");
        }
    }

    #[test]
    fn mcp_prefixes_bad_characters_and_long_names_are_refused() {
        assert!(check_tool_name("mcp__tools__x").unwrap_err().contains("mcp__"));
        assert!(check_tool_name("has space").unwrap_err().contains("ASCII"));
        assert!(check_tool_name("dot.ted").unwrap_err().contains("ASCII"));
        assert!(check_tool_name(&"a".repeat(65)).unwrap_err().contains("longer"));
        assert!(check_tool_name("").unwrap_err().contains("empty"));
    }
}
