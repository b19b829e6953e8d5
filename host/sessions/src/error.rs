//! How a session call fails: bad input, the store, a refusal, an unknown grant or agent.

use tollgate_engine::session::EngineError;
use tollgate_store::StoreError;

use crate::rights::Denied;

/// A client call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The input was refused; nothing was written.
    #[error(transparent)]
    BadInput(#[from] EngineError),
    /// The caller may not make the call; nothing was read for it or written.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The session has no grant in force for the tool (none made, or revoked); nothing was written.
    #[error("session `{session_id}` has no grant in force for tool `{tool}`")]
    GrantNotFound {
        /// The session.
        session_id: String,
        /// The tool.
        tool: String,
    },
    /// A client's call key names a stored call with other arguments; nothing was written.
    #[error("session `{session_id}` holds a call with other arguments under the same key")]
    KeyReused {
        /// The call's session.
        session_id: String,
    },
    /// The session holds no image of that digest.
    #[error("session `{session_id}` holds no image {digest}")]
    MediaNotFound {
        /// The session.
        session_id: String,
        /// The digest asked for.
        digest: String,
    },
    /// No agent the store knows fits what a new session asked for (named none of several, an
    /// unknown name, a digest no Worker loaded or loaded unlocked); nothing was written.
    #[error("{0}")]
    AgentUnavailable(String),
    /// The turn asked for cannot be forked at (no such turn, still running, waiting for
    /// approval, open tasks, no stored answer); nothing was written.
    #[error("session `{session_id}` cannot be forked there: {refusal}")]
    ForkRefused {
        /// The original.
        session_id: String,
        /// Why.
        refusal: tollgate_engine::session::fork::ForkRefusal,
    },
}
