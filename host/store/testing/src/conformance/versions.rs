//! The conformance cases of [`tollgate_store::versions::AgentVersions`]: versions pushed once by content,
//! numbered per agent, promoted and rolled back, and bad bundles refused whole.

use super::{Harness, j};
use tollgate_store::versions::{MAX_BUNDLE_FILE, file_digest};
use tollgate_store::*;

fn bundle(name: &str, digest: &str, files: &[(&str, &[u8])]) -> NewVersion {
    NewVersion {
        name: name.into(),
        digest: digest.into(),
        files: files.iter().map(|(path, bytes)| ((*path).to_owned(), bytes.to_vec())).collect(),
        pushed_by: "carl".into(),
    }
}

pub(super) async fn a_pushed_bundle_is_a_numbered_version_kept_once_by_content_and_the_first_is_current(
    h: Harness,
) {
    let v = h.store.versions();
    let first =
        bundle("support", "sha256:one", &[("tollgate.toml", b"[agent]\n"), ("tools/a.wasm", b"wasm")]);
    assert_eq!(
        v.push_version(first.clone()).await.unwrap(),
        Pushed { version: 1, created: true, current: true }
    );
    assert_eq!(
        v.push_version(first).await.unwrap(),
        Pushed { version: 1, created: false, current: true },
        "the same bundle again is the same version"
    );
    let second =
        bundle("support", "sha256:two", &[("tollgate.toml", b"[agent]\n# 2\n"), ("tools/a.wasm", b"wasm")]);
    assert_eq!(v.push_version(second).await.unwrap(), Pushed { version: 2, created: true, current: false });
    let other = bundle("billing", "sha256:one", &[("tollgate.toml", b"[agent]\n")]);
    assert_eq!(v.push_version(other).await.unwrap().version, 1, "numbered per agent");
    // A session of support on version 1.
    let session = NewSession {
        session_id: "s".into(),
        status: "idle".into(),
        run_state: j(r#"{"version":1}"#),
        agent: Some(AgentDigest { digest: "sha256:one".into(), pinned: true }),
        agent_name: Some("support".into()),
    };
    h.store.create_session(session).await.unwrap();
    let listed = v.agent_versions("support").await.unwrap();
    let rows: Vec<(i64, &str, bool, i64, &str)> = listed
        .iter()
        .map(|x| (x.version, x.digest.as_str(), x.current, x.sessions, x.pushed_by.as_str()))
        .collect();
    assert_eq!(rows, [(1, "sha256:one", true, 1, "carl"), (2, "sha256:two", false, 0, "carl")]);
    assert!(listed[0].pushed_at > 0 && listed[1].pushed_at >= listed[0].pushed_at);
    let wasm = &listed[1].files["tools/a.wasm"];
    assert_eq!(wasm, &file_digest(b"wasm"));
    assert_eq!(listed[0].files["tools/a.wasm"], *wasm, "one file, two versions");
    assert_eq!(v.bundle_file(wasm).await.unwrap().as_deref(), Some(&b"wasm"[..]));
    assert_eq!(v.bundle_file("sha256:none").await.unwrap(), None);
    assert_eq!(
        v.agent_version("support", None).await.unwrap().map(|x| x.version),
        Some(1),
        "the current one"
    );
    assert_eq!(
        v.agent_version("support", Some(2)).await.unwrap().map(|x| x.digest),
        Some("sha256:two".into())
    );
    assert_eq!(v.agent_version("support", Some(3)).await.unwrap(), None);
    assert_eq!(v.agent_version("nobody", None).await.unwrap(), None);
    assert!(v.agent_versions("nobody").await.unwrap().is_empty());
}

pub(super) async fn promote_and_rollback_change_what_new_sessions_get_and_refuse_what_does_not_exist(
    h: Harness,
) {
    let v = h.store.versions();
    for (digest, text) in [("sha256:one", b"1"), ("sha256:two", b"2"), ("sha256:three", b"3")] {
        v.push_version(bundle("support", digest, &[("tollgate.toml", text)])).await.unwrap();
    }
    let refused = v.rollback("support").await;
    assert!(
        matches!(&refused, Err(StoreError::Invalid { what }) if what.contains("no earlier")),
        "{refused:?}"
    );
    assert_eq!(v.promote("support", 3, None).await.unwrap(), Promoted { from: Some(1), to: 3 });
    assert_eq!(
        v.promote("support", 3, None).await.unwrap(),
        Promoted { from: Some(3), to: 3 },
        "already current"
    );
    assert_eq!(v.agent_version("support", None).await.unwrap().unwrap().digest, "sha256:three");
    let missing = v.promote("support", 9, None).await;
    assert!(
        matches!(&missing, Err(StoreError::Invalid { what }) if what.contains("no version 9")),
        "{missing:?}"
    );
    assert!(matches!(v.promote("nobody", 1, None).await, Err(StoreError::Invalid { .. })));
    assert_eq!(v.agent_version("support", None).await.unwrap().unwrap().version, 3, "nothing changed");
    // A canary: 10 % of new sessions get version 2; current stays 3.
    assert_eq!(v.promote("support", 2, Some(10)).await.unwrap(), Promoted { from: Some(3), to: 2 });
    let rollout = v.rollout("support").await.unwrap().expect("versions");
    assert_eq!(
        rollout,
        Rollout { current: (3, "sha256:three".into()), canary: Some((2, "sha256:two".into(), 10)) }
    );
    let shares: Vec<(i64, bool, Option<i64>)> = v
        .agent_versions("support")
        .await
        .unwrap()
        .iter()
        .map(|x| (x.version, x.current, x.canary_share))
        .collect();
    assert_eq!(shares, [(1, false, None), (2, false, Some(10)), (3, true, None)]);
    for (version, share, why) in [(3, 50, "current already"), (2, 0, "1 to 99"), (2, 100, "100: promote it")]
    {
        let refused = v.promote("support", version, Some(share)).await;
        assert!(matches!(&refused, Err(StoreError::Invalid { what }) if what.contains(why)), "{refused:?}");
    }
    assert_eq!(v.rollout("support").await.unwrap().unwrap().canary.map(|c| c.2), Some(10), "unchanged");
    // Promoted in full, the canary is over.
    v.promote("support", 2, None).await.unwrap();
    assert_eq!(
        v.rollout("support").await.unwrap().unwrap(),
        Rollout { current: (2, "sha256:two".into()), canary: None }
    );
    assert_eq!(v.rollback("support").await.unwrap(), Promoted { from: Some(2), to: 3 });
    assert_eq!(v.rollback("support").await.unwrap(), Promoted { from: Some(3), to: 2 }, "and back again");
    v.promote("support", 1, None).await.unwrap();
    assert_eq!(v.agent_version("support", None).await.unwrap().unwrap().version, 1);
    let current: Vec<bool> = v.agent_versions("support").await.unwrap().iter().map(|x| x.current).collect();
    assert_eq!(current, [true, false, false]);
    assert_eq!(v.rollout("nobody").await.unwrap(), None);
}

pub(super) async fn a_bundle_the_store_cannot_keep_is_refused_naming_the_file_and_nothing_is_stored(
    h: Harness,
) {
    let v = h.store.versions();
    let big = vec![0u8; MAX_BUNDLE_FILE + 1];
    let cases: Vec<(NewVersion, &str)> = vec![
        (
            bundle("support", "sha256:x", &[("../escape.wasm", b"x")]),
            "\"../escape.wasm\" is not a bundle path",
        ),
        (bundle("support", "sha256:x", &[("/etc/passwd", b"x")]), "is not a bundle path"),
        (bundle("support", "sha256:x", &[("tools//a.wasm", b"x")]), "is not a bundle path"),
        (bundle("support", "sha256:x", &[("tools\\a.wasm", b"x")]), "is not a bundle path"),
        (bundle("support", "sha256:x", &[("tools/big.wasm", &big)]), "tools/big.wasm is"),
        (bundle("support", "sha256:x", &[]), "a bundle has 1 to"),
        (bundle("support@2", "sha256:x", &[("a", b"x")]), "agent name"),
        (bundle("support", "", &[("a", b"x")]), "digest"),
        (
            NewVersion { pushed_by: String::new(), ..bundle("support", "sha256:x", &[("a", b"x")]) },
            "who pushed",
        ),
    ];
    for (new, why) in cases {
        let refused = v.push_version(new).await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid { what }) if what.contains(why)),
            "{why}: {refused:?}"
        );
    }
    assert!(v.agent_versions("support").await.unwrap().is_empty(), "nothing was stored");
    assert_eq!(v.bundle_file(&file_digest(b"x")).await.unwrap(), None, "no file either");
}
