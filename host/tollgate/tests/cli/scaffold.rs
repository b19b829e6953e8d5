//! `tollgate new tool` and `tollgate build`, as a new tool author uses them: one tool per language
//! scaffolded into a folder outside the repository, built, checked and called.

use std::path::Path;
use std::process::{Command, Output};

fn tollgate(args: &[&str]) -> Output {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cwasm-cache");
    Command::new(env!("CARGO_BIN_EXE_tollgate")).env("TOLLGATE_CACHE_DIR", cache).args(args).output().unwrap()
}

fn ok(output: &Output, what: &str) -> String {
    let (stdout, stderr) =
        (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

fn refused(output: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{what} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    stderr
}

#[test]
fn a_tool_scaffolded_in_each_language_builds_checks_and_answers_as_written() {
    // Outside the repository: the system's temp folder.
    let dir = tempfile::Builder::new().prefix("tollgate-new-").tempdir().unwrap();
    assert!(!dir.path().starts_with(env!("CARGO_MANIFEST_DIR")));
    let agent = dir.path().join("agent");
    let agent_arg = agent.to_str().unwrap();
    for lang in ["rust", "go", "js", "python"] {
        let name = format!("greet_{lang}");
        let wrote =
            ok(&tollgate(&["new", "tool", &name, "--lang", lang, "--agent", agent_arg]), "tollgate new");
        assert!(wrote.contains(&format!("added a policy for `{name}`")), "{wrote}");
    }
    let config = std::fs::read_to_string(agent.join("tollgate.toml")).unwrap();
    assert_eq!(config.matches("= { effect = \"read\" }").count(), 4, "{config}");

    let built = ok(&tollgate(&["build", agent_arg]), "tollgate build");
    println!("finding: tollgate build of four scaffolded tools:\n{built}");
    for lang in ["rust", "go", "js", "python"] {
        assert!(
            built.contains(&format!("built {}/tools/greet_{lang}.wasm ({lang}, ", agent.display())),
            "{built}"
        );
        assert!(built.contains(&format!("  tools: greet_{lang}\n")), "{built}");
        assert!(agent.join(format!("tools/greet_{lang}.toml")).is_file(), "its manifest is copied beside it");
        let answer = ok(
            &tollgate(&["tools", "call", agent_arg, &format!("greet_{lang}"), r#"{"text":"world"}"#]),
            lang,
        );
        assert_eq!(answer.trim(), "hello, world", "{lang}");
    }
    assert!(built.contains("ok: 4 components, 4 tools"), "{built}");

    // Again: a source there already, a policy there already, a bad name; nothing written.
    let again =
        refused(&tollgate(&["new", "tool", "greet_go", "--lang", "go", "--agent", agent_arg]), "new again");
    assert!(again.contains("exists already; nothing was written"), "{again}");
    std::fs::remove_dir_all(agent.join("src/greet_go")).unwrap();
    let policy =
        refused(&tollgate(&["new", "tool", "greet_go", "--lang", "go", "--agent", agent_arg]), "new again");
    assert!(policy.contains("has a policy for `greet_go` already"), "{policy}");
    assert!(!agent.join("src/greet_go").exists(), "nothing was written");
    let bad =
        refused(&tollgate(&["new", "tool", "Greet-Me", "--lang", "js", "--agent", agent_arg]), "a bad name");
    assert!(bad.contains("`Greet-Me` is not a tool name"), "{bad}");

    // A source that does not build: the build fails naming it and the compiler's words.
    std::fs::write(agent.join("src/greet_python/greet_python.py"), "def broken(:\n").unwrap();
    let failed = refused(&tollgate(&["build", agent_arg]), "a broken build");
    assert!(failed.contains("the python build of") && failed.contains("greet_python"), "{failed}");
    assert!(failed.contains("SyntaxError") || failed.contains("invalid syntax"), "{failed}");
}
