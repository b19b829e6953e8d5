//! Session grants ("allow for this session"): an approval decided with `scope: "session"` lets
//! the same tool's later calls in the session skip the interrupt. Pure: which grants a session
//! has ([`session_grants`]), which one covers a tool ([`active_grant`]), and the item that
//! revokes one ([`revocation_item`]).
//!
//! Where they live: the granting call's record carries its [`GrantRef`] (`grants_session`,
//! written by the `AwaitToolApproval` step that applies the decision), and a revocation is a
//! `grant_revoked` item (written by the API like a message, with no wake), naming the decisions it
//! revokes. So neither the API nor the Worker rewrites the run state for a grant, and a
//! revocation cannot be lost to a step committing a run state read before it.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::turn::HistoryItem;
use super::{CallEntry, EngineError, ItemKind, NewItem, raw};

/// A session grant: who allowed a tool for the rest of the session, when, and by which decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRef {
    /// The tool its later calls skip approval for.
    pub tool_name: String,
    /// The principal who decided with `scope: "session"`.
    pub granted_by: String,
    /// When (ms since the epoch, the deciding process's clock).
    pub granted_at: i64,
    /// The decision: the interrupt decided (its audit row names it too).
    pub decision_id: String,
}

/// A grant's revocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// Who revoked it.
    pub revoked_by: String,
    /// When (ms since the epoch, the revoking process's clock).
    pub revoked_at: i64,
}

/// A grant as the snapshot lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionGrant {
    /// The grant.
    pub grant: GrantRef,
    /// Its revocation, if revoked.
    pub revoked: Option<Revocation>,
}

#[derive(Deserialize)]
struct RevokedBody {
    decision_ids: Vec<String>,
    revoked_by: String,
    revoked_at: i64,
}

/// Every grant of the session (`calls` its deferred calls, `items` its items), revoked or not,
/// oldest first.
///
/// # Errors
/// A `grant_revoked` item that does not parse.
pub fn session_grants(
    items: &[HistoryItem<'_>],
    calls: &[CallEntry],
) -> Result<Vec<SessionGrant>, EngineError> {
    let mut revoked: Vec<(String, Revocation)> = Vec::new();
    for item in items.iter().filter(|i| i.kind == Some(ItemKind::GrantRevoked)) {
        let body: RevokedBody = serde_json::from_str(item.body).map_err(|e| EngineError::Corrupt {
            what: format!("grant revocation item {}", item.seq),
            reason: e.to_string(),
        })?;
        for id in body.decision_ids {
            revoked
                .push((id, Revocation { revoked_by: body.revoked_by.clone(), revoked_at: body.revoked_at }));
        }
    }
    let mut grants: Vec<SessionGrant> = calls
        .iter()
        .filter_map(|call| call.grants_session.clone())
        .map(|grant| {
            let revoked = revoked.iter().find(|(id, _)| *id == grant.decision_id).map(|(_, r)| r.clone());
            SessionGrant { grant, revoked }
        })
        .collect();
    grants.sort_by_key(|g| g.grant.granted_at);
    Ok(grants)
}

/// The grant that covers `tool`'s calls now: its latest grant not revoked.
pub fn active_grant<'a>(grants: &'a [SessionGrant], tool: &str) -> Option<&'a GrantRef> {
    grants.iter().rev().filter(|g| g.revoked.is_none()).map(|g| &g.grant).find(|g| g.tool_name == tool)
}

/// The `grant_revoked` item that revokes every active grant of `tool`, or `None` when it has none.
pub fn revocation_item(grants: &[SessionGrant], tool: &str, revocation: &Revocation) -> Option<NewItem> {
    let ids: Vec<&str> = grants
        .iter()
        .filter(|g| g.revoked.is_none() && g.grant.tool_name == tool)
        .map(|g| g.grant.decision_id.as_str())
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some(NewItem {
        kind: ItemKind::GrantRevoked,
        uuid: None,
        turn_id: None,
        body: raw(&json!({
            "kind": ItemKind::GrantRevoked,
            "tool_name": tool,
            "decision_ids": ids,
            "revoked_by": revocation.revoked_by,
            "revoked_at": revocation.revoked_at,
        })),
    })
}
