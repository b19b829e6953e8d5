//! `docs/ARCHITECTURE.md` against the code: its crate table (crates, paths, dependency arrows)
//! against `cargo metadata`, its lists of step kinds against `StepKind::ALL`, and every code item
//! and file it names against the source.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tollgate_engine::session::StepKind;

use crate::util::{code_spans, read, root, section, table};

const DOC: &str = "docs/ARCHITECTURE.md";

/// A workspace package as `cargo metadata` gives it.
struct Package {
    /// Its folder, relative to the repository's root.
    path: String,
    /// Its library's source root, when it has one.
    lib: Option<PathBuf>,
    /// The workspace packages it depends on, normal and build dependencies.
    uses: BTreeSet<String>,
    /// The workspace packages only its tests, examples and benches depend on.
    tests_use: BTreeSet<String>,
}

/// The workspace's packages by name, from `cargo metadata --no-deps`.
fn packages() -> BTreeMap<String, Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = root();
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let list = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = list.iter().map(|p| p["name"].as_str().expect("name")).collect();
    list.iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let folder = manifest.parent().expect("a package's folder");
            let mut uses = BTreeSet::new();
            let mut tests_use = BTreeSet::new();
            for dependency in p["dependencies"].as_array().expect("dependencies") {
                let name = dependency["name"].as_str().expect("a dependency's name");
                if names.contains(name) {
                    match dependency["kind"].as_str() {
                        Some("dev") => tests_use.insert(name.to_owned()),
                        _ => uses.insert(name.to_owned()),
                    };
                }
            }
            let tests_use = tests_use.difference(&uses).cloned().collect();
            let lib = p["targets"].as_array().expect("targets").iter().find_map(|t| {
                let kinds = t["kind"].as_array().expect("kind");
                kinds
                    .iter()
                    .any(|k| k == "lib" || k == "proc-macro")
                    .then(|| PathBuf::from(t["src_path"].as_str().expect("src_path")))
            });
            let path = folder.strip_prefix(&root).expect("a member inside the repository");
            let package = Package { path: path.to_string_lossy().into_owned(), lib, uses, tests_use };
            (p["name"].as_str().expect("name").to_owned(), package)
        })
        .collect()
}

/// `tollgate-engine` as the table writes it, `engine` (`tollgate` stays `tollgate`).
fn short(name: &str) -> &str {
    name.strip_prefix("tollgate-").unwrap_or(name)
}

/// A cell of short crate names (`` `engine`, `store` `` or `—`) as full package names.
fn crate_list(cell: &str) -> BTreeSet<String> {
    code_spans(cell)
        .into_iter()
        .map(|name| if name == "tollgate" { name.to_owned() } else { format!("tollgate-{name}") })
        .collect()
}

#[test]
fn the_crate_table_lists_every_crate_at_its_path_with_every_dependency_arrow() {
    let doc = read(DOC);
    let packages = packages();
    let rows = table(section(&doc, "## The crates"), "crate");
    let mut listed = BTreeSet::new();
    let mut wrong = Vec::new();
    for row in &rows {
        let [name, path, uses, tests_use, _owns] = &row[..] else {
            panic!("a row of the crate table without its five columns: {row:?}")
        };
        let Some(name) = code_spans(name).first().map(|name| name.to_string()) else { continue };
        let path = code_spans(path).first().copied().unwrap_or_default().to_owned();
        let Some(package) = packages.get(&name) else {
            wrong.push(format!("`{name}` is in the table, not in the workspace"));
            continue;
        };
        listed.insert(name.clone());
        if package.path != path {
            wrong.push(format!("`{name}` is at `{}`, not `{path}`", package.path));
        }
        for (column, written, actual) in [
            ("uses", crate_list(uses), &package.uses),
            ("tests use", crate_list(tests_use), &package.tests_use),
        ] {
            for missing in actual.difference(&written) {
                wrong.push(format!("`{name}` → `{}` is missing from its `{column}`", short(missing)));
            }
            for extra in written.difference(actual) {
                wrong.push(format!("`{name}` → `{}` in its `{column}` is no dependency", short(extra)));
            }
        }
    }
    // The rest are guest components (examples and test guests): they use the guest SDK or nothing
    // of the workspace.
    for (name, package) in &packages {
        let guest = package.path.starts_with("examples/") || package.path.starts_with("host/test-guests/");
        let guest_sdk_only = package.uses.iter().all(|used| used == "tollgate-guest");
        let a_guest_component = guest && guest_sdk_only;
        if !listed.contains(name) && !a_guest_component {
            wrong.push(format!("`{name}` ({}) is missing from the table", package.path));
        }
    }
    assert!(wrong.is_empty(), "{DOC} and `cargo metadata` disagree:\n{}", wrong.join("\n"));
}

#[test]
fn every_list_of_step_kinds_names_every_step_kind() {
    let doc = read(DOC);
    let kinds: BTreeSet<&str> = StepKind::ALL.iter().map(|kind| kind.as_str()).collect();
    let mut lists = 0;
    for line in doc.lines() {
        let named: BTreeSet<&str> =
            code_spans(line).into_iter().filter(|span| kinds.contains(span)).collect();
        if named.len() >= 3 {
            lists += 1;
            let missing: Vec<_> = kinds.difference(&named).collect();
            assert!(missing.is_empty(), "{DOC} lists step kinds without {missing:?}:\n{line}");
        }
    }
    assert!(lists >= 2, "{DOC} lists the step kinds in the store's table and the glossary");
}

/// The `.rs` source of every file under `folder`.
fn sources(folder: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read a source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                found.push((path, text));
            }
        }
    }
    found
}

/// Whether `text` defines `name`: an item, a variant, a field or a re-export of that name.
fn defines(text: &str, name: &str) -> bool {
    let item = ["struct", "enum", "trait", "type", "fn", "const", "static", "mod", "macro_rules!"]
        .iter()
        .any(|keyword| {
            let written = format!("{keyword} {name}");
            text.match_indices(&written).any(|(at, _)| {
                let after = text[at + written.len()..].chars().next();
                !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        });
    item || text.lines().any(|line| {
        let line = line.trim_start();
        let variant =
            line.starts_with(name) && line[name.len()..].starts_with([' ', ',', '(', '{', '=', ':']);
        let reexport = line.starts_with("pub use") && line.contains(name);
        variant || reexport
    })
}

/// Whether `path` (`tollgate_engine::session::client::HumanDecision`, `Store::claim`) names an
/// item of the workspace's source: each module of the path a file, then an item of that name
/// in it, then its members (methods, variants) defined in its crate.
fn resolves(path: &str, packages: &BTreeMap<String, Package>) -> Result<(), String> {
    let mut segments = path.split("::");
    let first = segments.next().expect("a first segment");
    let rest: Vec<&str> = segments.collect();
    if let Some(package) = packages.get(&first.replace('_', "-")) {
        let lib = package.lib.as_ref().ok_or(format!("`{first}` has no library"))?;
        let crate_source = sources(lib.parent().expect("src"));
        let mut file = lib.clone();
        let mut folder = lib.parent().expect("src").to_path_buf();
        for (at, segment) in rest.iter().enumerate() {
            let as_file = folder.join(format!("{segment}.rs"));
            let as_folder = folder.join(segment).join("mod.rs");
            if as_file.exists() || as_folder.exists() {
                file = if as_file.exists() { as_file } else { as_folder };
                folder = folder.join(segment);
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read a module");
            let defined_here = defines(&text, segment) || text.contains(&format!("mod {segment}"));
            if !defined_here && !crate_source.iter().any(|(_, text)| defines(text, segment)) {
                return Err(format!("no `{segment}` in {}", file.display()));
            }
            for member in &rest[at + 1..] {
                if !crate_source.iter().any(|(_, text)| defines(text, member)) {
                    return Err(format!("no `{member}` in `{first}`"));
                }
            }
            return Ok(());
        }
        return Ok(());
    }
    // `Type::member`: both defined somewhere in the host's crates.
    let host = sources(&root().join("host"));
    for name in std::iter::once(first).chain(rest) {
        if !host.iter().any(|(_, text)| defines(text, name)) {
            return Err(format!("no `{name}` in host/"));
        }
    }
    Ok(())
}

fn is_identifier(segment: &str) -> bool {
    let mut chars = segment.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[test]
fn every_code_item_and_file_the_page_names_exists() {
    let doc = read(DOC);
    let packages = packages();
    let mut wrong = Vec::new();
    for span in code_spans(&doc) {
        let segments: Vec<&str> = span.split("::").collect();
        let is_path = segments.len() > 1
            && segments.iter().all(|s| is_identifier(s))
            && (span.starts_with("tollgate_") || span.starts_with(|c: char| c.is_ascii_uppercase()));
        if is_path {
            if let Err(why) = resolves(span, &packages) {
                wrong.push(format!("`{span}`: {why}"));
            }
        } else if (span.starts_with("host/") || span.starts_with("wit/") || span.starts_with("guest-sdk/"))
            && !span.contains('*')
        {
            // `host/store/migrations/{sqlite,postgres}` is two folders.
            let expanded: Vec<String> = match (span.find('{'), span.find('}')) {
                (Some(open), Some(close)) => span[open + 1..close]
                    .split(',')
                    .map(|choice| format!("{}{choice}{}", &span[..open], &span[close + 1..]))
                    .collect(),
                _ => vec![span.to_owned()],
            };
            for path in expanded {
                if !root().join(&path).exists() {
                    wrong.push(format!("`{path}` does not exist"));
                }
            }
        }
    }
    // The glossary's bare type names (`Turn`) name items of the host too.
    let glossary = section(&doc, "## Glossary");
    let host = sources(&root().join("host"));
    for span in code_spans(glossary) {
        let bare_type = is_identifier(span)
            && span.starts_with(|c: char| c.is_ascii_uppercase())
            && span.chars().any(|c| c.is_ascii_lowercase());
        if bare_type && !host.iter().any(|(_, text)| defines(text, span)) {
            wrong.push(format!("`{span}` (glossary) is defined nowhere in host/"));
        }
    }
    assert!(wrong.is_empty(), "{DOC} names what the code does not have:\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn the_store_table_lists_every_table_of_the_schema() {
    use sqlx::Connection;
    let doc = read(DOC);
    let written: BTreeSet<String> = table(section(&doc, "## The store"), "table")
        .iter()
        .flat_map(|row| code_spans(&row[0]).into_iter().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let folder = tempfile::tempdir().expect("a temporary folder");
    let path = folder.path().join("store.db");
    drop(tollgate_store::sqlite::SqliteStore::open(&path).await.expect("open a SQLite store"));
    let mut connection = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("connect to the store's file");
    let tables: BTreeSet<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%'",
    )
    .fetch_all(&mut connection)
    .await
    .expect("list the tables")
    .into_iter()
    .collect();
    let missing: Vec<_> = tables.difference(&written).collect();
    let extra: Vec<_> = written.difference(&tables).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{DOC}'s store table: missing {missing:?}, not in the schema {extra:?}"
    );
}
