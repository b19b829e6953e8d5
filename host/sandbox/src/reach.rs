//! Whether a call may have taken effect outside the sandbox: [`Reach`], and the per-call log the
//! store's hooks write it into ([`ReachLog`]).
//!
//! A call of a tool that failed either may have done something (sent a refund, then thrown on the
//! answer) or provably did nothing outside itself (its payments service refused the connection).
//! The host records the first `outcome_unknown` for a write and the second a plain failure, so the
//! sandbox watches every way out of a call:
//!
//! | way out | counts as "may have left" |
//! | --- | --- |
//! | a `wasi:http` request the allow-list admits | once its connection is open (the request is then written to it), or when the call ends with it still under way; not when opening the connection failed (refused, unreachable, no such host, a TLS handshake that failed, a connect timeout) |
//! | a `wasi:http` request the allow-list denies | never: it is refused before any connection |
//! | a `wasi:sockets` TCP connect the grants admit | from the attempt on: the sandbox does not see whether it succeeded |
//! | a writable `[[dirs]]` grant | always: the sandbox does not watch the writes |
//!
//! Everything else a guest can do (logs, config reads, clocks, random numbers, stderr) stays in
//! the host.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether anything a call did may have reached outside the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Nothing it did left this machine: no request was sent, no connection made, no granted
    /// directory could be written. A failure of such a call provably had no effect.
    Contained,
    /// Something may have left: a request was sent (or was under way when the call ended), a TCP
    /// connect was attempted, or the component may write a granted directory.
    MayHaveLeft,
}

/// What one call's hooks saw. Cheap to clone: the clones share it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReachLog {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Something may have left.
    left: AtomicBool,
    /// Requests whose connection is being opened: not left yet, not known to have failed.
    opening: AtomicUsize,
}

impl ReachLog {
    /// Something may have left.
    pub(crate) fn mark_left(&self) {
        self.inner.left.store(true, Ordering::SeqCst);
    }

    /// A request's connection starts opening. Settle the returned guard with what came of it;
    /// dropped unsettled (the call ended first), it counts as left.
    pub(crate) fn opening(&self) -> Opening {
        self.inner.opening.fetch_add(1, Ordering::SeqCst);
        Opening { log: self.clone(), settled: false }
    }

    /// What the call may have done, as of now. A request still opening counts as left: its
    /// connection may be up by the time anyone acts on the answer.
    pub(crate) fn reach(&self) -> Reach {
        if self.inner.left.load(Ordering::SeqCst) || self.inner.opening.load(Ordering::SeqCst) > 0 {
            Reach::MayHaveLeft
        } else {
            Reach::Contained
        }
    }
}

/// A request whose connection is being opened ([`ReachLog::opening`]).
#[derive(Debug)]
pub(crate) struct Opening {
    log: ReachLog,
    settled: bool,
}

impl Opening {
    /// The request was sent (`true`), or opening its connection failed before anything of it was
    /// written (`false`).
    pub(crate) fn settle(mut self, sent: bool) {
        if sent {
            self.log.mark_left();
        }
        self.settled = true;
        self.log.inner.opening.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.settled {
            self.log.mark_left();
            self.log.inner.opening.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Whether a failure of the host's HTTP client means the request never left: it happened while
/// the connection was being opened (the connect, a connect timeout, the TLS handshake, a host
/// name that is not one), before any byte of the request was written.
pub(crate) fn never_sent(error: &wasmtime_wasi_http::Error) -> bool {
    use wasmtime_wasi_http::Error;
    matches!(
        error,
        Error::Connect(_)
            | Error::ConnectionTimeout
            | Error::Tls(_)
            | Error::InvalidDnsNameError(_)
            | Error::HttpRequestUriInvalid
            | Error::HttpRequestDenied
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_log_is_contained_and_a_mark_makes_it_may_have_left() {
        let log = ReachLog::default();
        assert_eq!(log.reach(), Reach::Contained);
        log.clone().mark_left();
        assert_eq!(log.reach(), Reach::MayHaveLeft, "clones share the log");
    }

    #[test]
    fn a_request_counts_from_its_connection_and_one_cut_off_counts_as_left() {
        let log = ReachLog::default();
        let refused = log.opening();
        assert_eq!(log.reach(), Reach::MayHaveLeft, "under way");
        refused.settle(false);
        assert_eq!(log.reach(), Reach::Contained, "its connection was refused");
        log.opening().settle(true);
        assert_eq!(log.reach(), Reach::MayHaveLeft);

        let cut_off = ReachLog::default();
        drop(cut_off.opening());
        assert_eq!(cut_off.reach(), Reach::MayHaveLeft, "the call ended while it was opening");
    }

    #[test]
    fn only_failures_to_open_the_connection_mean_the_request_never_left() {
        use wasmtime_wasi_http::Error;
        let refused = Error::Connect(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(never_sent(&refused));
        assert!(never_sent(&Error::ConnectionTimeout));
        assert!(never_sent(&Error::HttpRequestDenied));
        assert!(!never_sent(&Error::ConnectionReadTimeout), "the request was written");
        assert!(!never_sent(&Error::HttpResponseTimeout));
        assert!(!never_sent(&Error::ConnectionTerminated));
    }
}
