//! Wake-ups: [`WorkSignal`] tells Workers that a step may be claimable, [`EventSignal`] tells a
//! stream reader that its session has new events.
//!
//! Both are hints. A store bumps them after every commit that queues a step or appends an
//! event: in-process always, and across processes through PostgreSQL `LISTEN/NOTIFY` or, on a
//! SQLite file, a watch of `PRAGMA data_version` (a change wakes every Worker and every reader).
//! A waiter always passes a timeout and then re-reads the database (the poll fallback): a
//! notification can be lost (NOTIFY is not durable), a wake-up never is when the timeout is the
//! poll interval.
//!
//! # Caveats
//!
//! - Subscribe **before** reading: a signal created after a commit does not see it.
//! - [`EventSignal`] wakes for its session only, but every process-wide event passes through one
//!   broadcast channel; a slow reader that lags wakes up (and re-reads) rather than miss one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

/// The sender side, shared by a store's handles and its PostgreSQL listener task.
#[derive(Clone)]
pub(crate) struct Signals {
    work: Arc<watch::Sender<u64>>,
    events: broadcast::Sender<Arc<str>>,
}

/// Sent on the events channel when every session may have news (a reconnected listener).
pub(crate) const ALL_SESSIONS: &str = "*";

impl Signals {
    pub(crate) fn new() -> Self {
        Signals { work: Arc::new(watch::Sender::new(0)), events: broadcast::Sender::new(1024) }
    }
    pub(crate) fn work_ready(&self) {
        self.work.send_modify(|n| *n = n.wrapping_add(1));
    }
    pub(crate) fn events_appended(&self, session_id: &str) {
        // No receiver is not an error: nobody is reading.
        let _ = self.events.send(Arc::from(session_id));
    }
    pub(crate) fn work_signal(&self) -> WorkSignal {
        WorkSignal { rx: self.work.subscribe() }
    }
    pub(crate) fn event_signal(&self, session_id: &str) -> EventSignal {
        EventSignal { rx: self.events.subscribe(), session_id: session_id.to_owned() }
    }
}

/// Wakes a Worker when a step may be claimable. Create it before calling `claim`.
#[derive(Debug)]
pub struct WorkSignal {
    rx: watch::Receiver<u64>,
}

impl WorkSignal {
    /// Waits until a step was queued since the last wait (or since creation), or `timeout`
    /// passed. Returns `true` when woken, `false` on timeout; either way, try to claim.
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        matches!(tokio::time::timeout(timeout, self.rx.changed()).await, Ok(Ok(())))
    }
}

/// Wakes a reader of one session's events, or of every session's when created for the session
/// id `*` (no session has it: ids are letters, digits and `-_.:/@`). Create it before reading the
/// events it has.
#[derive(Debug)]
pub struct EventSignal {
    rx: broadcast::Receiver<Arc<str>>,
    session_id: String,
}

impl EventSignal {
    /// Waits until the session may have new events, or `timeout` passed. Returns `true` when
    /// woken, `false` on timeout; either way, read after your last seq.
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Err(_) => return false,
                Ok(Ok(s))
                    if *s == *self.session_id || *s == *ALL_SESSIONS || *self.session_id == *ALL_SESSIONS =>
                {
                    return true;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
                Ok(Err(broadcast::error::RecvError::Closed)) => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_for_one_session_ignores_others_and_one_for_every_session_wakes_for_any() {
        let signals = Signals::new();
        let mut one = signals.event_signal("a");
        let mut every = signals.event_signal(ALL_SESSIONS);
        signals.events_appended("b");
        assert!(!one.wait(Duration::from_millis(20)).await, "b is not a");
        assert!(every.wait(Duration::from_millis(20)).await, "b is a session");
        signals.events_appended("a");
        assert!(one.wait(Duration::from_millis(20)).await);
        assert!(every.wait(Duration::from_millis(20)).await);
    }
}
