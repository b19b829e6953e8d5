//! Named gates that `pause <gate>` requests wait at until the test opens them.
//!
//! This module owns the gate table and its wake-ups; the server decides when a request passes a gate.
//! Read [`GateStatus`] first (what a test sees), then `Gates` (crate-private).
//!
//! A gate is created closed by its first mention (a request arriving, a test waiting or opening). Once
//! opened it stays open, so a request the CLI retries passes at once, until [`crate::MockModel::close_gate`].
//!
//! # Caveats
//!
//! A parked request whose client went away may count as parked until the gate opens or the mock shuts
//! down; count on `arrivals`, which only grows, to know a request got there.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// What a test can see of one gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GateStatus {
    /// Whether requests pass without waiting.
    pub open: bool,
    /// Requests that reached the gate so far (parked or passed).
    pub arrivals: u64,
    /// Requests waiting at the gate now.
    pub parked: u64,
}

/// The mock is shutting down: parked requests give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the mock model is shutting down")]
pub(crate) struct ShutDown;

#[derive(Debug, Default)]
struct Table {
    gates: HashMap<String, GateStatus>,
    shut_down: bool,
}

/// The gate table. Every change bumps a watch counter that waiters re-check on.
#[derive(Debug)]
pub(crate) struct Gates {
    table: Mutex<Table>,
    changed: watch::Sender<u64>,
}

impl Gates {
    pub(crate) fn new() -> Self {
        Gates { table: Mutex::new(Table::default()), changed: watch::Sender::new(0) }
    }

    fn update<R>(&self, change: impl FnOnce(&mut Table) -> R) -> R {
        let result = change(&mut self.table.lock().expect("gate table lock"));
        self.changed.send_modify(|version| *version += 1);
        result
    }

    fn read<R>(&self, read: impl FnOnce(&Table) -> R) -> R {
        read(&self.table.lock().expect("gate table lock"))
    }

    pub(crate) fn status(&self, gate: &str) -> GateStatus {
        self.read(|table| table.gates.get(gate).copied().unwrap_or_default())
    }

    pub(crate) fn set_open(&self, gate: &str, open: bool) {
        self.update(|table| table.gates.entry(gate.to_owned()).or_default().open = open);
    }

    /// Makes every parked request, and every later one, give up with [`ShutDown`].
    pub(crate) fn shut_down(&self) {
        self.update(|table| table.shut_down = true);
    }

    /// Arrives at the gate and returns once it is open.
    pub(crate) async fn pass(&self, gate: &str) -> Result<(), ShutDown> {
        let mut changes = self.changed.subscribe();
        let open = self.update(|table| {
            let status = table.gates.entry(gate.to_owned()).or_default();
            status.arrivals += 1;
            if !status.open {
                status.parked += 1;
            }
            status.open
        });
        if open {
            return Ok(());
        }
        // Un-park also when the request is dropped while waiting (its connection closed).
        let _parked = Parked { gates: self, gate };
        loop {
            let (open, shut_down) = self.read(|table| (table.gates[gate].open, table.shut_down));
            if shut_down {
                return Err(ShutDown);
            }
            if open {
                return Ok(());
            }
            // The sender lives in `self`, so `changed` cannot fail while we borrow it.
            let _ = changes.changed().await;
        }
    }

    /// Waits until `until` holds for the gate's status, or the timeout passes.
    pub(crate) async fn wait(
        &self,
        gate: &str,
        timeout: Duration,
        until: impl Fn(&GateStatus) -> bool,
    ) -> Result<GateStatus, GateStatus> {
        let mut changes = self.changed.subscribe();
        let check = async {
            loop {
                let status = self.status(gate);
                if until(&status) {
                    return status;
                }
                let _ = changes.changed().await;
            }
        };
        tokio::time::timeout(timeout, check).await.map_err(|_| self.status(gate))
    }
}

struct Parked<'a> {
    gates: &'a Gates,
    gate: &'a str,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.gates.update(|table| {
            if let Some(status) = table.gates.get_mut(self.gate) {
                status.parked -= 1;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const SOON: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_request_waits_at_a_closed_gate_until_it_opens() {
        let gates = Arc::new(Gates::new());
        let waiter = tokio::spawn({
            let gates = gates.clone();
            async move { gates.pass("g").await }
        });
        let parked = gates.wait("g", SOON, |status| status.parked == 1).await.unwrap();
        assert_eq!(parked, GateStatus { open: false, arrivals: 1, parked: 1 });
        assert!(!waiter.is_finished());
        gates.set_open("g", true);
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(gates.status("g"), GateStatus { open: true, arrivals: 1, parked: 0 });
    }

    #[tokio::test]
    async fn an_open_gate_lets_requests_through_and_still_counts_them() {
        let gates = Gates::new();
        gates.set_open("g", true);
        gates.pass("g").await.unwrap();
        gates.pass("g").await.unwrap();
        assert_eq!(gates.status("g"), GateStatus { open: true, arrivals: 2, parked: 0 });
    }

    #[tokio::test]
    async fn shutting_down_releases_parked_requests_with_an_error() {
        let gates = Arc::new(Gates::new());
        let waiter = tokio::spawn({
            let gates = gates.clone();
            async move { gates.pass("g").await }
        });
        gates.wait("g", SOON, |status| status.parked == 1).await.unwrap();
        gates.shut_down();
        assert_eq!(waiter.await.unwrap(), Err(ShutDown));
        assert_eq!(gates.status("g").parked, 0);
    }

    #[tokio::test]
    async fn waiting_for_a_gate_nobody_reaches_times_out_with_its_status() {
        let gates = Gates::new();
        let status = gates.wait("never", Duration::from_millis(20), |status| status.arrivals > 0).await;
        assert_eq!(status, Err(GateStatus::default()));
    }
}
