//! `rdma_event_channel`: a bounded queue with a real descriptor (the emulator's fd-backed
//! event queue), `rdma_get_cm_event` and `rdma_ack_cm_event`. What a queued event becomes
//! when read is `event`'s business.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use softverbs_emu::cm::{CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::engine::event_queue::FdEventQueue;

use super::abi::*;
use super::event::{materialize, SvEvent};
use super::id::{free_if_done, IdInner};
use crate::handle::{is_live, register, unregister, Kind};

/// Events a channel holds at most; later ones are lost, as a full kernel queue refuses
/// them (the CM protocol resends what matters).
pub const EVENT_CHANNEL_LIMIT: usize = 4096;

/// An event as queued: for which id, and what.
#[derive(Clone)]
pub struct RawEvent {
    pub target: Weak<IdInner>,
    pub what: RawKind,
}

/// What a queued event is.
#[derive(Clone)]
pub enum RawKind {
    /// Made by the library itself (address and route resolution).
    Local { event: u32, status: i32 },
    /// From the device's CM core; `via` names the device for a wildcard listener.
    Core {
        id: CoreId,
        kind: CoreKind,
        via: Option<IpAddr>,
    },
}

/// The queue behind a channel.
pub type Queue = FdEventQueue<RawEvent>;

/// An event channel: the `rdma_event_channel` C sees (boxed apart so that its address
/// is stable), and the queue.
pub struct SvEventChannel {
    c: *mut RdmaEventChannel,
    pub queue: Queue,
}

// SAFETY: `c` is a heap object of the library's, written once at creation.
unsafe impl Send for SvEventChannel {}
// SAFETY: as above; the queue is thread-safe.
unsafe impl Sync for SvEventChannel {}

/// The channel objects handed to C, by address, so that `rdma_event_channel *` leads back
/// to the shared channel.
fn table() -> &'static parking_lot::Mutex<std::collections::HashMap<usize, Arc<SvEventChannel>>> {
    static TABLE: std::sync::OnceLock<
        parking_lot::Mutex<std::collections::HashMap<usize, Arc<SvEventChannel>>>,
    > = std::sync::OnceLock::new();
    TABLE.get_or_init(Default::default)
}

impl SvEventChannel {
    /// The `rdma_event_channel` C holds.
    pub fn c_channel(&self) -> *mut RdmaEventChannel {
        self.c
    }

    /// Forgets a synchronous id's private channel (its descriptor closes with the last
    /// reference).
    pub fn retire(&self) {
        if let Some(ch) = table().lock().remove(&(self.c as usize)) {
            unregister(ch.c, Kind::CmChannel);
        }
    }
}

impl Drop for SvEventChannel {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in make() and freed only here.
        drop(unsafe { Box::from_raw(self.c) });
    }
}

fn make() -> Result<Arc<SvEventChannel>, i32> {
    let queue =
        FdEventQueue::new("CM event channel", EVENT_CHANNEL_LIMIT, ()).map_err(|e| e.errno())?;
    // Blocking until the application sets O_NONBLOCK itself (see nonblocking()).
    crate::channel::make_blocking(queue.fd());
    let c = Box::into_raw(Box::new(RdmaEventChannel { fd: queue.fd() }));
    let ch = Arc::new(SvEventChannel { c, queue });
    table().lock().insert(c as usize, ch.clone());
    register(c, Kind::CmChannel);
    Ok(ch)
}

/// A synchronous id's private channel.
pub fn private() -> Result<Arc<SvEventChannel>, i32> {
    make()
}

/// The channel behind a live `rdma_event_channel`.
///
/// # Safety
/// Any pointer; it is looked up in the table first.
pub unsafe fn live(c: *mut RdmaEventChannel) -> Option<Arc<SvEventChannel>> {
    if !is_live(c, Kind::CmChannel) {
        return None;
    }
    table().lock().get(&(c as usize)).cloned()
}

/// `rdma_create_event_channel`.
#[no_mangle]
pub extern "C" fn sv_rdma_create_event_channel() -> *mut RdmaEventChannel {
    match make() {
        Ok(ch) => ch.c_channel(),
        Err(e) => {
            crate::handle::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `rdma_destroy_event_channel`: the channel goes once the ids on it are gone (their
/// sinks hold it until then); waiting events are dropped.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
    // SAFETY: checked live inside.
    if let Some(ch) = unsafe { live(channel) } {
        ch.retire();
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
