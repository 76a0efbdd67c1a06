//! Synchronous ids (created without a channel, as `rdma_create_ep` makes them): each call
//! that starts an operation waits for the operation's event on the id's private channel
//! and keeps it in `id->event` (acknowledged by the next such call or by destroy); a
//! failed event fails the call: ECONNREFUSED for REJECTED, else the event's status.

use std::sync::Arc;

use super::abi::*;
use super::channel::{next_event, release_held_event};
use super::shared::IdInner;

/// For a synchronous id, waits for the event of the operation just started; 0 at once for
/// an asynchronous one.
pub fn complete(inner: &Arc<IdInner>) -> i32 {
    if !inner.is_sync() {
        return 0;
    }
    let id = inner.c_id();
    // SAFETY: the id is live (the caller holds it).
    unsafe { release_held_event(id) };
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
