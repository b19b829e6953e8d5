//! Instances prepared in advance of calls, and used ones dropped after them, off the call's path.
//! Read [`Standby`] first, then [`Preparer`].
//!
//! Every tool call needs a fresh instance: a store (WASI context, limiter, epoch callback) and an
//! instance of the component in a slot of the pooling allocator. Making it (store setup,
//! instantiation) and dropping it afterwards (the slot's reset) cost several times the guest's
//! own work, and far more when the CPU caches and TLB are cold, as they are after a call of a big
//! guest (Go, StarlingMonkey, Python: `benches/RESULTS.md`). So after a call has returned, a task
//! of the caller's runtime ([`Preparer`]) drops the used store and, for a small component,
//! instantiates the next one, which the next call takes ([`Standby::take`]) and only runs.
//!
//! What stays per call:
//! - a prepared instance was never called, and is taken out of its slot by exactly one call;
//! - its store's deadline, epoch deadline and timeout are set when the call starts
//!   ([`crate::Sandbox::run_in`]), less the time its instantiation took, so that instantiation
//!   and call together get the manifest's timeout, as an inline instance does;
//! - its memory limiter counts what instantiation allocated, as an inline one does, and its WASI
//!   context, stderr pipe, log count and grants are its own.
//!
//! Bounds: at most one prepared instance per component and
//! [`crate::SandboxConfig::prepared_instances`] across the sandbox (each holds a pool slot, which
//! the pool has on top of `max_concurrent_calls`); only components of at most
//! [`crate::SandboxConfig::prepare_max_component_bytes`]; dropped after
//! [`crate::SandboxConfig::prepared_idle`] without a call, or with their tool set. A call's
//! permit is held until its used store is dropped, so running and used instances together stay
//! within `max_concurrent_calls`.
//!
//! # Caveats
//! - The first call of a component (and one after an idle drop) instantiates on its path.
//! - A component whose preparation fails (a trap in a start function, its deadline) is not
//!   prepared again: its calls instantiate inline and report the error as before.
//! - Calls that follow each other faster than the runtime prepares (back to back from one task
//!   on a single-threaded runtime, which runs the preparation only when that task yields) fall
//!   back to instantiating on their path.
//! - A prepared store's WASI monotonic clock started when it was prepared, not at the call (the
//!   clock's origin is unspecified anyway).

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use wasmtime::{Engine, Store};

use crate::bindings::tool::{ToolProvider, ToolProviderPre};
use crate::state::HostState;
use crate::tools::Grants;

/// A fresh instance of a component, never called, and the time instantiating it took.
pub(crate) struct Prepared {
    store: Store<HostState>,
    instance: ToolProvider,
    spent: Duration,
    /// Its place among `prepared_instances`, given back when a call takes it.
    _held: OwnedSemaphorePermit,
}

/// One component's pre-linked instance, its grants, and the instance prepared for its next call.
pub(crate) struct Standby {
    pub(crate) pre: ToolProviderPre<HostState>,
    pub(crate) grants: Grants,
    /// Whether it is small enough to be prepared in advance.
    eligible: bool,
    slot: Mutex<Slot>,
}

struct Slot {
    prepared: Option<Prepared>,
    /// When a call last started.
    last_call: Instant,
    /// A preparation is queued or running.
    preparing: bool,
    /// An expiry task watches this slot.
    expiring: bool,
    /// A preparation failed: never again.
    failed: bool,
}

impl Standby {
    pub(crate) fn new(pre: ToolProviderPre<HostState>, grants: Grants, eligible: bool) -> Self {
        let slot = Slot {
            prepared: None,
            last_call: Instant::now(),
            preparing: false,
            expiring: false,
            failed: false,
        };
        Self { pre, grants, eligible, slot: Mutex::new(slot) }
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance prepared for this call, if any (the call then owns it: no other call gets
    /// it), with the time its instantiation took. Marks the component as just called.
    pub(crate) fn take(&self) -> Option<(Store<HostState>, ToolProvider, Duration)> {
        let mut slot = self.slot();
        slot.last_call = Instant::now();
        let Prepared { store, instance, spent, _held } = slot.prepared.take()?;
        Some((store, instance, spent))
    }

    /// Whether an instance is prepared now.
    pub(crate) fn is_prepared(&self) -> bool {
        self.slot().prepared.is_some()
    }

    /// Whether to prepare the next instance now; if so, marks the preparation as under way.
    fn claim(&self) -> bool {
        let mut slot = self.slot();
        let claim = self.eligible && !slot.failed && !slot.preparing && slot.prepared.is_none();
        if claim {
            slot.preparing = true;
        }
        claim
    }
}

/// A used store to drop (with the call's permit, given back after it), and the component whose
/// next instance to prepare.
pub(crate) struct Job {
    pub(crate) used: Store<HostState>,
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) next: Option<Arc<Standby>>,
    /// The tool set's count of unfinished jobs, decremented when this one is done.
    pub(crate) pending: Arc<watch::Sender<usize>>,
}

impl Job {
    /// The job for `standby`'s used store: prepares its next instance if it should.
    pub(crate) fn new(
        used: Store<HostState>,
        permit: OwnedSemaphorePermit,
        standby: &Arc<Standby>,
        pending: &Arc<watch::Sender<usize>>,
    ) -> Self {
        let next = standby.claim().then(|| standby.clone());
        pending.send_modify(|n| *n += 1);
        Self { used, permit, next, pending: pending.clone() }
    }

    /// Runs it: drops the used store, then gives the call's permit back, then prepares.
    async fn run(self, preparer: &Preparer) {
        let Job { used, permit, next, pending } = self;
        let mut done = Done { pending, unfinished: next.clone() };
        drop(used);
        drop(permit);
        if let Some(standby) = next {
            preparer.prepare(&standby).await;
            done.unfinished = None;
        }
    }

    /// Done without a runtime: drops the store here and prepares nothing.
    fn abandon(self) {
        let Job { used, permit, next, pending } = self;
        let _done = Done { pending, unfinished: next };
        drop(used);
        drop(permit);
    }
}

/// Counts a job done when dropped, also when its task is dropped unfinished (its runtime shut
/// down), and then lets its component be prepared again.
struct Done {
    pending: Arc<watch::Sender<usize>>,
    unfinished: Option<Arc<Standby>>,
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(standby) = self.unfinished.take() {
            standby.slot().preparing = false;
        }
        self.pending.send_modify(|n| *n -= 1);
    }
}

/// Runs the jobs calls leave behind as tasks of the caller's tokio runtime, after the call has
/// returned: drops used stores and prepares instances.
pub(crate) struct Preparer {
    engine: Engine,
    /// One permit per instance prepared or being prepared: `prepared_instances`.
    prepared: Arc<Semaphore>,
    /// How long a prepared instance is kept without a call.
    idle: Duration,
}

impl Preparer {
    pub(crate) fn new(engine: Engine, prepared: Arc<Semaphore>, idle: Duration) -> Arc<Self> {
        Arc::new(Self { engine, prepared, idle })
    }

    /// Runs `job` as a task of the current runtime; without a runtime, drops its store here and
    /// prepares nothing.
    pub(crate) fn submit(self: &Arc<Self>, job: Job) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            job.abandon();
            return;
        };
        let preparer = self.clone();
        runtime.spawn(async move { job.run(&preparer).await });
    }

    /// Instantiates `standby`'s next instance, under its manifest's timeout, and keeps it in its
    /// slot; gives up when `prepared_instances` are out already.
    async fn prepare(&self, standby: &Arc<Standby>) {
        let Ok(held) = self.prepared.clone().try_acquire_owned() else {
            standby.slot().preparing = false;
            return;
        };
        let timeout = standby.grants.manifest.limits.timeout;
        let started = Instant::now();
        let made = tokio::time::timeout(timeout, async {
            let mut store = crate::new_store(&self.engine, &standby.grants, timeout)?;
            let instance = standby.pre.instantiate_async(&mut store).await?;
            Ok::<_, wasmtime::Error>((store, instance))
        })
        .await;
        let spent = started.elapsed();
        let mut slot = standby.slot();
        slot.preparing = false;
        let (store, instance) = match made {
            Ok(Ok(made)) => made,
            Ok(Err(error)) => {
                slot.failed = true;
                drop(slot);
                tracing::debug!(component = &*standby.grants.name, "not prepared in advance: {error:#}");
                return;
            }
            Err(_) => {
                slot.failed = true;
                drop(slot);
                tracing::debug!(
                    component = &*standby.grants.name,
                    "not prepared in advance: past its deadline"
                );
                return;
            }
        };
        if slot.prepared.is_some() {
            return;
        }
        slot.prepared = Some(Prepared { store, instance, spent, _held: held });
        if !slot.expiring {
            slot.expiring = true;
            tokio::spawn(expire(Arc::downgrade(standby), self.idle));
        }
    }
}

/// Drops `standby`'s prepared instance once its component has not been called for `idle`.
async fn expire(standby: Weak<Standby>, idle: Duration) {
    loop {
        let due = {
            let Some(standby) = standby.upgrade() else { return };
            standby.slot().last_call + idle
        };
        tokio::time::sleep_until(due.into()).await;
        let Some(standby) = standby.upgrade() else { return };
        let stale = {
            let mut slot = standby.slot();
            if slot.last_call + idle > Instant::now() {
                continue;
            }
            slot.expiring = false;
            slot.prepared.take()
        };
        drop(stale);
        return;
    }
}
