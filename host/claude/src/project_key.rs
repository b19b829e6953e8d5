//! The project key: the folder under `CLAUDE_CONFIG_DIR/projects/` that holds a working
//! directory's transcripts (docs/PROTOCOL.md, "Launch"). Pure.
//!
//! Read [`project_key`]. The rule, as the Agent SDKs implement it and the CLI 2.1.328 accepted it
//! for plain, accented, `+`/space/`.` and 304-character paths:
//!
//! ```text
//! key = path with every UTF-16 code unit outside [A-Za-z0-9] replaced by '-'
//! if len(key) > 200: key = key[..200] + "-" + base36(|h|), h = Σ (h*31 + unit) as i32 over the UTF-16 units
//! ```
//!
//! ```
//! use tollgate_claude::project_key::project_key;
//!
//! assert_eq!(project_key("/srv/probe/work/My Proj.v2_ü+x"), "-srv-probe-work-My-Proj-v2---x");
//! ```
//!
//! # Caveats
//!
//! The caller resolves symlinks first (the CLI uses `realpath(cwd)`); this function only maps the
//! text.

/// Keys longer than this are cut and suffixed with a hash.
const MAX_KEY_LEN: usize = 200;

/// The project key of an absolute, already resolved path.
pub fn project_key(path: &str) -> String {
    let units: Vec<u16> = path.encode_utf16().collect();
    let key: String = units
        .iter()
        .map(|&unit| match u8::try_from(unit) {
            Ok(byte) if byte.is_ascii_alphanumeric() => char::from(byte),
            _ => '-',
        })
        .collect();
    if key.len() <= MAX_KEY_LEN {
        return key;
    }
    let mut hash: i32 = 0;
    for &unit in &units {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    format!("{}-{}", &key[..MAX_KEY_LEN], base36(i64::from(hash).unsigned_abs()))
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".to_owned();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_non_alphanumeric_code_unit_becomes_a_dash() {
        assert_eq!(project_key("/tmp/a_b.c"), "-tmp-a-b-c");
        // One non-BMP character is two UTF-16 code units, so two dashes.
        assert_eq!(project_key("/x/😀"), "-x---");
    }

    #[test]
    fn long_keys_are_cut_at_200_and_get_a_base36_hash() {
        let path = format!("/{}", "a".repeat(300));
        let key = project_key(&path);
        assert!(key.starts_with(&format!("-{}", "a".repeat(199))));
        assert_eq!(key.len(), 200 + 1 + key.rsplit('-').next().unwrap().len());
        // Same algorithm in JS: [...path].reduce((h, c) => (h << 5) - h + c.charCodeAt(0) | 0, 0).
        let mut h: i32 = 0;
        for unit in path.encode_utf16() {
            h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
        }
        assert!(key.ends_with(&format!("-{}", base36(i64::from(h).unsigned_abs()))));
    }

    #[test]
    fn base36_matches_javascript() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(2_147_483_648), "zik0zk");
    }
}
