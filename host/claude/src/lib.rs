//! Runs one segment of the Claude Code CLI (being written).
