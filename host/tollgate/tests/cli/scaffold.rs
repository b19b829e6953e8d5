//! `tollgate new tool` and `tollgate build`, as a new tool author uses them: one tool per language
//! scaffolded into a folder outside the repository, built, checked and called.

use std::path::Path;
use std::process::{Command, Output};

fn tollgate(args: &[&str]) -> Output {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        // The suite's one compile cache: a scaffolded Python or JavaScript tool compiles only
        // what the guests compiled before it do not share.
        .env("TOLLGATE_CACHE_DIR", tollgate_testing::component_cache())
        // One cargo target folder for every Rust tool these tests scaffold: their dependencies
        // compile once.
        .env("CARGO_TARGET_DIR", tmp.join("scaffolded-rust-tools"))
        .args(args)
        .output()
        .unwrap()
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
    // Each input schema describes its argument: written out (Go), or derived from the types
    // (Rust's doc comment through schemars, Python's `Annotated` hint on a TypedDict, the JSDoc
    // `@typedef` of the JS handler's parameter).
    let listed = ok(&tollgate(&["tools", "list", agent_arg, "--json"]), "tools list");
    let tools: serde_json::Value = serde_json::from_str(&listed).unwrap();
    for tool in tools.as_array().unwrap() {
        let text = &tool["input_schema"]["properties"]["text"];
        assert_eq!(text["description"], "Who or what to greet.", "{}: {tool}", tool["name"]);
        assert_eq!(tool["input_schema"]["required"], serde_json::json!(["text"]), "{tool}");
    }

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

/// The Rust SDK and its macro pack as crates.io packages (`cargo package`), and a tool in a folder
/// outside the repository builds against the unpacked packages alone, by version, and answers.
#[test]
fn the_rust_sdk_packs_and_a_tool_outside_the_repository_builds_against_the_packages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let packages = tempfile::Builder::new().prefix("tollgate-packages-").tempdir().unwrap();
    let packed = Command::new("cargo")
        .current_dir(&root)
        .args([
            "package",
            "--locked",
            "--allow-dirty",
            // Not cargo's own check (a host build of each package alone, from nothing): the tool
            // below builds against the unpacked packages alone, for the guests' target.
            "--no-verify",
            "-p",
            "tollgate-guest-macro",
            "-p",
            "tollgate-guest",
            "--target-dir",
        ])
        .arg(packages.path().join("target"))
        .output()
        .unwrap();
    assert!(packed.status.success(), "cargo package: {}", String::from_utf8_lossy(&packed.stderr));
    let unpacked = packages.path().join("crates");
    std::fs::create_dir(&unpacked).unwrap();
    for name in ["tollgate-guest-0.1.0", "tollgate-guest-macro-0.1.0"] {
        let file = packages.path().join(format!("target/package/{name}.crate"));
        let untar = Command::new("tar").arg("xzf").arg(&file).arg("-C").arg(&unpacked).status().unwrap();
        assert!(untar.success(), "{}", file.display());
        let manifest = std::fs::read_to_string(unpacked.join(name).join("Cargo.toml")).unwrap();
        assert!(!manifest.contains("workspace = true") && !manifest.contains("path = \"../"), "{manifest}");
    }

    // A tool outside the repository: `tollgate new`'s, its dependency the package by version.
    let dir = tempfile::Builder::new().prefix("tollgate-outside-").tempdir().unwrap();
    let agent = dir.path().join("agent");
    let agent_arg = agent.to_str().unwrap();
    ok(&tollgate(&["new", "tool", "packed", "--lang", "rust", "--agent", agent_arg]), "tollgate new");
    let cargo_toml = agent.join("src/packed/Cargo.toml");
    let text = std::fs::read_to_string(&cargo_toml).unwrap();
    let by_path = text.lines().find(|l| l.starts_with("tollgate-guest = ")).unwrap().to_owned();
    let patched = text.replace(&by_path, "tollgate-guest = \"0.1.0\"")
        + &format!(
            "\n[patch.crates-io]\ntollgate-guest = {{ path = \"{0}/tollgate-guest-0.1.0\" }}\ntollgate-guest-macro = {{ path = \"{0}/tollgate-guest-macro-0.1.0\" }}\n",
            unpacked.display()
        );
    std::fs::write(&cargo_toml, patched).unwrap();
    let built = ok(&tollgate(&["build", agent_arg]), "tollgate build");
    assert!(built.contains("packed.wasm (rust, "), "{built}");
    let answer = ok(&tollgate(&["tools", "call", agent_arg, "packed", r#"{"text":"crate"}"#]), "call");
    assert_eq!(answer.trim(), "hello, crate");
}

/// The Python SDK builds as a wheel (with `py.typed`, its WIT world and its builder), installs
/// into a folder outside the repository, and builds a scaffolded tool from there
/// (`python -m tollgate_guest.build`), which answers.
#[test]
fn the_python_sdk_builds_as_a_wheel_that_builds_a_tool_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".tools/venv/bin/python");
    assert!(python.is_file(), "scripts/install-guest-toolchains.sh installs {}", python.display());
    let dir = tempfile::Builder::new().prefix("tollgate-wheel-").tempdir().unwrap();
    // Built from a copy (its links resolved): setuptools leaves build/ and *.egg-info beside the
    // sources it builds.
    let sources = dir.path().join("sdk");
    let copied =
        Command::new("cp").arg("-rL").arg(root.join("guest-sdk/python")).arg(&sources).status().unwrap();
    assert!(copied.success());
    let wheels = dir.path().join("wheels");
    let built = Command::new(&python)
        .args(["-m", "pip", "wheel", "--quiet", "--no-deps", "-w"])
        .arg(&wheels)
        .arg(&sources)
        .output()
        .unwrap();
    assert!(built.status.success(), "pip wheel: {}", String::from_utf8_lossy(&built.stderr));
    assert!(!root.join("guest-sdk/python/build").exists(), "the checkout is left as it was");
    let wheel = wheels.join("tollgate_guest-0.1.0-py3-none-any.whl");
    let listed = Command::new(&python)
        .args(["-c", "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))"])
        .arg(&wheel)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for file in [
        "tollgate_guest/py.typed",
        "tollgate_guest/build.py",
        "tollgate_guest/wit/world.wit",
        "tollgate_guest/wit/deps/tollgate-tool/tools.wit",
    ] {
        assert!(listed.lines().any(|l| l == file), "{file} is not in the wheel:\n{listed}");
    }
    let site = dir.path().join("site");
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
        .arg(&site)
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(installed.status.success(), "pip install: {}", String::from_utf8_lossy(&installed.stderr));

    let agent = dir.path().join("agent");
    let agent_arg = agent.to_str().unwrap();
    ok(&tollgate(&["new", "tool", "from_wheel", "--lang", "python", "--agent", agent_arg]), "tollgate new");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    let build = Command::new(&python)
        .env("PYTHONPATH", &site)
        .current_dir(dir.path())
        .args([
            "-c",
            "import tollgate_guest.build as b, sys; print(b.__file__); sys.exit(b.main(sys.argv[1:]))",
        ])
        .arg(agent.join("src/from_wheel/from_wheel.py"))
        .arg(agent.join("tools/from_wheel.wasm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&build.stdout);
    assert!(build.status.success(), "the wheel's build: {stdout}{}", String::from_utf8_lossy(&build.stderr));
    assert!(stdout.starts_with(site.to_str().unwrap()), "built by the installed package: {stdout}");
    let answer = ok(&tollgate(&["tools", "call", agent_arg, "from_wheel", r#"{"text":"wheel"}"#]), "call");
    assert_eq!(answer.trim(), "hello, wheel");
}

/// The JavaScript SDK packs as an npm package (`npm pack`: its sources, type declarations, the
/// WIT world with its links resolved, and the builder `tollgate-build-js`); installed into a
/// project outside the repository, it builds a tool that imports it, which answers.
#[test]
fn the_js_sdk_packs_for_npm_and_builds_a_tool_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::Builder::new().prefix("tollgate-npm-").tempdir().unwrap();
    let npm = |cwd: &Path, args: &[&str]| {
        let output = Command::new("npm").current_dir(cwd).args(args).output().unwrap();
        assert!(output.status.success(), "npm {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let packed = npm(dir.path(), &["pack", "--json", root.join("guest-sdk/js").to_str().unwrap()]);
    for file in [
        "types/index.d.ts",
        "types/http.d.ts",
        "wit-packed/world.wit",
        "wit-packed/deps/tollgate-tool/tools.wit",
        "bin/build.mjs",
        "bin/schema.mjs",
    ] {
        assert!(packed.contains(&format!("\"path\": \"{file}\"")), "{file} is not in the package:\n{packed}");
    }
    assert!(!root.join("guest-sdk/js/wit-packed").exists(), "the packing leaves the checkout as it was");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"name":"outside","version":"1.0.0","type":"module","private":true}"#,
    )
    .unwrap();
    let tarball = dir.path().join("tollgate-guest-0.1.0.tgz");
    npm(&project, &["install", "--prefer-offline", "--no-audit", "--no-fund", tarball.to_str().unwrap()]);

    let agent = project.join("agent");
    let agent_arg = agent.to_str().unwrap();
    ok(&tollgate(&["new", "tool", "from_npm", "--lang", "js", "--agent", agent_arg]), "tollgate new");
    // The tool imports the package, as an author outside the repository would.
    let source = agent.join("src/from_npm/tool.js");
    let text = std::fs::read_to_string(&source).unwrap();
    let text = format!(
        "import {{ text }} from '@tollgate/guest';\n{}",
        text.replace("return `hello, ${text}`;", "return [text(`hello from npm, ${text}`)];")
            .replace("handler({ text })", "handler({ text: who })")
            .replace("${text}`)]", "${who}`)]")
    );
    std::fs::write(&source, text).unwrap();
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    let built = Command::new("npx")
        .current_dir(&project)
        .args([
            "--no-install",
            "tollgate-build-js",
            "agent/src/from_npm/tool.js",
            "-o",
            "agent/tools/from_npm.wasm",
        ])
        .output()
        .unwrap();
    assert!(built.status.success(), "tollgate-build-js: {}", String::from_utf8_lossy(&built.stderr));
    let answer =
        ok(&tollgate(&["tools", "call", agent_arg, "from_npm", r#"{"text":"the registry"}"#]), "call");
    assert_eq!(answer.trim(), "hello from npm, the registry");
}
