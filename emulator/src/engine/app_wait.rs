//! An application thread's short wait for its device's traffic (an empty poll on a
//! crowded machine, `EmuContext::wait_for_traffic`), and how an application tells the
//! engine thread that it polls: while it does, the engine thread naps and leaves the link
//! to it (see `engine_thread`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::device::Device;

/// Longest wait of [`wait_for_traffic`]: well under the engine thread's first nap, so that
/// a waiting application keeps counting as polling.
const APP_WAIT_MAX: Duration = Duration::from_micros(50);

/// See `EmuContext::wait_for_traffic`: a waiting application counts as polling (it will
/// receive as soon as it wakes), so the engine keeps off the link meanwhile.
pub(crate) fn wait_for_traffic(dev: &Device, timeout: Duration) -> bool {
    if !dev.link.pollable() {
        std::thread::sleep(timeout);
        return false;
    }
    note_app_poll(dev);
    // Nothing the peers wait for may wait for this thread to wake up.
    dev.flush_deferred_acks();
    // The engine thread is handing datagrams to QPs right now (it took them off the link
    // before this thread could): what this thread waits for may be among them. Wait for it
    // to finish rather than for the link, which it has just emptied.
    if dev.rx_lock.is_locked() {
        drop(dev.rx_lock.lock());
        return true;
    }
    let ready = dev
        .link
        .wait_readable(timeout.min(APP_WAIT_MAX))
        .unwrap_or(false);
    note_app_poll(dev);
    ready
}

/// Tells the engine thread an application is polling (any change of the counter will do,
/// so a racy load-and-store is enough and cheaper than an atomic add).
pub(crate) fn note_app_poll(dev: &Device) {
    let n = dev.app_polls.load(Ordering::Relaxed);
    dev.app_polls.store(n.wrapping_add(1), Ordering::Relaxed);
}
