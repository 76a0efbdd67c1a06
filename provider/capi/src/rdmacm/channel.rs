//! The calls on `rdma_event_channel` (its queue is `shared`'s): create, destroy,
//! `rdma_get_cm_event` and `rdma_ack_cm_event`, and the release of a synchronous id's held
//! event. What a queued event becomes when read is `event`'s business.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::abi::*;
use super::event::{materialize, SvEvent};
use super::shared::{free_if_done, live, new_channel, SvEventChannel};
use crate::handle::{register, unregister, Kind};

/// `rdma_create_event_channel`.
#[no_mangle]
pub extern "C" fn sv_rdma_create_event_channel() -> *mut RdmaEventChannel {
    match new_channel() {
        Ok(ch) => ch.c_channel(),
        Err(e) => {
            crate::handle::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// How long `rdma_get_cm_event` on a channel the application destroyed waits before it
/// fails with EINVAL.
///
/// Why: a thread already blocked in `rdma_get_cm_event` when the channel goes keeps waiting
/// (as a `read` in flight on librdmacm's descriptor does), but one that calls a moment
/// later would fail at once, and which of the two happens is the scheduler's choice.
/// Debian's rping (rdma-core 44) depends on it: its CM thread goes back into
/// `rdma_get_cm_event` after the DISCONNECTED event while the main thread tears down,
/// destroys the channel without joining the thread, and exits; a CM thread that came late
/// failed and made rping exit 255 (2 of 150 runs of the drop-in's rping test). Late callers
/// now wait like early ones, for a bounded time: a single-threaded program that calls on a
/// channel it destroyed still gets its error.
pub const DESTROYED_CHANNEL_GRACE: Duration = Duration::from_secs(1);
/// How many destroyed channels are remembered for [`DESTROYED_CHANNEL_GRACE`].
const DESTROYED_REMEMBERED: usize = 16;

/// The channels the application destroyed last (address, when), oldest first.
static DESTROYED: Mutex<VecDeque<(usize, Instant)>> = Mutex::new(VecDeque::new());

/// When the application destroyed `channel`, if it is among the last destroyed.
fn destroyed_at(channel: *mut RdmaEventChannel) -> Option<Instant> {
    let destroyed = DESTROYED.lock();
    destroyed
        .iter()
        .rev()
        .find(|&&(c, _)| c == channel as usize)
        .map(|&(_, at)| at)
}

/// `rdma_destroy_event_channel`: the channel goes once the ids on it are gone (their
/// sinks hold it until then); waiting events are dropped.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
    // SAFETY: checked live inside.
    if let Some(ch) = unsafe { live(channel) } {
        ch.retire();
        let mut destroyed = DESTROYED.lock();
        if destroyed.len() == DESTROYED_REMEMBERED {
            destroyed.pop_front();
        }
        destroyed.push_back((channel as usize, Instant::now()));
    }
}

/// True if the descriptor is in non-blocking mode (then an empty channel is EAGAIN, as
/// librdmacm's read of its descriptor gives).
fn nonblocking(fd: i32) -> bool {
    // SAFETY: fcntl F_GETFL on a descriptor the channel owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// The next event of `ch` as C sees it, waiting without limit unless the descriptor is
/// non-blocking (EAGAIN when empty).
pub fn next_event(ch: &SvEventChannel) -> Result<*mut RdmaCmEvent, i32> {
    loop {
        let timeout = nonblocking(ch.queue.fd()).then_some(Duration::ZERO);
        let Some(raw) = ch.queue.get(timeout, |_, _| {}) else {
            return Err(libc::EAGAIN);
        };
        // Events of ids destroyed meanwhile are dropped, as rdma_destroy_id drops them.
        if let Some(event) = materialize(raw) {
            event.target.events_out.fetch_add(1, Ordering::SeqCst);
            let p = Box::into_raw(event);
            register(p, Kind::CmEvent);
            return Ok(p as *mut RdmaCmEvent);
        }
    }
}

/// `rdma_get_cm_event`.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_cm_event(
    channel: *mut RdmaEventChannel,
    event: *mut *mut RdmaCmEvent,
) -> i32 {
    if event.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: checked live inside.
    let Some(ch) = (unsafe { live(channel) }) else {
        if let Some(at) = destroyed_at(channel) {
            std::thread::sleep(DESTROYED_CHANNEL_GRACE.saturating_sub(at.elapsed()));
        }
        return super::fail(libc::EINVAL);
    };
    match next_event(&ch) {
        Ok(e) => {
            // SAFETY: the caller passes a writable pointer (checked non-null).
            unsafe { *event = e };
            0
        }
        Err(e) => super::fail(e),
    }
}

/// `rdma_ack_cm_event`: frees the event; EINVAL for one already acknowledged or never
/// handed out.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_ack_cm_event(event: *mut RdmaCmEvent) -> i32 {
    if !unregister(event, Kind::CmEvent) {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: a live event: the SvEvent box next_event made.
    let event = unsafe { Box::from_raw(event as *mut SvEvent) };
    let target = event.target.clone();
    drop(event);
    target.events_out.fetch_sub(1, Ordering::SeqCst);
    free_if_done(&target);
    0
}

/// Acknowledges the event a synchronous id holds in `id->event` (if any) and clears it.
///
/// # Safety
/// `id` is an id of this library whose memory is still there (live, or destroyed with
/// events outstanding).
pub unsafe fn release_held_event(id: *mut RdmaCmId) {
    // SAFETY: per the contract; the event field is the library's.
    let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
    if !held.is_null() {
        // SAFETY: an event this library handed out for the id.
        unsafe { sv_rdma_ack_cm_event(held) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_event(channel: *mut RdmaEventChannel) -> (i32, i32, Duration) {
        let mut event = std::ptr::null_mut();
        let start = Instant::now();
        // SAFETY: any pointer is looked up first; `event` is writable.
        let ret = unsafe { sv_rdma_get_cm_event(channel, &mut event) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        (ret, errno, start.elapsed())
    }

    #[test]
    fn a_call_on_a_channel_destroyed_a_moment_ago_waits_out_the_grace_then_fails() {
        let channel = sv_rdma_create_event_channel();
        assert!(!channel.is_null());
        // SAFETY: a live channel of ours.
        unsafe { sv_rdma_destroy_event_channel(channel) };
        let (ret, errno, waited) = get_event(channel);
        assert_eq!((ret, errno), (-1, libc::EINVAL));
        assert!(
            waited >= DESTROYED_CHANNEL_GRACE - Duration::from_millis(50),
            "failed after {waited:?}: a late caller must wait like an early one"
        );
        // Past the grace, and for a pointer that never was a channel: at once.
        let (ret, errno, waited) = get_event(channel);
        assert_eq!((ret, errno), (-1, libc::EINVAL));
        assert!(waited < DESTROYED_CHANNEL_GRACE / 2, "waited {waited:?}");
        let mut not_a_channel = RdmaEventChannel { fd: -1 };
        let (ret, errno, waited) = get_event(&mut not_a_channel);
        assert_eq!((ret, errno), (-1, libc::EINVAL));
        assert!(waited < DESTROYED_CHANNEL_GRACE / 2, "waited {waited:?}");
    }
}
