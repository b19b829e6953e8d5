//! The symbolic links a tool may make in a writable `[[dirs]]` grant: only links that point down
//! from their own folder. Read [`refusal`] (the rule, pure) first, then [`refuse_links_out`] (where
//! it is enforced).
//!
//! The sandbox never follows a link out of a grant, but the folder outlives the call: the agent's
//! processes, the operator's scripts and anything else that reads it would follow
//! `report -> ../../../../etc/passwd`. So the link is refused when it is made, in the host's
//! `wasi:filesystem` `symlink-at` (the one call that creates links; std's `symlink`, WASI preview
//! 1's `path_symlink` through the adapter, and every language's runtime reach it): the call
//! fails with `not-permitted`, nothing is written, and the host logs what was refused.
//!
//! | target | made? |
//! | --- | --- |
//! | `runs/42`, `.`, `./report.txt` | yes: it points at the link's own folder or below |
//! | `/etc/passwd` | no: an absolute target is a path on the host (wasmtime refuses it too) |
//! | `..`, `../../../../etc/passwd`, `runs/../..` | no: it climbs |
//! | `../sibling/file` | no, though it lands inside the grant today |
//!
//! Why every `..` and not only the ones that climb out: a link keeps its text when it moves,
//! and a tool may rename the link, or a folder above it, to a shallower place (or hard-link it
//! there): `/out/a/up -> ..` is `/out` until it is renamed `/out/up`, then it is the grant's
//! parent. A link without `..` points below its own folder wherever it is moved inside a grant, and
//! so do the links it passes through, so the rule holds without tracking where links sit or
//! watching renames, without a window during the call in which the link exists, and after a
//! Worker is killed mid-call (a sweep at the end of the call would have none of these).

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{ErrorCode, Host as _, HostDescriptor as _};

use crate::state::{HostState, escape_controls};

/// The `wasi:filesystem` interface, at the version wasmtime-wasi links, whose `symlink-at` is
/// replaced. Components importing any 0.2.x version are linked to it.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";
/// The function of [`FILESYSTEM_TYPES`] that makes a symbolic link.
const SYMLINK_AT: &str = "[method]descriptor.symlink-at";

/// Why a link whose content is `target` may not be made, or `None` when it may.
pub(crate) fn refusal(target: &str) -> Option<&'static str> {
    if target.is_empty() {
        Some("an empty target")
    } else if target.starts_with('/') {
        Some("an absolute target is a path on the host, outside the grant")
    } else if target.split('/').any(|part| part == "..") {
        Some("a target with `..` climbs (a link may point only at its own folder or below)")
    } else {
        None
    }
}

/// Replaces `symlink-at` in `linker` (which has WASI 0.2 linked) by a check of [`refusal`]
/// before wasmtime-wasi's own, which still applies every other rule (writable grant, paths
/// inside it).
pub(crate) fn refuse_links_out(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    // A second definition is refused unless there was no first: then wasmtime-wasi links another
    // version of the interface, and a guard here would guard nothing.
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    if types.func_wrap(SYMLINK_AT, |_: StoreContextMut<'_, HostState>, (): ()| Ok(())).is_ok() {
        return Err(wasmtime::format_err!(
            "wasmtime-wasi does not link `{FILESYSTEM_TYPES}`: name the version it links in `links.rs`"
        ));
    }
    linker.allow_shadowing(true);
    let defined = linker.instance(FILESYSTEM_TYPES)?.func_wrap_async(
        SYMLINK_AT,
        |mut store, (dir, target, link): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                if let Some(reason) = refusal(&target) {
                    tracing::warn!(
                        component = store.data().component(),
                        link = %escape_controls(&link),
                        target = %escape_controls(&target),
                        "symbolic link refused: {reason}"
                    );
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let mut filesystem = store.data_mut().filesystem();
                let made = match filesystem.symlink_at(dir, target, link).await {
                    Ok(()) => Ok(()),
                    Err(error) => Err(filesystem.convert_error_code(error)?),
                };
                Ok((made,))
            })
        },
    );
    linker.allow_shadowing(false);
    defined
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_that_point_down_from_their_folder_are_made() {
        for target in ["runs/42", ".", "./report.txt", "a/./b", "a//b", "..hidden", "a/..b/c", "x/y.."] {
            assert_eq!(refusal(target), None, "{target}");
        }
        for (target, reason) in [
            ("..", "climbs"),
            ("../../../../etc/passwd", "climbs"),
            ("runs/../..", "climbs"),
            ("../sibling/file", "climbs"),
            ("a/../b", "climbs"),
            ("./..", "climbs"),
            ("a/..", "climbs"),
            ("/etc/passwd", "absolute"),
            ("/", "absolute"),
            ("", "empty"),
        ] {
            let refused = refusal(target).unwrap_or_else(|| panic!("`{target}` was allowed"));
            assert!(refused.contains(reason), "{target}: {refused}");
        }
    }
}
