//! No code: a dependency of the `tollgate` binary that turns on, for every build, the features the
//! test build's dev-dependencies turn on (see its `Cargo.toml`). Then `scripts/demo.sh`'s
//! `cargo build -p tollgate` and `scripts/test.sh`'s `cargo test` resolve one feature set, and the
//! second compiles only the workspace's own crates and test targets.
//!
//! The test below compares the two builds' feature sets with `cargo tree`.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::process::Command;

    /// `package → features` of a `cargo tree` over `args`.
    fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let output = Command::new(cargo)
            .current_dir(root)
            .args(["tree", "--locked", "--offline", "--prefix", "none", "--format", "{p}|{f}"])
            .args(args)
            .output()
            .expect("cargo tree runs");
        assert!(output.status.success(), "cargo tree {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Some((package, features)) = line.trim_end_matches(" (*)").split_once('|') else { continue };
            let package = package.replace(" (proc-macro)", "");
            map.entry(package)
                .or_default()
                .extend(features.split(',').filter(|f| !f.is_empty()).map(str::to_owned));
        }
        map
    }

    #[test]
    fn the_demo_build_and_the_test_build_resolve_one_feature_set() {
        let demo = features(&["-p", "tollgate", "-e", "normal,build"]);
        let tests = features(&["-e", "normal,build,dev"]);
        let differing: Vec<String> = demo
            .iter()
            .filter(|(package, _)| !package.starts_with("tollgate"))
            .filter_map(|(package, wanted)| {
                let more: Vec<&String> = tests.get(package)?.difference(wanted).collect();
                (!more.is_empty()).then(|| format!("{package}: the test build adds {more:?}"))
            })
            .collect();
        assert!(
            differing.is_empty(),
            "these dependencies would compile twice (once for the demo, once for the tests); add the \
             features to host/workspace-hack/Cargo.toml:\n{}",
            differing.join("\n")
        );
    }
}
