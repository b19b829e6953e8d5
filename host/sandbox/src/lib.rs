//! Loads an agent's tool components and options factory and runs them under limits and grants.
//!
//! This crate owns the wasmtime embedding: the engine (pooling allocator, epoch deadlines), the
//! compiled-component cache, the host side of the `tollgate:tool` and `tollgate:agent` WIT
//! packages, and the enforcement of each component's manifest. It does not decide *whether* a
//! call may run (that is the gate's job in `tollgate-engine`); it runs what it is asked to run,
//! safely. Read [`Sandbox`], then [`ToolSet`].
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig};
//!
//! let sandbox = Sandbox::new(SandboxConfig::default())?;
//! let tools = sandbox.load_tools("agent/tools".as_ref(), &Manifests::default()).await?;
//! for tool in tools.tools() {
//!     println!("{}: {}", tool.name, tool.description);
//! }
//! let output = tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await?;
//! # Ok(()) }
//! ```
//!
//! Every call runs in a **fresh instance** (nothing leaks between calls or sessions), created from
//! a pre-linked `InstancePre` on the pooling allocator (for a small component, prepared in advance of
//! the call off its path: see the `prepared` module), with:
//! - a wall-clock deadline: an epoch ticker stops a spinning guest, a tokio timeout stops one
//!   blocked in a host call (a sleep, a slow HTTP request);
//! - a cap on all of the component's memories together;
//! - a bound on the output it returns, its log messages and its stderr, and log text escaped so
//!   a guest cannot forge host log lines;
//! - a bound on what the host holds on its behalf, derived from the same memory cap: live wasi
//!   resources, bytes of `wasi:http` header sets and of buffered request bodies (a body to a
//!   denied host is drained and discarded, never collected);
//! - nothing the manifest does not grant: no files, environment, sockets or outbound HTTP; IP
//!   addresses compared as addresses (the [`allow`] module); in a writable directory, no symbolic
//!   link that points anywhere but down from its own folder (the `links` module).
//!
//! Input schemas are bounded at load (size, nesting, `$ref`s, and their expansion with `$ref`s
//! followed), so that validating a call's arguments, which cannot be interrupted, stays short;
//! a call whose arguments are too large for its schema's expansion is refused before validation.
//!
//! # Caveats
//! - The first load of a component compiles it (0.1 s for Rust, seconds for JavaScript or Python);
//!   later loads read the cached artifact (see [`SandboxConfig::cache_dir`]). A new component of
//!   a language seen before compiles only the functions not compiled before (the `function_cache`
//!   module): not the interpreter every Python or JavaScript tool embeds.
//! - At most [`SandboxConfig::max_concurrent_calls`] calls run at once; the rest wait their turn.

mod agent;
pub mod allow;
mod bindings;
mod cache;
mod error;
mod function_cache;
mod links;
pub mod live;
mod manifest;
mod names;
mod prepared;
mod reach;
mod schema;
mod state;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap, UpdateDeadline,
};

pub use agent::{FactoryError, OptionsContext, OptionsFactory};
pub use allow::{AllowListError, AllowedHosts};
pub use cache::{CacheOutcome, WASMTIME_VERSION};
pub use error::{CallError, LoadError};
pub use live::{LiveTools, Readiness, readiness};
pub use manifest::{ConfigSource, DirGrant, Limits, Manifest, ManifestError, ManifestFile, ResolvedDir};
pub use names::check_tool_name;
pub use reach::Reach;
pub use tollgate_engine::policy::Annotations;
pub use tools::{
    CallReport, ComponentInfo, ComponentSource, Content, DeferredExecution, LoadedComponent, Manifests,
    ToolInfo, ToolOutput, ToolSet, Unavailable,
};

use crate::cache::ComponentCache;
use crate::function_cache::FunctionCache;
use crate::state::HostState;

/// How often the epoch ticker advances: the granularity of deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings of a [`Sandbox`].
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Where compiled components are cached. Default: `$TOLLGATE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tollgate/components`, else `~/.cache/tollgate/components`; `None` compiles
    /// on every load. Compiled functions are cached in its `functions` folder, for components
    /// that share code with one compiled before.
    pub cache_dir: Option<PathBuf>,
    /// Calls running at once; later calls wait. Default 32.
    pub max_concurrent_calls: u32,
    /// The most memory any manifest may grant one component, in MiB. Default 1024.
    pub max_memory_mb: u32,
    /// Instances prepared in advance of calls, across every tool set of this sandbox: after a call of a
    /// small component, its next instance (a fresh store and instance, never called) is prepared
    /// by a task of the caller's runtime after the call returns, so the next call only runs the
    /// guest. Each holds a slot of the
    /// pooling allocator. 0 instantiates every call on its path. Default 8.
    pub prepared_instances: u32,
    /// The largest component (`.wasm` bytes) whose next instance is prepared in advance. Default
    /// 2 MiB: Rust and QuickJS tools, not Go, StarlingMonkey or Python ones.
    pub prepare_max_component_bytes: u64,
    /// How long a prepared instance is kept while its component is not called. Default 60 s.
    pub prepared_idle: Duration,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let cache_dir = std::env::var_os("TOLLGATE_CACHE_DIR").map(PathBuf::from).or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("tollgate/components"))
        });
        Self {
            cache_dir,
            max_concurrent_calls: 32,
            max_memory_mb: 1024,
            prepared_instances: 8,
            prepare_max_component_bytes: 2 << 20,
            prepared_idle: Duration::from_secs(60),
        }
    }
}

/// The WebAssembly engine, its linker and cache, shared by every component it loads. Cheap to
/// clone.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

struct SandboxInner {
    engine: Engine,
    linker: Linker<HostState>,
    cache: ComponentCache,
    config: SandboxConfig,
    /// One per call running (and its instance until dropped): `max_concurrent_calls`.
    permits: Arc<tokio::sync::Semaphore>,
    /// Drops used instances and prepares the next, off the calls' paths.
    preparer: Arc<prepared::Preparer>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("config", &self.inner.config).finish()
    }
}

impl Sandbox {
    /// Sets up the engine (pooling allocator sized for `max_concurrent_calls` running and
    /// `prepared_instances` prepared instances, epoch interruption with a ticker thread) and links
    /// WASI 0.2, `wasi:http` and the Tollgate imports.
    pub fn new(config: SandboxConfig) -> Result<Self, LoadError> {
        let engine_error = |e: wasmtime::Error| LoadError::Engine(format!("{e:#}"));
        let slots = config.max_concurrent_calls.max(1) + 2 + config.prepared_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            // JavaScript and Python components hold several core instances, memories and tables.
            .total_core_instances(slots * 16)
            .max_core_instances_per_component(32)
            .total_memories(slots * 4)
            .max_memories_per_component(4)
            .max_memories_per_module(1)
            .total_tables(slots * 16)
            .max_tables_per_component(32)
            .max_tables_per_module(2)
            .table_elements(100_000)
            .total_stacks(slots)
            .max_memory_size((config.max_memory_mb as usize) << 20)
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20)
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut wasm = Config::new();
        wasm.epoch_interruption(true)
            .max_wasm_stack(1 << 20)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let functions =
            config.cache_dir.as_ref().map(|dir| Arc::new(FunctionCache::new(dir.join("functions"))));
        if let Some(functions) = &functions {
            wasm.enable_incremental_compilation(functions.clone()).map_err(engine_error)?;
        }
        let engine = Engine::new(&wasm).map_err(engine_error)?;
        spawn_epoch_ticker(&engine);

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        links::refuse_links_out(&mut linker).map_err(engine_error)?;
        // Always linked: StarlingMonkey (JavaScript) imports it whether or not the tool uses it.
        // Every request still passes the allow-list hook.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_error)?;
        bindings::tool::ToolProvider::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        bindings::agent::v0_1::plain::tollgate::agent::types::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s| s)
        .map_err(engine_error)?;
        bindings::agent::v0_2::tollgate::agent::types::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(engine_error)?;

        let prepared = Arc::new(tokio::sync::Semaphore::new(config.prepared_instances as usize));
        let preparer = prepared::Preparer::new(engine.clone(), prepared, config.prepared_idle);
        Ok(Self {
            inner: Arc::new(SandboxInner {
                engine,
                linker,
                cache: ComponentCache::new(config.cache_dir.clone(), functions),
                permits: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_calls.max(1) as usize)),
                preparer,
                config,
            }),
        })
    }

    /// The settings this sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Runs `body` in a fresh store for `grants`, under the grants' limits, and turns a trap into
    /// a [`CallError`] about `tool`.
    pub(crate) async fn run<R>(
        &self,
        grants: &tools::Grants,
        tool: &str,
        body: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let _permit = self.permit(tool).await?;
        let mut store = new_store(&self.inner.engine, grants, grants.manifest.limits.timeout)
            .map_err(|e| CallError::Host { tool: tool.to_string(), reason: format!("{e:#}") })?;
        self.run_in(&mut store, &grants.manifest.limits, tool, grants.manifest.limits.timeout, body).await
    }

    /// A turn to run a call: at most `max_concurrent_calls` are out at once.
    pub(crate) async fn permit(&self, tool: &str) -> Result<tokio::sync::OwnedSemaphorePermit, CallError> {
        self.inner.permits.clone().acquire_owned().await.map_err(|_| CallError::Host {
            tool: tool.to_string(),
            reason: "the sandbox is shutting down".into(),
        })
    }

    /// Runs `body` in `store` (fresh, or prepared in advance and never called) with `budget` left of the
    /// call's timeout, counted from now: the store's deadline, the epoch deadline and the timeout
    /// of a guest blocked in a host call all start here. Turns a trap into a [`CallError`] about
    /// `tool`.
    pub(crate) async fn run_in<R>(
        &self,
        store: &mut Store<HostState>,
        limits: &Limits,
        tool: &str,
        budget: Duration,
        body: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        store.data_mut().deadline = Instant::now() + budget;
        store.set_epoch_deadline(1);
        match tokio::time::timeout(budget, body(store)).await {
            Err(_) => Err(CallError::DeadlineExceeded { tool: tool.to_string(), limit: limits.timeout }),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(classify_trap(&error, store, tool, limits)),
        }
    }
}

/// A fresh store for one call of `grants`'s component: its WASI context, memory limiter and epoch
/// callback, with a deadline `timeout` from now (reset when the call starts, see
/// [`Sandbox::run_in`]).
pub(crate) fn new_store(
    engine: &Engine,
    grants: &tools::Grants,
    timeout: Duration,
) -> wasmtime::Result<Store<HostState>> {
    let state = HostState::new(
        grants.name.clone(),
        &grants.manifest,
        grants.config.clone(),
        Instant::now() + timeout,
    )?;
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|cx| {
        Ok(if Instant::now() >= cx.data().deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    Ok(store)
}

/// What a failed call into the guest means.
fn classify_trap(
    error: &wasmtime::Error,
    store: &Store<HostState>,
    tool: &str,
    limits: &Limits,
) -> CallError {
    let tool = tool.to_string();
    if store.data().limiter.refused.is_some() {
        return CallError::MemoryLimit { tool, limit_bytes: limits.memory_bytes };
    }
    let stderr = state::stderr_lines(&store.data().stderr.text());
    let with_stderr = |reason: String| match &stderr {
        None => reason,
        Some(stderr) => format!("{reason}; its stderr: {}", state::truncate(stderr, 2000)),
    };
    if let Some(reason) = host_budget_exceeded(error, limits) {
        return CallError::Trapped { tool, reason };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => CallError::DeadlineExceeded { tool, limit: limits.timeout },
        Some(Trap::StackOverflow) => {
            CallError::Trapped { tool, reason: with_stderr("stack overflow (unbounded recursion?)".into()) }
        }
        Some(Trap::MemoryOutOfBounds) => CallError::Trapped {
            tool,
            reason: with_stderr(
                "out-of-bounds memory access (often its stack overflowing from unbounded recursion)".into(),
            ),
        },
        Some(Trap::UnreachableCodeReached) => {
            CallError::Trapped { tool, reason: with_stderr("it panicked or aborted (unreachable)".into()) }
        }
        Some(trap) => CallError::Trapped { tool, reason: with_stderr(format!("wasm trap: {trap}")) },
        None => {
            let root = error.chain().last().map(|e| e.to_string()).unwrap_or_else(|| error.to_string());
            CallError::Trapped { tool, reason: with_stderr(root) }
        }
    }
}

/// Whether the guest ran into the host's own budget (too many live resources, a header set too
/// large), and if so what to tell about it.
fn host_budget_exceeded(error: &wasmtime::Error, limits: &Limits) -> Option<String> {
    use wasmtime::component::ResourceTableError;
    use wasmtime_wasi_http::FieldMapError;
    let budget = state::HostBudget::for_memory(limits.memory_bytes);
    let memory_mb = limits.memory_bytes >> 20;
    let table_full = |e: Option<&ResourceTableError>| matches!(e, Some(ResourceTableError::Full));
    let fields_full = |e: Option<&FieldMapError>| {
        matches!(e, Some(FieldMapError::TotalSizeTooBig | FieldMapError::TooManyFields))
    };
    if table_full(error.downcast_ref()) || error.chain().any(|e| table_full(e.downcast_ref())) {
        return Some(format!(
            "host resource limit: it held more than {} wasi resources at once (header sets, requests, \
             bodies, streams), the most a {memory_mb} MiB tool may hold",
            budget.handles
        ));
    }
    if fields_full(error.downcast_ref()) || error.chain().any(|e| fields_full(e.downcast_ref())) {
        return Some(format!(
            "host resource limit: a wasi:http header set grew past {} KiB, the most a {memory_mb} MiB tool \
             may build",
            budget.field_bytes >> 10
        ));
    }
    None
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("tollgate-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawn the epoch ticker thread");
}
