//! Reading the repository's files.

use std::path::PathBuf;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository's root")
}

/// The text of `path`, relative to the repository's root.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|error| panic!("read {path}: {error}"))
}

/// The section of a Markdown `text` under the heading `heading` (`## The crates`), up to the next
/// heading of the same or a higher level.
pub fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no `{heading}` heading"));
    let body = &text[start + heading.len() + 2..];
    let end = body
        .lines()
        .scan(0, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            hashes > 0 && hashes <= level && line[hashes..].starts_with(' ')
        })
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

/// The rows of the first Markdown table in `text` whose header's first cell is `first`: each row's
/// cells, trimmed.
pub fn table(text: &str, first: &str) -> Vec<Vec<String>> {
    let mut lines = text
        .lines()
        .skip_while(|line| !(line.starts_with('|') && cells(line).first().is_some_and(|cell| cell == first)));
    assert!(lines.next().is_some(), "no table whose first column is `{first}`");
    lines.next(); // the `| --- |` line
    lines.take_while(|line| line.starts_with('|')).map(cells).collect()
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split(" | ").map(|cell| cell.trim().to_owned()).collect()
}

/// The `backticked` spans of `text`.
pub fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}
