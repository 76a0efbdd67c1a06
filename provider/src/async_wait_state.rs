//! The per-CQ state of the tokio waits (cargo feature `tokio`), apart from the waits
//! themselves (`async_wait`) so that a CQ can hold it without the CQ module and the waits
//! importing each other.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// Per CQ: channel events taken (and acknowledged) by some async waiter for this CQ and not
/// yet consumed by its own waiter.
#[derive(Default)]
pub(crate) struct CqWaitState {
    pending: AtomicU64,
    /// Wakes the CQ's waiter when an event is handed over.
    pub(crate) arrived: Notify,
}

impl CqWaitState {
    /// Consumes one pending event, if there is one.
    pub(crate) fn take(&self) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Records one event and wakes the CQ's waiter (or the next one to wait).
    pub(crate) fn give(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.arrived.notify_one();
    }
}
