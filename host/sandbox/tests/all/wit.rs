//! The published WIT versions are frozen: `tollgate:tool@0.1.0` and `tollgate:agent@0.1.0` may not
//! change, because components built against them are in the wild. A change belongs in a new
//! version (kept beside the old one while the host binds both, STYLE.md rule 11).

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
    assert_eq!(checked, 9, "every .wit file of both packages is listed in wit/FROZEN.sha256");
}
