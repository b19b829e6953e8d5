//! The published WIT versions are frozen: `tollgate:tool@0.1.0`, `tollgate:agent@0.1.0` and
//! `tollgate:agent@0.2.0` may not change, because components built against them are in the wild.
//! A change belongs in a new version (kept beside the old one while the host binds both).

use std::path::Path;

use sha2::{Digest, Sha256};

#[test]
fn the_published_wit_files_are_unchanged() {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
    let frozen = std::fs::read_to_string(wit.join("FROZEN.sha256")).unwrap();
    let mut checked = 0;
    for line in frozen.lines() {
        let (hash, file) = line.split_once("  ").expect("`<sha256>  <path>` per line");
        let text = std::fs::read(wit.join(file)).unwrap_or_else(|e| panic!("wit/{file}: {e}"));
        let actual = hex::encode(Sha256::digest(&text));
        assert_eq!(
            actual, hash,
            "wit/{file} changed, but its package version is published and frozen: put the change in a new \
             version (and keep this one while the host binds it)"
        );
        checked += 1;
    }
    assert_eq!(checked, 14, "every .wit file of the frozen packages is listed in wit/FROZEN.sha256");
}

/// The WASI WIT the Go, JavaScript and Python SDKs build against is one copy,
/// `guest-sdk/wasi-wit/`, byte for byte what the `wasmtime-wasi` and `wasmtime-wasi-http` crates
/// of `Cargo.lock` ship (the WIT the host links; `scripts/vendor-wasi-wit.sh` re-vendors it), and
/// each SDK's `wit/deps/wasi-*.wit` is a link to that copy.
#[test]
fn the_vendored_wasi_wit_is_one_copy_of_what_the_host_links() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
    let crate_dir = |name: &str| {
        let entry = format!("[[package]]\nname = \"{name}\"\nversion = \"");
        let at = lock.find(&entry).unwrap_or_else(|| panic!("{name} is not in Cargo.lock")) + entry.len();
        let version = &lock[at..at + lock[at..].find('"').unwrap()];
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(".cargo"), Into::into);
        std::fs::read_dir(cargo_home.join("registry/src"))
            .unwrap()
            .flatten()
            .map(|index| index.path().join(format!("{name}-{version}")))
            .find(|dir| dir.is_dir())
            .unwrap_or_else(|| panic!("the sources of {name} {version} are not in the cargo registry"))
    };
    let (wasi, http) = (crate_dir("wasmtime-wasi"), crate_dir("wasmtime-wasi-http"));
    let mut sources: Vec<_> = ["cli", "clocks", "filesystem", "io", "random", "sockets"]
        .map(|n| wasi.join(format!("src/p2/wit/deps/{n}.wit")))
        .into();
    sources.push(http.join("wit/deps/http.wit"));

    let copy = root.join("guest-sdk/wasi-wit");
    let mut expected = std::collections::BTreeSet::new();
    for source in &sources {
        let text = std::fs::read_to_string(source).unwrap();
        let package = text
            .lines()
            .find_map(|line| line.strip_prefix("package wasi:")?.strip_suffix(';'))
            .unwrap_or_else(|| panic!("no `package wasi:…;` line in {}", source.display()));
        let name = format!("wasi-{package}.wit");
        let vendored = std::fs::read_to_string(copy.join(&name))
            .unwrap_or_else(|e| panic!("guest-sdk/wasi-wit/{name}: {e}; run scripts/vendor-wasi-wit.sh"));
        assert!(
            vendored == text,
            "guest-sdk/wasi-wit/{name} differs from {}: run scripts/vendor-wasi-wit.sh",
            source.display()
        );
        expected.insert(name);
    }
    let listed = |dir: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("wasi-"))
            .collect()
    };
    assert_eq!(listed(&copy), expected, "guest-sdk/wasi-wit holds exactly the host's WASI packages");
    for lang in ["go", "js", "python"] {
        let deps = root.join(format!("guest-sdk/{lang}/wit/deps"));
        assert_eq!(listed(&deps), expected, "guest-sdk/{lang}/wit/deps");
        for name in &expected {
            let link = deps.join(name);
            let is_link = std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink();
            assert!(is_link, "guest-sdk/{lang}/wit/deps/{name} is a copy, not a link to guest-sdk/wasi-wit");
            assert_eq!(link.canonicalize().unwrap(), copy.join(name).canonicalize().unwrap());
        }
    }
}
