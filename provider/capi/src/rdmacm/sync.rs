//! Synchronous ids (created without a channel, as `rdma_create_ep` makes them): each call
//! that starts an operation waits for the operation's event on the id's private channel
//! and keeps it in `id->event` (acknowledged by the next such call or by destroy); a
//! failed event fails the call: ECONNREFUSED for REJECTED, else the event's status.

use std::sync::Arc;

use super::abi::*;
use super::channel::{next_event, sv_rdma_ack_cm_event};
use super::id::IdInner;

/// For a synchronous id, waits for the event of the operation just started; 0 at once for
/// an asynchronous one.
pub fn complete(inner: &Arc<IdInner>) -> i32 {
    if !inner.is_sync() {
        return 0;
    }
    let id = inner.c_id();
    // SAFETY: the id is live (the caller holds it); the event field is the library's.
    let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
    if !held.is_null() {
        // SAFETY: an event this library handed out for the id.
        unsafe { sv_rdma_ack_cm_event(held) };
    }
    let channel = inner.channel.lock().clone();
    let event = match next_event(&channel) {
        Ok(e) => e,
        Err(e) => return super::fail(e),
    };
    // SAFETY: as above; event was just made by next_event.
    unsafe { (*id).event = event };
    // SAFETY: a live event of ours.
    let (kind, status) = unsafe { ((*event).event, (*event).status) };
    match status {
        0 => 0,
        _ if kind == event::REJECTED => super::fail(libc::ECONNREFUSED),
        s if s < 0 => super::fail(-s),
        s => super::fail(s),
    }
}
