//! A directory of tool components, loaded and checked: [`ToolSet`].
//!
//! Loading a directory compiles (or reads from the cache) every `*.wasm` in it, links it, checks
//! that it exports `tollgate:tool/tools@0.1.0`, resolves its manifest, lists its tools once, and
//! checks every tool: a valid name that is unique across the directory and is no Claude Code
//! built-in (in any letter case), a description, and an input schema within the bounds of
//! [`crate::schema`] (size, nesting, `$ref`s, expansion) that compiles. Any problem fails the
//! whole load with an error naming the file, the tool and the bound: a half-loaded tool set would
//! hide a tool from the model without anyone noticing.
//!
//! A call validates its arguments against the schema on the host (the handler never sees
//! arguments that fail it), within a validation budget, then runs in a fresh instance under the
//! component's limits: one prepared in advance of the call when the component is small and was called
//! before ([`crate::prepared`]), else one instantiated on the call's path. The used instance is
//! dropped off the call's path.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::{Component, types::ComponentItem};

use crate::bindings::tool::ToolProviderPre;
use crate::bindings::tool::tollgate::tool::types as wit;
use crate::cache::CacheOutcome;
use crate::error::{CallError, LoadError};
use crate::manifest::{Manifest, ManifestFile};
use crate::names::check_tool_name;
use crate::prepared::{Job, Standby};
use crate::reach::Reach;
use crate::schema::{SchemaBounds, SchemaCost};
use crate::{Annotations, Sandbox};

/// The interface a tool component must export.
pub(crate) const TOOLS_EXPORT: &str = "tollgate:tool/tools@0.1.0";
/// Tools one component may list.
pub(crate) const MAX_TOOLS_PER_COMPONENT: usize = 256;
/// Bytes of all of one component's input schemas together.
pub(crate) const MAX_SCHEMA_BYTES_PER_COMPONENT: usize = 1 << 20;
/// Bytes of one tool's description.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 64 << 10;

/// Manifests that come from the agent's `tollgate.toml` (`[tools.<component>]` tables, parsed by
/// the binary's `AgentConfig`: this crate does not read that file), by component name. A
/// component not named here may have a `<name>.toml` beside it.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    entries: BTreeMap<String, (ManifestFile, String, PathBuf)>,
}

impl Manifests {
    /// Whether no component has a manifest entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks that every component named here is one of `stems`, the components of `dir`.
    ///
    /// # Errors
    /// [`LoadError::ManifestWithoutComponent`] for the first that is not, with a did-you-mean.
    pub fn check_components(&self, dir: &Path, stems: &[&str]) -> Result<(), LoadError> {
        for (component, (_, origin, _)) in &self.entries {
            if !stems.contains(&component.as_str()) {
                let hint = tollgate_engine::tool_names::closest(component, stems.iter().copied())
                    .map_or_else(String::new, |near| format!("; did you mean `[tools.{near}]`?"));
                return Err(LoadError::ManifestWithoutComponent {
                    origin: origin.clone(),
                    component: component.clone(),
                    dir: dir.to_path_buf(),
                    hint,
                });
            }
        }
        Ok(())
    }

    /// Adds the manifest of `component`, written at `origin`, with relative paths against `base`.
    pub fn insert(
        &mut self,
        component: impl Into<String>,
        file: ManifestFile,
        origin: impl Into<String>,
        base: PathBuf,
    ) {
        self.entries.insert(component.into(), (file, origin.into(), base));
    }
}

/// A call's durable step, passed to the tool (`deferred-execution` in the WIT).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeferredExecution {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The model's tool-use ID.
    pub tool_call_id: String,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// The same on every attempt: `<session>/<turn>/<tool call>`.
    pub idempotency_key: String,
}

impl DeferredExecution {
    /// The execution of attempt `attempt` of a call, with the key `<session>/<turn>/<tool call>`.
    pub fn new(session_id: &str, turn_id: &str, tool_call_id: &str, attempt: u32) -> Self {
        Self {
            session_id: session_id.into(),
            turn_id: turn_id.into(),
            tool_call_id: tool_call_id.into(),
            attempt,
            idempotency_key: format!("{session_id}/{turn_id}/{tool_call_id}"),
        }
    }
}

/// One block of a tool's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Its MIME type.
        media_type: String,
        /// Its bytes.
        #[serde(skip)]
        data: Vec<u8>,
    },
}

/// What a call produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolOutput {
    /// The blocks, in order.
    pub content: Vec<Content>,
    /// A tool-level failure the model should read.
    pub is_error: bool,
}

impl ToolOutput {
    /// The text blocks joined with newlines (images left out).
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                Content::Image { .. } => None,
            })
            .collect();
        texts.join("\n")
    }

    fn size(&self) -> usize {
        self.content
            .iter()
            .map(|c| match c {
                Content::Text { text } => text.len(),
                Content::Image { media_type, data } => media_type.len() + data.len(),
            })
            .sum()
    }
}

/// What [`ToolSet::call_reporting`] returns: the call's result, and whether anything it did may
/// have left the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallReport {
    /// What the call produced.
    pub result: Result<ToolOutput, CallError>,
    /// [`Reach::Contained`] when nothing of the call left the machine, whatever its result.
    pub reach: Reach,
}

/// A loaded tool.
#[derive(Clone, Debug, Serialize)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: serde_json::Value,
    /// Its annotations.
    #[serde(serialize_with = "serialize_annotations")]
    pub annotations: Annotations,
    /// The component it comes from (the file stem).
    pub component: String,
}

fn serialize_annotations<S: serde::Serializer>(a: &Annotations, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct A {
        read_only: bool,
        idempotent: bool,
        destructive: bool,
        open_world: bool,
    }
    A {
        read_only: a.read_only,
        idempotent: a.idempotent,
        destructive: a.destructive,
        open_world: a.open_world,
    }
    .serialize(s)
}

/// A loaded component.
#[derive(Clone, Debug)]
pub struct ComponentInfo {
    /// Its name: the file stem.
    pub name: String,
    /// The `.wasm` file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it came from the compile cache.
    pub cache: CacheOutcome,
    /// How long loading took (compile or cache read, link, list).
    pub load_time: Duration,
    /// What it is granted.
    pub manifest: Manifest,
    /// Its tools' names.
    pub tools: Vec<String>,
}

/// The grants of one component, shared by its calls.
#[derive(Clone)]
pub(crate) struct Grants {
    pub(crate) name: Arc<str>,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) config: Arc<BTreeMap<String, Option<String>>>,
}

impl Grants {
    pub(crate) fn new(name: &str, manifest: Manifest) -> Self {
        let config = manifest.config.iter().map(|(k, v)| (k.clone(), v.value.clone())).collect();
        Self { name: name.into(), manifest: Arc::new(manifest), config: Arc::new(config) }
    }
}

/// One component loaded and checked on its own ([`Sandbox::load_component`]): what a tool set is
/// assembled from, and what a directory keeps as a file's last good build. Cheap to clone.
#[derive(Clone)]
pub struct LoadedComponent(Arc<LoadedInner>);

struct LoadedInner {
    standby: Arc<Standby>,
    info: ComponentInfo,
    tools: Vec<LoadedTool>,
}

impl LoadedComponent {
    /// What was loaded.
    pub fn info(&self) -> &ComponentInfo {
        &self.0.info
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LoadedComponent").field(&self.0.info.name).finish()
    }
}

/// A component file that serves no build of its own now: it did not load.
#[derive(Clone, Debug)]
pub struct Unavailable {
    /// The component's name (the file stem).
    pub component: String,
    /// The `.wasm` file.
    pub path: PathBuf,
    /// Why it did not load.
    pub reason: String,
    /// Whether its last good build (of an earlier version of the file) still serves its tools.
    pub serving_last_good: bool,
}

impl Unavailable {
    /// A component that did not load for `reason`.
    pub fn new(component: String, path: PathBuf, reason: String, serving_last_good: bool) -> Self {
        Self { component, path, reason, serving_last_good }
    }
}

#[derive(Clone)]
struct LoadedTool {
    info: ToolInfo,
    validator: Arc<jsonschema::Validator>,
    cost: SchemaCost,
    component: usize,
}

/// The tools of one directory, ready to call. Cheap to clone.
#[derive(Clone)]
pub struct ToolSet {
    inner: Arc<ToolSetInner>,
}

struct ToolSetInner {
    sandbox: Sandbox,
    components: Vec<Arc<Standby>>,
    component_infos: Vec<ComponentInfo>,
    tools: Vec<LoadedTool>,
    infos: Vec<ToolInfo>,
    by_name: HashMap<String, usize>,
    /// The directory's components that did not load.
    unavailable: Vec<Unavailable>,
    /// Jobs its calls left to the preparer and not done yet.
    pending: Arc<tokio::sync::watch::Sender<usize>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet").field("tools", &self.inner.by_name.keys().collect::<Vec<_>>()).finish()
    }
}

/// The `*.wasm` files of `dir`, sorted.
fn wasm_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let entries =
        std::fs::read_dir(dir).map_err(|source| LoadError::Io { path: dir.to_path_buf(), source })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Io { path: dir.to_path_buf(), source })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A component file read once: its bytes, their SHA-256 (the compile cache's key, and what an
/// agent lock pins), and the text of its `<name>.toml` manifest beside it, if any. Loading from a
/// source never reads the file again, so what was hashed is what runs.
#[derive(Clone)]
pub struct ComponentSource {
    /// Where it was read from (named in errors; its stem names the component).
    pub path: PathBuf,
    /// The `.wasm` bytes.
    pub bytes: Vec<u8>,
    /// The SHA-256 of `bytes`.
    pub sha256: [u8; 32],
    /// The manifest beside it: its path and text.
    pub manifest: Option<(PathBuf, String)>,
}

impl std::fmt::Debug for ComponentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentSource")
            .field("path", &self.path)
            .field("len", &self.bytes.len())
            .field("sha256", &hex::encode(self.sha256))
            .finish_non_exhaustive()
    }
}

impl ComponentSource {
    /// Reads `path` and the `<name>.toml` beside it, hashing the bytes once.
    ///
    /// # Errors
    /// An unreadable file.
    pub fn read(path: &Path) -> Result<Self, LoadError> {
        let bytes =
            std::fs::read(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
        let beside = path.with_extension("toml");
        let manifest = if beside.is_file() {
            let text = std::fs::read_to_string(&beside)
                .map_err(|source| LoadError::Io { path: beside.clone(), source })?;
            Some((beside, text))
        } else {
            None
        };
        Ok(Self::new(path.to_path_buf(), bytes, manifest))
    }

    /// A source from bytes already read (the SHA-256 is computed here).
    pub fn new(path: PathBuf, bytes: Vec<u8>, manifest: Option<(PathBuf, String)>) -> Self {
        let sha256 = crate::cache::sha256(&bytes);
        Self { path, bytes, sha256, manifest }
    }

    /// The component's name: the file stem.
    pub fn name(&self) -> String {
        self.path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string()
    }
}

/// Checks that `bytes` (read from `path`) are a WebAssembly component.
pub(crate) fn check_component_bytes(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Err(LoadError::NotAComponent { path: path.to_path_buf() }),
        Some([0, b'a', b's', b'm', ..]) => Ok(()),
        _ => Err(LoadError::NotWasm { path: path.to_path_buf() }),
    }
}

/// The names of what a component exports, for an error message.
pub(crate) fn export_names(sandbox: &Sandbox, component: &Component) -> String {
    let ty = component.component_type();
    let names: Vec<String> = ty
        .exports(&sandbox.inner.engine)
        .map(|(name, item)| match item.ty {
            ComponentItem::ComponentInstance(_) => name.to_string(),
            ComponentItem::ComponentFunc(_) => format!("func {name}"),
            _ => name.to_string(),
        })
        .collect();
    if names.is_empty() { "nothing".into() } else { names.join(", ") }
}

impl Sandbox {
    /// Compiles (or reads from the cache, keyed on the source's SHA-256) one component.
    pub(crate) fn compile(
        &self,
        source: &ComponentSource,
    ) -> Result<(Component, CacheOutcome, u64), LoadError> {
        let path = &source.path;
        check_component_bytes(path, &source.bytes)?;
        let (component, outcome) =
            self.inner
                .cache
                .load(&self.inner.engine, &source.bytes, &source.sha256)
                .map_err(|e| LoadError::Invalid { path: path.to_path_buf(), reason: format!("{e:#}") })?;
        Ok((component, outcome, source.bytes.len() as u64))
    }

    /// Resolves the manifest of component `name` at `path`: from `manifests`, or from
    /// `<name>.toml` beside it, or none (everything denied).
    pub(crate) fn manifest_for(
        &self,
        name: &str,
        source: &ComponentSource,
        manifests: &Manifests,
    ) -> Result<Manifest, LoadError> {
        let env = |key: &str| std::env::var(key).ok();
        let max = self.inner.config.max_memory_mb;
        match (manifests.entries.get(name), &source.manifest) {
            (Some((_, origin, _)), Some((beside, _))) => Err(LoadError::TwoManifests {
                component: name.to_string(),
                first: origin.clone(),
                second: beside.display().to_string(),
            }),
            (Some((file, origin, base)), None) => Ok(file.resolve(origin, base, max, &env)?),
            (None, Some((beside, text))) => {
                let origin = beside.display().to_string();
                let file = ManifestFile::parse(text, &origin)?;
                let base = beside.parent().unwrap_or(Path::new("."));
                Ok(file.resolve(&origin, base, max, &env)?)
            }
            (None, None) => Ok(Manifest::default()),
        }
    }

    /// A tool set without tools (an agent that offers only Claude Code's built-in tools).
    pub fn no_tools(&self) -> ToolSet {
        ToolSet {
            inner: Arc::new(ToolSetInner {
                sandbox: self.clone(),
                components: Vec::new(),
                component_infos: Vec::new(),
                tools: Vec::new(),
                infos: Vec::new(),
                by_name: HashMap::new(),
                unavailable: Vec::new(),
                pending: Arc::new(tokio::sync::watch::Sender::new(0)),
            }),
        }
    }

    /// Loads every `*.wasm` of `dir` as a tool component. See the module documentation for what
    /// is checked; the first problem is the error.
    pub async fn load_tools(&self, dir: &Path, manifests: &Manifests) -> Result<ToolSet, LoadError> {
        let sources =
            wasm_files(dir)?.iter().map(|path| ComponentSource::read(path)).collect::<Result<_, _>>()?;
        self.load_tool_sources(dir, sources, manifests).await
    }

    /// As [`Sandbox::load_tools`], from the components of `dir` already read (sorted by file
    /// name): nothing is read from disk again.
    pub async fn load_tool_sources(
        &self,
        dir: &Path,
        sources: Vec<ComponentSource>,
        manifests: &Manifests,
    ) -> Result<ToolSet, LoadError> {
        let stems: Vec<&str> = sources.iter().filter_map(|f| f.path.file_stem()?.to_str()).collect();
        manifests.check_components(dir, &stems)?;
        let mut loaded = Vec::new();
        for source in sources {
            loaded.push(self.load_component(source, manifests).await?);
        }
        match self.assemble_with(loaded, Vec::new()) {
            (_, _, Some(clash)) => Err(clash),
            (tools, _, None) => Ok(tools),
        }
    }

    /// Loads one component on its own: compiles (or reads from the cache), links, lists and checks
    /// its tools. Whether its tool names clash with another component's is [`Sandbox::assemble`]'s
    /// check.
    ///
    /// # Errors
    /// The first problem of this component, naming its file.
    pub async fn load_component(
        &self,
        source: ComponentSource,
        manifests: &Manifests,
    ) -> Result<LoadedComponent, LoadError> {
        let started = Instant::now();
        let path = source.path.clone();
        let name = source.name();
        let manifest = self.manifest_for(&name, &source, manifests)?;
        let (component, cache, size) = self.compile(&source)?;
        drop(source);
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Invalid { path: path.clone(), reason: format!("{e:#}") })?;
        let pre = ToolProviderPre::new(instance_pre).map_err(|_| LoadError::WrongWorld {
            path: path.clone(),
            expected: TOOLS_EXPORT,
            found: export_names(self, &component),
        })?;
        let grants = Grants::new(&name, manifest.clone());
        let specs = self
            .run(&grants, "list-tools", async |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.tollgate_tool_tools().call_list_tools(&mut *store).await
            })
            .await
            .map_err(|e| LoadError::ListFailed { path: path.clone(), reason: e.to_string() })?;
        check_listing(&path, &specs)?;
        let mut tools: Vec<LoadedTool> = Vec::new();
        for spec in specs {
            let tool = check_spec(&path, &name, spec)?;
            if tools.iter().any(|t| t.info.name == tool.info.name) {
                return Err(LoadError::DuplicateTool {
                    tool: tool.info.name.clone(),
                    first: path.clone(),
                    second: path.clone(),
                });
            }
            tools.push(tool);
        }
        let eligible = size <= self.inner.config.prepare_max_component_bytes;
        let info = ComponentInfo {
            name,
            path,
            size,
            cache,
            load_time: started.elapsed(),
            manifest,
            tools: tools.iter().map(|t| t.info.name.clone()).collect(),
        };
        Ok(LoadedComponent(Arc::new(LoadedInner {
            standby: Arc::new(Standby::new(pre, grants, eligible)),
            info,
            tools,
        })))
    }

    /// A tool set of `components` (in the order given) and the `unavailable` ones: a component
    /// listing a tool an earlier one lists is left out and added to the unavailable ones, last,
    /// with its [`LoadError::DuplicateTool`].
    pub fn assemble(
        &self,
        components: Vec<LoadedComponent>,
        unavailable: Vec<Unavailable>,
    ) -> (ToolSet, Vec<Unavailable>) {
        let (tools, unavailable, _) = self.assemble_with(components, unavailable);
        (tools, unavailable)
    }

    /// [`Sandbox::assemble`], and the first clash as an error.
    fn assemble_with(
        &self,
        components: Vec<LoadedComponent>,
        mut unavailable: Vec<Unavailable>,
    ) -> (ToolSet, Vec<Unavailable>, Option<LoadError>) {
        let mut first_clash = None;
        let mut kept: Vec<LoadedComponent> = Vec::new();
        let mut tools: Vec<LoadedTool> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for component in components {
            let clash = component.0.tools.iter().find_map(|tool| {
                let &other = by_name.get(&tool.info.name)?;
                Some((tool.info.name.clone(), kept[tools[other].component].0.info.path.clone()))
            });
            if let Some((tool, first)) = clash {
                let info = &component.0.info;
                let error = LoadError::DuplicateTool { tool, first, second: info.path.clone() };
                unavailable.push(Unavailable::new(
                    info.name.clone(),
                    info.path.clone(),
                    error.to_string(),
                    false,
                ));
                first_clash.get_or_insert(error);
                continue;
            }
            let index = kept.len();
            for tool in &component.0.tools {
                by_name.insert(tool.info.name.clone(), tools.len());
                tools.push(LoadedTool { component: index, ..tool.clone() });
            }
            kept.push(component);
        }
        let infos = tools.iter().map(|t| t.info.clone()).collect();
        let set = ToolSet {
            inner: Arc::new(ToolSetInner {
                sandbox: self.clone(),
                components: kept.iter().map(|c| c.0.standby.clone()).collect(),
                component_infos: kept.iter().map(|c| c.0.info.clone()).collect(),
                tools,
                infos,
                by_name,
                unavailable: unavailable.clone(),
                pending: Arc::new(tokio::sync::watch::Sender::new(0)),
            }),
        };
        (set, unavailable, first_clash)
    }

    /// Drops `used` (a store whose call is over) and gives back the call's `permit` after it, off
    /// the call's path, and prepares `standby`'s next instance if it should (see [`crate::prepared`]).
    /// Without prepared instances (`prepared_instances = 0`), drops it here.
    fn retire(
        &self,
        used: wasmtime::Store<crate::state::HostState>,
        permit: tokio::sync::OwnedSemaphorePermit,
        standby: &Arc<Standby>,
        pending: &Arc<tokio::sync::watch::Sender<usize>>,
    ) {
        if self.inner.config.prepared_instances == 0 {
            drop(used);
            drop(permit);
            return;
        }
        self.inner.preparer.submit(Job::new(used, permit, standby, pending));
    }
}

/// Checks the size of a whole `list-tools` answer before any schema is parsed.
fn check_listing(path: &Path, specs: &[wit::ToolSpec]) -> Result<(), LoadError> {
    let too_big = |reason: String| LoadError::ListFailed { path: path.to_path_buf(), reason };
    if specs.len() > MAX_TOOLS_PER_COMPONENT {
        return Err(too_big(format!(
            "it lists {} tools, more than the limit of {MAX_TOOLS_PER_COMPONENT} per component",
            specs.len()
        )));
    }
    for spec in specs {
        SchemaBounds::default().check_size(&spec.input_schema).map_err(|reason| LoadError::BadTool {
            path: path.to_path_buf(),
            tool: crate::state::escape_controls(crate::state::truncate(&spec.name, 128)).into_owned(),
            reason,
        })?;
    }
    let total: usize = specs.iter().map(|s| s.input_schema.len()).sum();
    if total > MAX_SCHEMA_BYTES_PER_COMPONENT {
        return Err(too_big(format!(
            "its input schemas take {} KiB together, more than the limit of {} KiB per component",
            total.div_ceil(1024),
            MAX_SCHEMA_BYTES_PER_COMPONENT >> 10
        )));
    }
    Ok(())
}

/// Checks one spec from `list-tools` and compiles its schema.
fn check_spec(path: &Path, component: &str, spec: wit::ToolSpec) -> Result<LoadedTool, LoadError> {
    let bad = |reason: String| LoadError::BadTool {
        path: path.to_path_buf(),
        tool: crate::state::escape_controls(crate::state::truncate(&spec.name, 128)).into_owned(),
        reason,
    };
    check_tool_name(&spec.name).map_err(bad)?;
    if spec.description.trim().is_empty() {
        return Err(bad("it has no description; the model needs one to use it".into()));
    }
    if spec.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(bad(format!(
            "its description is {} KiB, more than the limit of {} KiB",
            spec.description.len().div_ceil(1024),
            MAX_DESCRIPTION_BYTES >> 10
        )));
    }
    let bounds = SchemaBounds::default();
    bounds.check_size(&spec.input_schema).map_err(bad)?;
    let schema: serde_json::Value = serde_json::from_str(&spec.input_schema)
        .map_err(|e| bad(format!("its input schema is not JSON: {e}")))?;
    if !schema.is_object() {
        return Err(bad("its input schema must be a JSON object".into()));
    }
    if let Some(ty) = schema.get("type")
        && ty != "object"
    {
        return Err(bad(format!(
            "its input schema must describe an object (`\"type\": \"object\"`), not {ty}"
        )));
    }
    let cost = bounds.check(&schema).map_err(bad)?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| bad(format!("its input schema is not a valid JSON Schema: {e}")))?;
    let a = spec.annotations;
    Ok(LoadedTool {
        info: ToolInfo {
            name: spec.name.clone(),
            description: spec.description.clone(),
            input_schema: schema,
            annotations: Annotations {
                read_only: a.read_only,
                idempotent: a.idempotent,
                destructive: a.destructive,
                open_world: a.open_world,
            },
            component: component.to_string(),
        },
        validator: Arc::new(validator),
        cost,
        component: 0,
    })
}

impl ToolSet {
    /// Every tool, in load order (components sorted by file name).
    pub fn tools(&self) -> &[ToolInfo] {
        &self.inner.infos
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&ToolInfo> {
        self.inner.by_name.get(name).map(|&i| &self.inner.infos[i])
    }

    /// The loaded components, with their grants.
    pub fn components(&self) -> &[ComponentInfo] {
        &self.inner.component_infos
    }

    /// The directory's components that did not load (see [`crate::live`]).
    pub fn unavailable(&self) -> &[Unavailable] {
        &self.inner.unavailable
    }

    /// Why tool `name`, which no loaded component lists, cannot be called:
    /// [`CallError::Unavailable`] when some components did not load, else
    /// [`CallError::UnknownTool`].
    pub fn not_loaded(&self, name: &str) -> CallError {
        if self.inner.unavailable.is_empty() {
            return CallError::UnknownTool { tool: name.to_string() };
        }
        let components =
            self.inner.unavailable.iter().map(|u| (u.component.clone(), u.reason.clone())).collect();
        CallError::Unavailable { tool: name.to_string(), components }
    }

    /// How many of its components have an instance prepared for their next call now.
    pub fn prepared_instances(&self) -> usize {
        self.inner.components.iter().filter(|c| c.is_prepared()).count()
    }

    /// Waits until the work its calls left off their path is done: used instances dropped, next
    /// ones prepared. Calls never need it; tests and benchmarks that measure CPU per call do.
    pub async fn settled(&self) {
        let mut pending = self.inner.pending.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = pending.wait_for(|n| *n == 0).await;
    }

    /// Checks `arguments` against tool `name`'s schema without calling it.
    pub fn validate(&self, name: &str, arguments: &str) -> Result<serde_json::Value, CallError> {
        let Some(&index) = self.inner.by_name.get(name) else {
            return Err(self.not_loaded(name));
        };
        let tool = &self.inner.tools[index];
        let value: serde_json::Value = serde_json::from_str(arguments)
            .map_err(|e| CallError::InvalidJson { tool: name.to_string(), reason: e.to_string() })?;
        SchemaBounds::default().check_call(tool.cost, &value).map_err(|problem| {
            CallError::InvalidArguments { tool: name.to_string(), problems: vec![problem] }
        })?;
        // The common case, valid arguments, takes the validator's short-circuiting check; the
        // errors are collected only for arguments it rejects.
        if tool.validator.is_valid(&value) {
            return Ok(value);
        }
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&value)
            .take(10)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("at `{at}`: {e}") }
            })
            .collect();
        if !problems.is_empty() {
            return Err(CallError::InvalidArguments { tool: name.to_string(), problems });
        }
        Ok(value)
    }

    /// Calls tool `name` with `arguments` (a JSON object): validates them against its schema,
    /// then runs it in a fresh instance (never called before; prepared in advance of the call for a
    /// small component) under its component's limits, the timeout counting from the call's start
    /// (less what instantiating a prepared instance took). `execution` is the durable step of a
    /// deferred call, `None` for an inline one.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        execution: Option<&DeferredExecution>,
    ) -> Result<ToolOutput, CallError> {
        self.call_reporting(name, arguments, execution).await.result
    }

    /// [`ToolSet::call`], and whether anything the call did may have left the machine
    /// ([`Reach`]): a failed write that provably did nothing can be recorded as a plain failure.
    pub async fn call_reporting(
        &self,
        name: &str,
        arguments: &str,
        execution: Option<&DeferredExecution>,
    ) -> CallReport {
        let mut reach = Reach::Contained;
        let result = self.run_call(name, arguments, execution, &mut reach).await;
        CallReport { result, reach }
    }

    async fn run_call(
        &self,
        name: &str,
        arguments: &str,
        execution: Option<&DeferredExecution>,
        reach: &mut Reach,
    ) -> Result<ToolOutput, CallError> {
        self.validate(name, arguments)?;
        let tool = &self.inner.tools[self.inner.by_name[name]];
        let component = &self.inner.components[tool.component];
        let execution = execution.map(|e| wit::DeferredExecution {
            session_id: e.session_id.clone(),
            turn_id: e.turn_id.clone(),
            tool_call_id: e.tool_call_id.clone(),
            attempt: e.attempt,
            idempotency_key: e.idempotency_key.clone(),
        });
        let sandbox = &self.inner.sandbox;
        let permit = sandbox.permit(name).await?;
        let limits = component.grants.manifest.limits;
        let (mut store, prepared, spent) = match component.take() {
            Some((store, instance, spent)) => (store, Some(instance), spent),
            None => {
                let store = crate::new_store(&sandbox.inner.engine, &component.grants, limits.timeout)
                    .map_err(|e| CallError::Host { tool: name.to_string(), reason: format!("{e:#}") })?;
                (store, None, Duration::ZERO)
            }
        };
        // Instantiating a prepared instance took `spent` of the call's timeout already.
        let budget = limits.timeout.saturating_sub(spent);
        let result = sandbox
            .run_in(&mut store, &limits, name, budget, async |store| {
                let instance = match prepared {
                    Some(instance) => instance,
                    None => component.pre.instantiate_async(&mut *store).await?,
                };
                instance
                    .tollgate_tool_tools()
                    .call_call(&mut *store, name, arguments, execution.as_ref())
                    .await
            })
            .await;
        *reach = store.data().reach.reach();
        let denied = store.data().denied.explanation();
        // Only a call that failed by its own report carries its stderr (a trap quotes it already).
        let stderr = matches!(result, Ok(Err(_)))
            .then(|| crate::state::stderr_lines(&store.data().stderr.text()))
            .flatten();
        sandbox.retire(store, permit, component, &self.inner.pending);
        // A refused destination explains a failure the guest can only report as a bare code.
        let explained = |message: String| match &denied {
            Some(denied) => format!("{message} ({denied})"),
            None => message,
        };
        let result = result.map_err(|error| match error {
            CallError::Trapped { tool, reason } => CallError::Trapped { tool, reason: explained(reason) },
            other => other,
        })?;
        if let (Err(_), Some(stderr)) = (&result, &stderr) {
            // A traceback, say: in the log, not in what the model reads.
            tracing::warn!(
                component = &*component.grants.name,
                tool = name,
                "the call failed; the guest's stderr:\n  | {stderr}"
            );
        }
        let output = match result {
            Ok(output) => output,
            Err(wit::CallError::Failed(message)) => {
                return Err(CallError::Failed { tool: name.into(), message: explained(message), stderr });
            }
            Err(wit::CallError::Retryable(message)) => {
                return Err(CallError::Retryable { tool: name.into(), message: explained(message), stderr });
            }
        };
        let mut output = ToolOutput {
            content: output
                .content
                .into_iter()
                .map(|c| match c {
                    wit::Content::Text(text) => Content::Text { text },
                    wit::Content::Image(i) => Content::Image { media_type: i.media_type, data: i.data },
                })
                .collect(),
            is_error: output.is_error,
        };
        if let (true, Some(denied)) = (output.is_error, denied) {
            output.content.push(Content::Text { text: format!("({denied})") });
        }
        let limit = component.grants.manifest.limits.max_output_bytes;
        let bytes = output.size();
        if bytes > limit {
            return Err(CallError::OutputTooLarge { tool: name.into(), bytes, limit });
        }
        Ok(output)
    }
}
