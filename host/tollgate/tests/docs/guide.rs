//! The README and `docs/` against the code: every TOML block loads through the loader of the file
//! it shows, every `tollgate` command shown exists with the flags shown, and the HTTP route
//! reference is the one the OpenAPI snapshot generates.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::{code_spans, read, root};

/// The Markdown files a reader reads: the README and everything under `docs/`.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut folders = vec![root().join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read docs/") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let relative = path.strip_prefix(root()).expect("inside the repository");
                pages.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    pages.sort();
    pages
}

/// A fenced code block: the page, its first line's number, its info string and its text.
struct Block {
    page: String,
    line: usize,
    info: String,
    text: String,
}

/// Every fenced code block of every page.
fn blocks() -> Vec<Block> {
    let mut found = Vec::new();
    for page in pages() {
        let text = read(&page);
        let mut open: Option<(usize, String, String)> = None;
        for (number, line) in text.lines().enumerate() {
            let fence = line.trim_start().strip_prefix("```");
            match (&mut open, fence) {
                (None, Some(info)) => open = Some((number + 1, info.trim().to_owned(), String::new())),
                (Some(_), Some(_)) => {
                    let (line, info, text) = open.take().expect("an open block");
                    found.push(Block { page: page.clone(), line, info, text });
                }
                (Some((_, _, body)), None) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, None) => {}
            }
        }
    }
    found
}

/// The kinds of TOML file a block may show, named after `toml` in its info string.
const TOML_KINDS: &str = "`toml tollgate.toml` (an agent's file), `toml manifest` (a tool's grants), \
                          `toml webhooks` (the webhooks file), `toml fragment` (parsed as TOML only)";

#[test]
fn every_toml_block_loads_through_the_loader_of_its_file() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    std::fs::create_dir(folder.path().join("data")).expect("a folder the manifests grant");
    let env = |_: &str| Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned());
    let mut wrong = Vec::new();
    let mut loaded = 0;
    for block in blocks().into_iter().filter(|b| b.info.split_whitespace().next() == Some("toml")) {
        let at = format!("{}:{}", block.page, block.line);
        let kind = block.info.split_whitespace().nth(1).unwrap_or_default();
        let outcome = match kind {
            "tollgate.toml" => {
                let path = folder.path().join("tollgate.toml");
                tollgate_worker::config::AgentConfig::parse(&path, &block.text)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            "manifest" => tollgate_sandbox::ManifestFile::parse(&block.text, &at)
                .and_then(|file| file.resolve(&at, folder.path(), 4096, &env))
                .map(drop)
                .map_err(|e| e.to_string()),
            "webhooks" => tollgate_api::webhooks::config::parse(&at, &block.text, folder.path(), &env)
                .map(drop)
                .map_err(|e| e.to_string()),
            "fragment" => toml::from_str::<toml::Table>(&block.text).map(drop).map_err(|e| e.to_string()),
            _ => Err(format!("a TOML block names no kind of file; write one of {TOML_KINDS}")),
        };
        match outcome {
            Ok(()) => loaded += 1,
            Err(why) => wrong.push(format!("{at} (`{}`): {why}", block.info)),
        }
    }
    assert!(wrong.is_empty(), "TOML blocks that do not load:\n{}", wrong.join("\n"));
    assert!(loaded >= 3, "the guide shows an agent's file, a manifest and a webhooks file");
}

/// The `tollgate` binary's help for the subcommand `path`, or `None` when it has no such command.
fn help(path: &[&str], cache: &mut BTreeMap<Vec<String>, Option<String>>) -> Option<String> {
    let key: Vec<String> = path.iter().map(|word| (*word).to_owned()).collect();
    cache
        .entry(key)
        .or_insert_with(|| {
            let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(path)
                .arg("--help")
                .output()
                .expect("run tollgate --help");
            output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
        })
        .clone()
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Checks one command as shown (`tollgate approvals approve S ID --for-session`): each word that
/// must be a subcommand is one, and each `--flag` is in the help of the command it ends on.
fn check_command(shown: &str, cache: &mut BTreeMap<Vec<String>, Option<String>>) -> Result<(), String> {
    let words: Vec<&str> = shown
        .split_whitespace()
        .skip(1)
        .map(|word| word.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | ',' | '`')))
        .collect();
    // `serve|api` is two commands.
    if let Some(first) = words.first().filter(|word| word.contains('|') && !word.starts_with('-')) {
        for alternative in first.split('|') {
            let again = format!("tollgate {alternative} {}", words[1..].join(" "));
            check_command(&again, cache)?;
        }
        return Ok(());
    }
    let mut path: Vec<&str> = Vec::new();
    let mut text = help(&path, cache).expect("tollgate --help");
    for word in &words {
        let commands = subcommands(&text);
        if commands.is_empty() || word.starts_with('-') {
            break;
        }
        if !commands.iter().any(|command| command == word) {
            let shown: String = path.iter().map(|word| format!(" {word}")).collect();
            return Err(format!("`tollgate{shown}` has no subcommand `{word}`"));
        }
        path.push(word);
        text = help(&path, cache).ok_or(format!("`tollgate {} --help` failed", path.join(" ")))?;
    }
    for word in &words {
        if let Some(flag) = word.strip_prefix("--") {
            let flag = flag.split(['=', '|']).next().unwrap_or_default();
            let known = flag.is_empty() || flag == "help" || text.contains(&format!("--{flag}"));
            if !known {
                return Err(format!("`tollgate {}` takes no `--{flag}`", path.join(" ")));
            }
        }
    }
    Ok(())
}

#[test]
fn every_tollgate_command_shown_exists_with_its_flags() {
    let mut cache = BTreeMap::new();
    let mut shown = Vec::new();
    for block in blocks().into_iter().filter(|b| matches!(b.info.as_str(), "sh" | "bash" | "console" | "")) {
        for line in block.text.lines() {
            let line = line.trim().trim_start_matches("$ ");
            let command = line.split(" #").next().unwrap_or_default().trim_end_matches('\\').trim();
            if command.starts_with("tollgate ") {
                shown.push((format!("{}:{}", block.page, block.line), command.to_owned()));
            }
        }
    }
    for page in pages() {
        for span in code_spans(&read(&page)) {
            let subcommand = span.split_whitespace().nth(1).unwrap_or_default();
            if span.starts_with("tollgate ") && subcommand.starts_with(|c: char| c.is_ascii_lowercase()) {
                shown.push((page.clone(), span.to_owned()));
            }
        }
    }
    let wrong: Vec<String> = shown
        .iter()
        .filter_map(|(at, command)| {
            check_command(command, &mut cache).err().map(|why| format!("{at}: {why}"))
        })
        .collect();
    assert!(shown.len() > 20, "the docs show the command line");
    assert!(wrong.is_empty(), "commands shown that the binary does not have:\n{}", wrong.join("\n"));
}

/// The OpenAPI snapshot the api crate's test keeps (`host/api/src/api/snapshots/openapi.snap`).
fn openapi() -> Value {
    let snapshot = read("host/api/src/api/snapshots/openapi.snap");
    let json = snapshot.splitn(3, "---\n").nth(2).expect("insta's header, then the document");
    serde_json::from_str(json).expect("the OpenAPI document")
}

const ROUTES: &str = "docs/guide/http-routes.md";

/// A schema's name from its `$ref`, or its type.
fn schema_name(schema: &Value) -> String {
    match schema["$ref"].as_str() {
        Some(reference) => format!("`{}`", reference.rsplit('/').next().unwrap_or(reference)),
        None => schema["type"].as_str().map_or_else(|| "JSON".to_owned(), |kind| format!("`{kind}`")),
    }
}

/// Text for one cell of a Markdown table: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// The route reference, generated from the OpenAPI document.
fn route_reference(document: &Value) -> String {
    let mut out = String::from(
        "# HTTP routes\n\n<!-- Generated from host/api/src/api/snapshots/openapi.snap by \
         host/tollgate/tests/docs/guide.rs; do not edit. UPDATE_DOCS=1 cargo test -p tollgate --test docs \
         rewrites it. -->\n\nEvery route of the HTTP API, from its OpenAPI document (served at `/openapi.json`). \
         [The HTTP API](http-api.md) explains the concepts: roles, errors, idempotency keys, events.\n",
    );
    let paths = document["paths"].as_object().expect("paths");
    let mut routes: Vec<(&String, &str, &Value)> = Vec::new();
    for (path, operations) in paths {
        for method in ["get", "post", "put", "patch", "delete"] {
            if let Some(operation) = operations.get(method) {
                routes.push((path, method, operation));
            }
        }
    }
    routes.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    for (path, method, operation) in routes {
        let method = method.to_uppercase();
        out.push_str(&format!("\n## `{method} {path}`\n\n"));
        if let Some(summary) = operation["summary"].as_str() {
            out.push_str(&format!("{}\n", summary.trim()));
        }
        if let Some(description) = operation["description"].as_str() {
            out.push_str(&format!("\n{}\n", description.trim()));
        }
        if let Some(parameters) = operation["parameters"].as_array().filter(|p| !p.is_empty()) {
            out.push_str("\n| parameter | in | required | meaning |\n| --- | --- | --- | --- |\n");
            for parameter in parameters {
                out.push_str(&format!(
                    "| `{}` | {} | {} | {} |\n",
                    parameter["name"].as_str().unwrap_or_default(),
                    parameter["in"].as_str().unwrap_or_default(),
                    if parameter["required"].as_bool() == Some(true) { "yes" } else { "no" },
                    cell(parameter["description"].as_str().unwrap_or_default()),
                ));
            }
        }
        if let Some(body) = operation.get("requestBody") {
            let schema = body["content"]["application/json"]["schema"].clone();
            let required = if body["required"].as_bool() == Some(true) { "required" } else { "optional" };
            let about = body["description"].as_str().map(|d| format!(": {}", cell(d))).unwrap_or_default();
            out.push_str(&format!("\nBody ({required}): {}{about}\n", schema_name(&schema)));
        }
        if let Some(responses) = operation["responses"].as_object() {
            out.push_str("\n| status | body | meaning |\n| --- | --- | --- |\n");
            for (status, response) in responses {
                // Every media type, sorted: the order of the document's map depends on
                // serde_json's features in the build, the reference must not.
                let body = response["content"]
                    .as_object()
                    .filter(|content| !content.is_empty())
                    .map(|content| {
                        let mut media: Vec<String> = content
                            .iter()
                            .map(|(media, content)| {
                                if media == "application/json" {
                                    schema_name(&content["schema"])
                                } else {
                                    format!("`{media}`")
                                }
                            })
                            .collect();
                        media.sort();
                        media.join(", ")
                    })
                    .unwrap_or_else(|| "—".to_owned());
                out.push_str(&format!(
                    "| {status} | {body} | {} |\n",
                    cell(response["description"].as_str().unwrap_or_default())
                ));
            }
        }
    }
    out
}

#[test]
fn the_route_reference_is_generated_from_the_openapi_snapshot_and_names_every_route() {
    let document = openapi();
    let generated = route_reference(&document);
    let path = root().join(ROUTES);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).expect("write the route reference");
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    for (route, operations) in document["paths"].as_object().expect("paths") {
        for method in operations.as_object().expect("operations").keys() {
            let heading = format!("`{} {route}`", method.to_uppercase());
            assert!(written.contains(&heading), "{ROUTES} lacks {heading}");
        }
    }
    assert!(
        written == generated,
        "{ROUTES} is not what the OpenAPI snapshot generates; run `UPDATE_DOCS=1 cargo test -p tollgate --test docs` \
         and commit the result"
    );
    assert!(Path::new(&path).exists());
}

#[test]
fn every_route_the_pages_name_is_in_the_openapi_document() {
    let document = openapi();
    let paths = document["paths"].as_object().expect("paths");
    let mut named = 0;
    let mut wrong = Vec::new();
    // docs/PROTOCOL.md and ARCHITECTURE.md also name the Messages API's routes the model proxy serves.
    for page in pages().into_iter().filter(|page| page == "README.md" || page.starts_with("docs/guide/")) {
        let text = read(&page);
        // In code spans (`POST /v1/sessions/{id}/cancel`) and in table rows' first cells.
        let rows =
            text.lines().filter_map(|line| line.strip_prefix("| `")).map(|rest| rest.split('`').next());
        let spans = code_spans(&text).into_iter().map(Some);
        for candidate in spans.chain(rows).flatten() {
            let mut words = candidate.split_whitespace();
            let (Some(method), Some(path), None) = (words.next(), words.next(), words.next()) else {
                continue;
            };
            if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) || !path.starts_with('/') {
                continue;
            }
            named += 1;
            let path = path.split('?').next().unwrap_or(path);
            let known =
                paths.get(path).is_some_and(|operations| operations.get(method.to_lowercase()).is_some());
            if !known {
                wrong.push(format!("{page}: `{method} {path}`"));
            }
        }
    }
    assert!(named > 20, "the pages name the API's routes");
    assert!(wrong.is_empty(), "routes the docs name that the OpenAPI document lacks:\n{}", wrong.join("\n"));
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_between_the_pages_leads_to_a_file_and_heading() {
    let mut wrong = Vec::new();
    for page in pages() {
        let text = read(&page);
        let folder = Path::new(&page).parent().unwrap_or(Path::new("")).to_path_buf();
        for (at, _) in text.match_indices("](") {
            let target = text[at + 2..].split(')').next().unwrap_or_default();
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file =
                if file.is_empty() { page.clone() } else { folder.join(file).to_string_lossy().into_owned() };
            let Ok(linked) = std::fs::read_to_string(root().join(&file)) else {
                if !root().join(&file).is_dir() {
                    wrong.push(format!("{page}: ({target}): no file {file}"));
                }
                continue;
            };
            let headings: Vec<String> = linked
                .lines()
                .filter_map(|line| line.strip_prefix('#'))
                .map(|h| anchor(h.trim_start_matches('#')))
                .collect();
            if !fragment.is_empty() && !headings.iter().any(|heading| *heading == fragment) {
                wrong.push(format!("{page}: ({target}): no heading #{fragment} in {file}"));
            }
        }
    }
    assert!(wrong.is_empty(), "links that lead nowhere:\n{}", wrong.join("\n"));
}
