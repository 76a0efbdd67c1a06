//! What the receives from a device's link share: the clock of a receive batch (the
//! datagrams of one batch share one clock reading, see [`batch_now`]; set by the engine
//! thread's receive loop, read by the data path) and what the last receive found.

use std::cell::Cell;

use super::clock::Clock;

/// The clock of the receive batch a thread is handling.
#[derive(Clone, Copy)]
pub(crate) enum BatchClock {
    /// Not in a batch.
    Outside,
    /// In a batch that has not needed the time yet.
    Unread,
    /// In a batch, at this time.
    At(u64),
}

thread_local! {
    pub(crate) static BATCH_NOW: Cell<BatchClock> = const { Cell::new(BatchClock::Outside) };
}

/// The time for a transport call: inside a receive batch, the clock reading of the batch's
/// first datagram, which the datagrams of one batch (at most `RX_BATCH`, handled within
/// microseconds) share, so a deadline armed by the last of them may be early by that much,
/// far below any RC timer's resolution (a clock read per datagram showed as 6% of a
/// receiving thread); outside one, the clock.
pub(crate) fn batch_now(clock: &Clock) -> u64 {
    BATCH_NOW.with(|n| match n.get() {
        BatchClock::At(t) => t,
        BatchClock::Unread => {
            let t = clock.now_ns();
            n.set(BatchClock::At(t));
            t
        }
        BatchClock::Outside => clock.now_ns(),
    })
}

/// What the last receive from a device's link found, kept under `Device::rx_lock`.
#[derive(Default)]
pub(crate) struct LastReceive {
    /// It found nothing: the link is idle, and a datagram found now is likely alone.
    pub(crate) found_nothing: bool,
    /// It found one datagram after an empty receive: the next receive tells whether
    /// another was right behind it.
    pub(crate) after_lone: bool,
    /// Datagrams come in pairs: the last lone one had another right behind it (an ACK
    /// ahead of the peer's answer, as with every SEND signaled).
    pub(crate) pairs: bool,
    /// The QP the last datagram went to.
    pub(crate) qp: super::qp_entry::LastQp,
}
