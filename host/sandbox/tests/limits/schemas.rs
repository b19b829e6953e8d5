//! Input schemas built to explode the validator, each refused at load with an error naming the
//! file, the tool and the bound. Before: 24 levels of `allOf` of two `$ref`s → one call with `{}`
//! took 41.6 s and 14.2 GB; a 100,000-long `$ref` chain → 75 s to load; a 100 MB schema → 5.2 GB
//! at every load.

use std::time::{Duration, Instant};

use tollgate_sandbox::{LoadError, Manifests};

use crate::util::{ToolsDir, sandbox};
use crate::{assert_a_working_call_follows, memory_growth, serial};

const MB: u64 = 1 << 20;

/// Loads the hostile guest with `HOSTILE_SCHEMA = kind` and returns the load error.
async fn load_refused(kind: &str, memory_mb: u32) -> (LoadError, Duration, u64) {
    let manifest =
        format!("memory_mb = {memory_mb}\ntimeout_ms = 20000\n[config]\nHOSTILE_SCHEMA = \"{kind}\"\n");
    let dir =
        ToolsDir::new().component("hostile", tollgate_test_guests::HOSTILE).manifest("hostile", &manifest);
    let started = Instant::now();
    let (result, growth) =
        memory_growth(async || sandbox().load_tools(&dir.tools(), &Manifests::default()).await).await;
    let took = started.elapsed();
    match result {
        Ok(_) => panic!("a schema `{kind}` loaded"),
        Err(error) => (error, took, growth),
    }
}

#[tokio::test]
async fn hostile_schemas_are_refused_at_load_naming_the_file_the_tool_and_the_bound() {
    let _serial = serial().await;
    for (kind, memory_mb, bound) in [
        ("allof:24", 16, "expands to more than 20000 subschemas"),
        ("chain:100000", 64, "more than the limit of 256 KiB"),
        ("chain:2000", 16, "2001 `$ref`s, more than the limit of 1000"),
        ("chain:800", 16, "more than 64 subschemas deep"),
        ("cycle", 16, "`$ref` cycle that never moves into the value"),
    ] {
        let (error, took, growth) = load_refused(kind, memory_mb).await;
        let text = error.to_string();
        assert!(matches!(error, LoadError::BadTool { .. }), "{kind}: {text}");
        assert!(
            text.contains("hostile.wasm") && text.contains("tool `shape_shifter`") && text.contains(bound),
            "{kind}: {text}"
        );
        eprintln!("schema {kind}: refused after {took:?}, host memory grew by {} MiB", growth / MB);
        assert!(took < Duration::from_secs(10), "{kind}: refused after {took:?}");
        assert!(growth < 200 * MB, "{kind}: the host grew by {} MiB", growth / MB);
    }
    assert_a_working_call_follows().await;
}

#[tokio::test]
async fn a_hundred_megabyte_schema_is_refused_before_it_is_parsed() {
    let _serial = serial().await;
    let (error, took, growth) = load_refused("huge:100", 256).await;
    let text = error.to_string();
    assert!(
        text.contains("hostile.wasm")
            && text.contains("tool `shape_shifter`")
            && text.contains("its input schema is 102401 KiB, more than the limit of 256 KiB"),
        "{text}"
    );
    eprintln!("schema huge:100: refused after {took:?}, host memory grew by {} MiB", growth / MB);
    assert!(took < Duration::from_secs(10), "refused after {took:?}");
    // The guest's own 256 MiB and the one copy of its answer the host must read; not the 5.2 GB
    // parsing it took.
    assert!(growth < 600 * MB, "the host grew by {} MiB", growth / MB);
    assert_a_working_call_follows().await;
}

#[tokio::test]
async fn a_schema_within_the_bounds_loads_and_validates_well_within_the_deadline() {
    let _serial = serial().await;
    let manifest = "timeout_ms = 2000\n[config]\nHOSTILE_SCHEMA = \"allof:12\"\n";
    let dir =
        ToolsDir::new().component("hostile", tollgate_test_guests::HOSTILE).manifest("hostile", manifest);
    let tools = dir.load().await;
    let started = Instant::now();
    assert_eq!(tools.call("shape_shifter", "{}", None).await.unwrap().text(), "shape ok");
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2000 + 3000), "the call took {took:?}");
    // Arguments too large for this schema's expansion are refused before validation starts.
    let big = format!("{{\"items\":[{}]}}", ["0"; 5000].join(","));
    let error = tools.call("shape_shifter", &big, None).await.unwrap_err();
    assert!(error.to_string().contains("validation budget"), "{error}");
    assert_a_working_call_follows().await;
}
