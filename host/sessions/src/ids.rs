//! Ids and client keys: what a session id, interrupt id or idempotency key may be, and fresh ones.

use tollgate_engine::session::EngineError;

/// Refuses a client (idempotency) key that is not 1–200 of letters, digits and `-_.:/@`, naming
/// `field` (the body's `client_key` or the `Idempotency-Key` header).
///
/// # Errors
/// The key's fault, by `field`.
pub fn check_client_key(field: &'static str, key: &str) -> Result<(), EngineError> {
    check_id(field, key)
}

/// Session ids, interrupt ids and client keys: 1–200 bytes of letters, digits and `-_.:/@`.
pub(crate) fn check_id(field: &'static str, id: &str) -> Result<(), EngineError> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(EngineError::BadInput {
            field,
            reason: format!("{id:?} must be 1 to 200 characters of letters, digits and -_.:/@"),
        })
    }
}

pub(crate) fn fresh_key() -> String {
    format!("auto:{}", random_id())
}

/// 128 random bits as 32 hex digits: an id no other process mints, whatever its pid and clock
/// (two API replicas in containers are both pid 1, and a key or session id is idempotent: a
/// collision would hand one caller the other's message or session).
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random number generator failed");
    hex::encode(bytes)
}
