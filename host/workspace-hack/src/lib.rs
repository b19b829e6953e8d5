//! No code: a dependency of the `tollgate` binary that turns on, for every build, the features the
//! test build's dev-dependencies turn on (see its `Cargo.toml`). Then `scripts/demo.sh`'s
//! `cargo build -p tollgate` and `scripts/test.sh`'s `cargo test` resolve one feature set, and the
//! second compiles only the workspace's own crates and test targets.
//!
//! The test below compares the two builds' unit graphs, what cargo compiles and why.

#![forbid(unsafe_code)]

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap, HashSet};
    use std::process::Command;

    use serde_json::Value;

    /// One compiled unit as cargo's fingerprint sees it: its package, features, mode and target,
    /// its profile settings, then the same of every unit it links, by id. A dependency whose own
    /// features match in both builds is still compiled twice when something below it differs (a
    /// proc macro's `serde` on the host side once recompiled `wasmtime` and everything above it).
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Unit {
        /// `crates.io-index#serde@1.0.229`, `api#tollgate-api@0.1.0`: short, and unique.
        package: String,
        features: String,
        /// How, and which target: `build lib serde`, `run-custom-build custom-build build-script-build`.
        what: String,
        profile: String,
        links: Vec<usize>,
    }

    impl Unit {
        fn name(&self) -> String {
            format!("{} [{}] {}", self.package, self.features, self.what)
        }
    }

    /// The units of both builds, each distinct one numbered once.
    #[derive(Default)]
    struct Units {
        ids: HashMap<Unit, usize>,
        all: Vec<Unit>,
    }

    impl Units {
        fn id(&mut self, unit: Unit) -> usize {
            if let Some(id) = self.ids.get(&unit) {
                return *id;
            }
            self.all.push(unit.clone());
            self.ids.insert(unit, self.all.len() - 1);
            self.all.len() - 1
        }

        /// The ids of every unit `cargo <args> --unit-graph` would compile. The unit graph is
        /// unstable; `RUSTC_BOOTSTRAP` lets this one `cargo` call, which compiles nothing, print it.
        fn of_build(&mut self, args: &[&str]) -> HashSet<usize> {
            let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let output = Command::new(cargo)
                .current_dir(root)
                .env("RUSTC_BOOTSTRAP", "1")
                .args(args)
                .args(["--locked", "--offline", "--unit-graph", "-Z", "unstable-options"])
                .output()
                .expect("cargo runs");
            assert!(output.status.success(), "cargo {args:?}: {}", String::from_utf8_lossy(&output.stderr));
            let graph: Value = serde_json::from_slice(&output.stdout).expect("the unit graph is JSON");
            let units = graph["units"].as_array().expect("a list of units");
            let mut ids: Vec<Option<usize>> = vec![None; units.len()];
            // Units in dependency order: each one's dependencies are numbered before it.
            let mut todo: Vec<(usize, bool)> = (0..units.len()).map(|index| (index, false)).collect();
            while let Some((index, expanded)) = todo.pop() {
                if ids[index].is_some() {
                    continue;
                }
                let deps: Vec<usize> = units[index]["dependencies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|dep| dep["index"].as_u64().expect("an index") as usize)
                    .collect();
                if !expanded {
                    todo.push((index, true));
                    todo.extend(deps.iter().map(|dep| (*dep, false)));
                    continue;
                }
                let unit = &units[index];
                let mut profile = unit["profile"].clone();
                // `dev` for the demo, `test` for the tests: the settings are what count.
                profile.as_object_mut().map(|p| p.remove("name"));
                let package = unit["pkg_id"].as_str().unwrap_or_default();
                let mut links: Vec<usize> =
                    deps.iter().map(|dep| ids[*dep].expect("numbered first")).collect();
                links.sort_unstable();
                let unit = Unit {
                    package: package.rsplit_once('/').map_or(package, |(_, last)| last).to_owned(),
                    features: unit["features"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                    what: format!(
                        "{} {} {}",
                        unit["mode"].as_str().unwrap_or_default(),
                        unit["target"]["kind"][0].as_str().unwrap_or_default(),
                        unit["target"]["name"].as_str().unwrap_or_default()
                    ),
                    profile: profile.to_string(),
                    links,
                };
                ids[index] = Some(self.id(unit));
            }
            ids.into_iter().flatten().collect()
        }
    }

    #[test]
    fn the_test_build_compiles_no_dependency_of_the_demo_build_again() {
        let mut units = Units::default();
        let demo = units.of_build(&["build", "-p", "tollgate", "-p", "tollgate-mock-model"]);
        let tests = units.of_build(&["test", "--no-run"]);
        let demo_units: HashSet<(String, &str)> =
            demo.iter().map(|id| (units.all[*id].name(), units.all[*id].profile.as_str())).collect();
        // A crate the demo compiled just so (a dependency, or one of ours), linked here with
        // something else below it.
        let recompiled: BTreeSet<String> = tests
            .difference(&demo)
            .map(|id| &units.all[*id])
            .filter(|unit| demo_units.contains(&(unit.name(), unit.profile.as_str())))
            .map(|unit| {
                let other: Vec<String> = unit
                    .links
                    .iter()
                    .filter(|link| !demo.contains(*link))
                    .map(|link| units.all[*link].name())
                    .collect();
                format!("{} links {}", unit.name(), other.join(", "))
            })
            .collect();
        assert!(
            recompiled.is_empty(),
            "these dependencies would compile twice (once for the demo, once for the tests): the test \
             build links them with something else below; add its features to \
             host/workspace-hack/Cargo.toml ([build-dependencies] for what a proc macro or a build \
             script links):\n{}",
            recompiled.into_iter().collect::<Vec<_>>().join("\n")
        );
    }

    #[test]
    fn the_demo_build_compiles_no_dependency_twice() {
        let mut units = Units::default();
        let demo = units.of_build(&["build", "-p", "tollgate", "-p", "tollgate-mock-model"]);
        let mut seen: HashMap<(&str, &str), Vec<&Unit>> = HashMap::new();
        for id in &demo {
            let unit = &units.all[*id];
            seen.entry((unit.package.as_str(), unit.what.as_str())).or_default().push(unit);
        }
        let twice: BTreeSet<String> = seen
            .into_values()
            .filter(|same| same.len() > 1)
            .map(|same| same.iter().map(|unit| unit.name()).collect::<Vec<_>>().join("\n  and "))
            .collect();
        assert!(
            twice.is_empty(),
            "these dependencies compile twice in the demo build, once for proc macros and build \
             scripts (the host side) and once for the code, with other features or with something \
             else below: give them the same features in both sections of \
             host/workspace-hack/Cargo.toml:\n{}",
            twice.into_iter().collect::<Vec<_>>().join("\n")
        );
    }

    /// The shipped `tollgate` binary links no mock model and no store test harness: the demo and
    /// `tollgate dev` start the mock as its own binary, and only tests link the harness crate.
    #[test]
    fn the_tollgate_binary_links_no_mock_model_and_no_store_test_harness() {
        let tree = cargo_tree(&["-p", "tollgate", "--edges", "normal", "--prefix", "none"]);
        let linked: BTreeSet<&str> = tree.lines().filter_map(|line| line.split_whitespace().next()).collect();
        assert!(linked.contains("tollgate-worker"), "the tree is the binary's: {linked:?}");
        for test_only in ["tollgate-mock-model", "tollgate-store-testing", "tollgate-testing"] {
            assert!(!linked.contains(test_only), "the tollgate binary links {test_only}");
        }
    }

    /// No dependency of the workspace turns on serde_json's `preserve_order`: the house writes its
    /// stored forms (event payloads, approval requests, hook answers) and the OpenAPI document
    /// through serde_json's maps, sorted by key only while that feature is off, and Cargo would
    /// turn it on for the whole build if one crate asked (the ACP SDK does: `vendor/README.md`).
    #[test]
    fn no_dependency_turns_on_serde_jsons_preserve_order() {
        let tree = cargo_tree(&["--workspace", "--edges", "features", "--invert", "serde_json"]);
        assert!(tree.contains("serde_json feature \"default\""), "the tree is serde_json's features: {tree}");
        assert!(
            !tree.contains("serde_json feature \"preserve_order\""),
            "a dependency turns on serde_json's preserve_order (look for what asks for it):\n{tree}"
        );
    }

    /// What `cargo tree --locked --offline` with `args` prints, run at the workspace's root.
    fn cargo_tree(args: &[&str]) -> String {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let output = Command::new(cargo)
            .current_dir(root)
            .args(["tree", "--locked", "--offline"])
            .args(args)
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}
