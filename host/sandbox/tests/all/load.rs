//! Loading tool directories, and the clear errors for what can be wrong with one.

use std::path::{Path, PathBuf};

use tollgate_sandbox::{CacheOutcome, LoadError, ManifestFile, Manifests, Sandbox, SandboxConfig};
use tollgate_test_guests as guests;

use crate::util::{ToolsDir, sandbox};

#[tokio::test]
async fn the_examples_load_with_their_specs_schemas_and_grants() {
    let dir = ToolsDir::new()
        .component("orders", guests::ORDERS)
        .component("payments", guests::PAYMENTS)
        .manifest("payments", "allowed_outbound_hosts = [\"https://payments.example.com\"]\n[config]\nPAYMENTS_URL = \"https://payments.example.com\"\n");
    let tools = dir.load().await;
    let names: Vec<&str> = tools.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["lookup_order", "create_refund"]);

    let lookup = tools.get("lookup_order").unwrap();
    assert!(lookup.annotations.read_only);
    assert_eq!(lookup.component, "orders");
    assert!(lookup.description.starts_with("Looks an order up"), "{}", lookup.description);
    assert_eq!(lookup.input_schema["required"], serde_json::json!(["order_id"]));
    assert_eq!(lookup.input_schema["additionalProperties"], serde_json::json!(false));

    let refund = tools.get("create_refund").unwrap();
    assert!(!refund.annotations.read_only && !refund.annotations.idempotent && refund.annotations.open_world);
    assert_eq!(refund.input_schema["properties"]["amount_cents"]["minimum"], serde_json::json!(1));

    let payments = tools.components().iter().find(|c| c.name == "payments").unwrap();
    let grants = payments.manifest.describe().join("\n");
    assert!(grants.contains("outbound: https://payments.example.com"), "{grants}");
    assert!(grants.contains("PAYMENTS_URL (literal, set)"), "{grants}");
    let orders = tools.components().iter().find(|c| c.name == "orders").unwrap();
    assert!(orders.manifest.describe()[0].contains("everything denied"));
}

#[tokio::test]
async fn a_file_that_is_not_wasm_is_refused_by_name() {
    let dir = ToolsDir::new().component("orders", guests::ORDERS).file("notes.wasm", b"hello, I am text");
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    assert!(matches!(error, LoadError::NotWasm { .. }), "{error}");
    assert!(error.to_string().contains("notes.wasm"), "{error}");
}

#[tokio::test]
async fn a_core_module_is_refused_as_not_a_component() {
    let dir = ToolsDir::new().file("core.wasm", b"\0asm\x01\0\0\0");
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    assert!(matches!(error, LoadError::NotAComponent { .. }), "{error}");
    assert!(
        error.to_string().contains("core.wasm") && error.to_string().contains("wasm32-wasip2"),
        "{error}"
    );
}

#[tokio::test]
async fn a_truncated_component_is_refused_with_the_compilers_reason() {
    let bytes = std::fs::read(guests::ORDERS).unwrap();
    let dir = ToolsDir::new().file("cut.wasm", &bytes[..bytes.len() / 2]);
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    assert!(matches!(error, LoadError::Invalid { .. }), "{error}");
    assert!(error.to_string().contains("cut.wasm"), "{error}");
}

#[tokio::test]
async fn a_component_of_the_wrong_world_is_refused_with_what_it_exports() {
    let dir = ToolsDir::new().component("command", guests::NOT_A_TOOL);
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, LoadError::WrongWorld { .. }), "{text}");
    assert!(text.contains("tollgate:tool/tools@0.1.0") && text.contains("wasi:cli/run"), "{text}");
}

#[tokio::test]
async fn two_components_exporting_one_tool_name_are_refused() {
    let dir = ToolsDir::new().component("orders", guests::ORDERS).component("orders_copy", guests::ORDERS);
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, LoadError::DuplicateTool { ref tool, .. } if tool == "lookup_order"), "{text}");
    assert!(text.contains("orders.wasm") && text.contains("orders_copy.wasm"), "{text}");
}

#[tokio::test]
async fn a_tool_named_after_a_claude_code_built_in_is_refused() {
    let dir = ToolsDir::new().component("impostor", guests::IMPOSTOR);
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, LoadError::BadTool { ref tool, .. } if tool == "Bash"), "{text}");
    assert!(text.contains("built-in"), "{text}");
}

#[tokio::test]
async fn a_bad_manifest_is_refused_naming_the_file_and_key() {
    let dir =
        ToolsDir::new().component("orders", guests::ORDERS).manifest("orders", "allowed_hosts = [\"x\"]\n");
    let error = sandbox().load_tools(&dir.tools(), &Manifests::default()).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("orders.toml") && text.contains("allowed_hosts"), "{text}");
}

#[tokio::test]
async fn a_manifest_in_two_places_is_refused() {
    let dir = ToolsDir::new().component("orders", guests::ORDERS).manifest("orders", "memory_mb = 16\n");
    let mut manifests = Manifests::default();
    manifests.insert(
        "orders",
        ManifestFile::default(),
        "tollgate.toml [tools.orders]",
        dir.root.path().into(),
    );
    let error = sandbox().load_tools(&dir.tools(), &manifests).await.unwrap_err();
    assert!(matches!(error, LoadError::TwoManifests { .. }), "{error}");
}

#[tokio::test]
async fn a_manifest_for_a_missing_component_is_refused() {
    let dir = ToolsDir::new().component("orders", guests::ORDERS);
    let manifests = agent_config_manifests(&dir, "payments", "memory_mb = 16\n");
    let error = sandbox().load_tools(&dir.tools(), &manifests).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, LoadError::ManifestWithoutComponent { .. }), "{text}");
    assert!(text.contains("[tools.payments]") && text.contains("payments.wasm"), "{text}");
}

/// What the binary's `AgentConfig` gives for a `[tools.<component>]` table of `tollgate.toml`.
fn agent_config_manifests(dir: &ToolsDir, component: &str, table: &str) -> Manifests {
    let origin = format!("{} [tools.{component}]", dir.root.path().join("tollgate.toml").display());
    let mut manifests = Manifests::default();
    manifests.insert(component, ManifestFile::parse(table, &origin).unwrap(), origin, dir.root.path().into());
    manifests
}

#[tokio::test]
async fn manifests_from_the_agent_config_are_applied() {
    let dir = ToolsDir::new().component("orders", guests::ORDERS);
    let manifests = agent_config_manifests(&dir, "orders", "memory_mb = 16\ntimeout_ms = 1500\n");
    let tools = sandbox().load_tools(&dir.tools(), &manifests).await.unwrap();
    let limits = tools.components()[0].manifest.limits;
    assert_eq!((limits.memory_bytes, limits.timeout.as_millis()), (16 << 20, 1500));
}

#[tokio::test]
async fn the_second_load_reads_the_compile_cache_and_a_corrupt_artifact_is_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let sandbox =
        Sandbox::new(SandboxConfig { cache_dir: Some(cache.path().into()), ..SandboxConfig::default() })
            .unwrap();
    let dir = ToolsDir::new().component("orders", guests::ORDERS);
    let first = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
    assert_eq!(first.components()[0].cache, CacheOutcome::Miss);
    let second = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
    assert_eq!(second.components()[0].cache, CacheOutcome::Hit);

    std::fs::write(artifact(cache.path()), b"garbage").unwrap();
    let third = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
    assert_eq!(third.components()[0].cache, CacheOutcome::Replaced);
    let output = third.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
    assert!(output.text().contains("4200"));
    let fourth = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
    assert_eq!(fourth.components()[0].cache, CacheOutcome::Hit);
}

/// The one compiled component in the cache directory `dir`.
fn artifact(dir: &Path) -> PathBuf {
    let artifacts: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    artifacts.into_iter().next().unwrap()
}

/// Removes every compiled component from the cache directory `dir`, keeping its functions.
fn remove_artifacts(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

/// The sizes of the packs of compiled functions in `dir/functions`, oldest first.
fn packs(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir.join("functions")) else { return Vec::new() };
    let mut packs: Vec<(std::time::SystemTime, u64)> = entries
        .map(|entry| entry.unwrap().metadata().unwrap())
        .map(|meta| (meta.modified().unwrap(), meta.len()))
        .collect();
    packs.sort();
    packs.into_iter().map(|(_, len)| len).collect()
}

/// Two QuickJS tools share the JavaScript engine: the second compiles only its own functions. A
/// component compiled again from the cached functions runs as written, and damaged functions are
/// compiled again.
#[tokio::test]
async fn a_component_reuses_the_functions_compiled_for_another_and_a_damaged_one_is_compiled_again() {
    let cache = tempfile::tempdir().unwrap();
    let sandbox =
        Sandbox::new(SandboxConfig { cache_dir: Some(cache.path().into()), ..SandboxConfig::default() })
            .unwrap();
    let orders = ToolsDir::new().component("orders", guests::built("js", "orders").to_str().unwrap());
    let lookup = async |tools: &tollgate_sandbox::ToolSet| {
        let output = tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
        assert!(!output.is_error && output.text().contains("4200"), "{}", output.text());
    };
    lookup(&sandbox.load_tools(&orders.tools(), &Manifests::default()).await.unwrap()).await;
    let first = packs(cache.path());
    assert!(first.len() == 1 && first[0] > 1 << 20, "one pack of the engine's functions: {first:?}");

    // Another QuickJS component: a few functions of its own.
    let hostile = ToolsDir::new().component("hostile", guests::built("js", "hostile").to_str().unwrap());
    sandbox.load_tools(&hostile.tools(), &Manifests::default()).await.unwrap();
    let second = packs(cache.path());
    assert!(second.len() == 2 && second[1] < first[0] / 4, "{second:?}");

    // Compiled again from the cached functions (a few, about 5%, get another key on each compile
    // and are compiled again), and it answers as written.
    remove_artifacts(cache.path());
    let again = sandbox.load_tools(&orders.tools(), &Manifests::default()).await.unwrap();
    assert_eq!(again.components()[0].cache, CacheOutcome::Miss);
    let third = packs(cache.path());
    assert!(third.len() <= 3 && third[2..].iter().all(|len| *len < first[0] / 10), "{third:?}");
    lookup(&again).await;

    // Bytes flipped across the engine's functions: those are compiled again, into a new pack.
    let path = std::fs::read_dir(cache.path().join("functions"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max_by_key(|path| path.metadata().unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    for tenth in 5..10 {
        let at = bytes.len() * tenth / 10;
        bytes[at] ^= 0x40;
    }
    std::fs::write(&path, &bytes).unwrap();
    remove_artifacts(cache.path());
    let rebuilt = sandbox.load_tools(&orders.tools(), &Manifests::default()).await.unwrap();
    lookup(&rebuilt).await;
    assert_eq!(packs(cache.path()).len(), third.len() + 1, "the damaged functions were compiled again");
}

#[tokio::test]
async fn an_empty_directory_loads_no_tools_and_a_missing_one_is_an_error() {
    let dir = ToolsDir::new();
    assert!(dir.load().await.tools().is_empty());
    let error = sandbox().load_tools(&dir.root.path().join("nope"), &Manifests::default()).await.unwrap_err();
    assert!(matches!(error, LoadError::Io { .. }), "{error}");
}
