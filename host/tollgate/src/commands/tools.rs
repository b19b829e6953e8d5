//! `tollgate tools list|call|check DIR`: the sandbox without a model.
//!
//! `DIR` is an agent directory (it holds `tollgate.toml`; tools are in `DIR/tools/`, manifests
//! may be `[tools.<name>]` tables there, the options factory is `[agent] options_factory`) or a
//! bare directory of components. Without `tollgate.toml`, the components are `DIR/*.wasm`, or
//! `DIR/tools/*.wasm` when `DIR` holds none but has a `tools/` folder; each one's manifest is the
//! `<name>.toml` beside it or none (everything denied). `check` says which it used. The
//! configuration is [`AgentConfig::read`]: the whole file is checked, as a Worker would.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use tollgate_sandbox::{
    CacheOutcome, DeferredExecution, LiveTools, Manifests, OptionsContext, Sandbox, SandboxConfig, ToolInfo,
    ToolSet,
};

use tollgate_engine::policy::Policies;
use tollgate_worker::agent::{check_policy_names, default_effect_tools};
use tollgate_worker::config::AgentConfig;

/// `tollgate tools …`
#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
    /// Where compiled components are cached (default: ~/.cache/tollgate/components).
    #[arg(long, global = true, env = "TOLLGATE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every component afresh; read and write no cache.
    #[arg(long, global = true)]
    no_cache: bool,
}

#[derive(Debug, Subcommand)]
enum ToolsCommand {
    /// List the tools of every component, with their annotations.
    List {
        /// An agent directory or a directory of `.wasm` components.
        dir: PathBuf,
        /// Print JSON (name, description, input schema, annotations, component).
        #[arg(long)]
        json: bool,
    },
    /// Call one tool, as the Worker would: schema check, fresh instance, limits and grants.
    Call {
        /// An agent directory or a directory of `.wasm` components.
        dir: PathBuf,
        /// The tool's name.
        name: String,
        /// The arguments, a JSON object.
        args: String,
        /// Run as attempt N of a deferred call (the tool sees a deferred-execution context).
        #[arg(long)]
        attempt: Option<u32>,
        /// The idempotency key of the deferred call (default `cli/<pid>/call`).
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Print the output as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Load and compile everything, check names, schemas and manifests, and print each
    /// component's grants.
    Check {
        /// An agent directory or a directory of `.wasm` components.
        dir: PathBuf,
    },
}

/// The sandbox of the `tools` commands: components cached in `cache_dir` (default
/// `~/.cache/tollgate/components`), or not at all with `no_cache`.
///
/// # Errors
/// The sandbox's engine could not be made.
pub fn sandbox(cache_dir: Option<PathBuf>, no_cache: bool) -> anyhow::Result<Sandbox> {
    let mut config = SandboxConfig::default();
    if no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = cache_dir {
        config.cache_dir = Some(dir);
    }
    Ok(Sandbox::new(config)?)
}

/// Runs `tollgate tools …`.
pub async fn run(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox(args.cache_dir, args.no_cache)?;
    let mut out = std::io::stdout().lock();
    match args.command {
        ToolsCommand::List { dir, json } => {
            let layout = Layout::of(&dir)?;
            let tools = layout.load_each(&sandbox).await?;
            warn_unavailable(&tools);
            if json {
                serde_json::to_writer_pretty(&mut out, tools.tools())?;
                writeln!(out)?;
            } else {
                print_table(&mut out, tools.tools())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ToolsCommand::Call { dir, name, args, attempt, idempotency_key, json } => {
            let layout = Layout::of(&dir)?;
            let tools = layout.load_each(&sandbox).await?;
            warn_unavailable(&tools);
            let execution = (attempt.is_some() || idempotency_key.is_some()).then(|| {
                let mut execution = DeferredExecution::new(
                    "cli",
                    &std::process::id().to_string(),
                    "call",
                    attempt.unwrap_or(1),
                );
                if let Some(key) = idempotency_key {
                    execution.idempotency_key = key;
                }
                execution
            });
            let output = tools.call(&name, &args, execution.as_ref()).await?;
            if json {
                serde_json::to_writer_pretty(&mut out, &output)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", output.text())?;
            }
            if output.is_error {
                eprintln!("({name} answered with is-error: the model would read this as a failed call)");
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        ToolsCommand::Check { dir } => {
            drop(out);
            check(&dir, sandbox).await
        }
    }
}

/// `tools check DIR`: loads every component as a Worker would, prints what each holds and grants,
/// builds the options factory's options once, and checks the policies against the tools.
///
/// # Errors
/// A component, manifest, factory or policy that does not load, each named.
pub async fn check(dir: &Path, sandbox: Sandbox) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let layout = Layout::of(dir)?;
    writeln!(out, "{}", layout.described)?;
    let tools = layout.load_each(&sandbox).await?;
    for component in tools.components() {
        let how = match component.cache {
            CacheOutcome::Hit => "from cache",
            CacheOutcome::Miss => "compiled, cached",
            CacheOutcome::Replaced => "compiled, replaced a bad cache entry",
            CacheOutcome::Uncached => "compiled, no cache",
        };
        writeln!(
            out,
            "{} ({}, {} KiB, {how} in {:.1} ms)",
            component.name,
            component.path.display(),
            component.size / 1024,
            component.load_time.as_secs_f64() * 1e3
        )?;
        writeln!(out, "  tools: {}", component.tools.join(", "))?;
        for line in component.manifest.describe() {
            writeln!(out, "  {line}")?;
        }
    }
    if let Some(factory_path) = &layout.factory {
        let factory = sandbox
            .load_options_factory(factory_path, &layout.manifests)
            .await
            .with_context(|| format!("options factory {}", factory_path.display()))?;
        let ctx = OptionsContext { session_id: "check".into(), turn_id: "check".into(), attempt: 1 };
        let options = factory.build_options(&ctx).await?;
        writeln!(
            out,
            "options factory ({}): model {}, permission mode {}, built-in tools {}{}{}",
            factory_path.display(),
            options.model.as_deref().unwrap_or("default"),
            options.permission_mode.as_deref().unwrap_or("default"),
            options.tools.as_ref().map_or("default".into(), |t| t.join(", ")),
            if factory.has_cli_policy() { ", decides built-in tool calls" } else { "" },
            if factory.has_review() { ", reviews calls before approval" } else { "" }
        )?;
        for line in factory.manifest().describe() {
            writeln!(out, "  {line}")?;
        }
    }
    if let Some((path, policies)) = &layout.policies {
        check_policy_names(path, policies, &tools)?;
        let unclassified = default_effect_tools(policies, &tools);
        if !unclassified.is_empty() {
            writeln!(
                out,
                "no policy or annotation classifies {}: they get default_effect ({})",
                unclassified.join(", "),
                policies.default_effect().as_str()
            )?;
        }
    }
    if !tools.unavailable().is_empty() {
        // Each broken component, named with why (a Worker serves the others without it), on
        // stderr, and the check fails as any failed command does (exit 2).
        warn_unavailable(&tools);
        eprintln!(
            "broken: {} of {} components did not load; {} tools from the others",
            tools.unavailable().len(),
            tools.components().len() + tools.unavailable().len(),
            tools.tools().len()
        );
        return Ok(ExitCode::from(2));
    }
    writeln!(out, "ok: {} components, {} tools", tools.components().len(), tools.tools().len())?;
    Ok(ExitCode::SUCCESS)
}

/// Names each component of `tools` that did not load, on stderr: the others serve without it.
fn warn_unavailable(tools: &ToolSet) {
    for broken in tools.unavailable() {
        eprintln!("unavailable: {} ({}): {}", broken.component, broken.path.display(), broken.reason);
    }
}

/// Where the components, manifests and options factory of `DIR` are.
struct Layout {
    tools: PathBuf,
    manifests: Manifests,
    factory: Option<PathBuf>,
    /// The agent's `tollgate.toml` and its `[policies]`, when there is one.
    policies: Option<(PathBuf, Policies)>,
    /// What was found, in a sentence, for `check`.
    described: String,
}

/// Whether `dir` holds a `*.wasm` file.
fn has_components(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| e.path().extension().is_some_and(|x| x == "wasm") && e.path().is_file())
    })
}

impl Layout {
    fn of(dir: &Path) -> anyhow::Result<Self> {
        if !dir.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        let Some(config) = AgentConfig::read(dir)? else {
            let beside =
                "manifests from the <name>.toml beside each component, none meaning everything denied";
            let tools = if !has_components(dir) && dir.join("tools").is_dir() {
                dir.join("tools")
            } else {
                dir.to_path_buf()
            };
            if !has_components(&tools) {
                bail!(
                    "nothing to load in {}: no tollgate.toml, and no *.wasm components in it{}",
                    dir.display(),
                    if dir.join("tools").is_dir() { " or in its tools/ folder" } else { "" }
                );
            }
            let described = format!(
                "no tollgate.toml in {}: checking {}/*.wasm as tool components, {beside}",
                dir.display(),
                tools.display()
            );
            return Ok(Self {
                tools,
                manifests: Manifests::default(),
                factory: None,
                policies: None,
                described,
            });
        };
        let factory = config.options_factory.as_ref().map(|path| dir.join(path));
        let described = format!(
            "agent {}: tool components from {}/*.wasm, manifests from its [tools.<name>] tables or the \
             <name>.toml beside each component",
            config.path.display(),
            dir.join("tools").display()
        );
        Ok(Self {
            tools: dir.join("tools"),
            manifests: config.manifests,
            factory,
            policies: Some((config.path, config.policies)),
            described,
        })
    }

    /// Every component of the directory that loads, and the others as [`ToolSet::unavailable`],
    /// as a running Worker of an unlocked agent serves them.
    async fn load_each(&self, sandbox: &Sandbox) -> anyhow::Result<ToolSet> {
        let tools = LiveTools::new(self.tools.clone()).load(sandbox, &self.manifests).await?;
        let mut stems: Vec<&str> = tools.components().iter().map(|c| c.name.as_str()).collect();
        stems.extend(tools.unavailable().iter().map(|u| u.component.as_str()));
        self.manifests.check_components(&self.tools, &stems)?;
        Ok(tools)
    }
}

fn print_table(out: &mut impl Write, tools: &[ToolInfo]) -> std::io::Result<()> {
    if tools.is_empty() {
        return writeln!(out, "no tools");
    }
    let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    let cwidth = tools.iter().map(|t| t.component.len()).max().unwrap_or(9).max(9);
    writeln!(out, "{:width$}  {:cwidth$}  {:24}  DESCRIPTION", "NAME", "COMPONENT", "HINTS")?;
    for tool in tools {
        let a = &tool.annotations;
        let mut hints = Vec::new();
        if a.read_only {
            hints.push("read-only");
        }
        if a.idempotent {
            hints.push("idempotent");
        }
        if a.destructive {
            hints.push("destructive");
        }
        if a.open_world {
            hints.push("open-world");
        }
        let hints = if hints.is_empty() { "-".to_string() } else { hints.join(",") };
        let description = tool.description.lines().next().unwrap_or_default();
        writeln!(out, "{:width$}  {:cwidth$}  {:24}  {description}", tool.name, tool.component, hints)?;
    }
    Ok(())
}
