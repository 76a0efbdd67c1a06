//! `rdma_cm_id`'s life: `rdma_create_id`, `rdma_destroy_id` (and what it ends on the
//! device: connection, listen, port, waiting requests) and `rdma_migrate_id`. The id
//! itself is `shared`'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use softverbs_emu::cm::CmEventKind as CoreKind;
use softverbs_emu::wire::cm::PortSpace;

use super::abi::*;
use super::channel::release_held_event;
use super::devices::CmDevice;
use super::shared::{channel_for, free_if_done, live_id, new_id, IdInner, Phase, RawKind};
use crate::handle::{unregister, Kind};

impl IdInner {
    /// Ends what the id holds on its device(s): its connection (the core finishes the
    /// protocol), its listen, its port; requests it never handed out are rejected.
    pub fn teardown(&self) {
        let mut st = self.state.lock();
        let was = st.phase;
        let port = st.local.map(|l| l.port());
        let devices: Vec<Arc<CmDevice>> = if st.wildcard.is_empty() {
            st.dev.iter().cloned().collect()
        } else {
            std::mem::take(&mut st.wildcard)
        };
        if let (Some(core), Some(dev)) = (st.core.take(), st.dev.as_ref()) {
            let _ = dev.service.destroy_in(self.ps, core);
        }
        if let Some(port) = port {
            for dev in &devices {
                if was == Phase::Listening {
                    let _ = dev.service.unlisten(self.ps, port);
                }
                if st.port_held {
                    dev.service.release_port(self.ps, port);
                }
            }
        }
        st.port_held = false;
        drop(st);
        self.drop_waiting_events(&devices);
    }

    /// Drops the id's waiting events; a request among them gets a REJ (or a SIDR reject)
    /// so that the core frees it.
    fn drop_waiting_events(&self, devices: &[Arc<CmDevice>]) {
        let channel = self.channel.lock().clone();
        let mut untaken = Vec::new();
        channel.queue.with_state_dropping(|_, dropper| {
            dropper.retain(|e| {
                if !e.target.ptr_eq(&self.me) {
                    return true;
                }
                if let RawKind::Core { id, kind, via } = &e.what {
                    if matches!(
                        kind,
                        CoreKind::ConnectRequest { .. } | CoreKind::SidrRequest { .. }
                    ) {
                        untaken.push((*id, *via));
                    }
                }
                false
            });
        });
        for (core, via) in untaken {
            let dev = devices
                .iter()
                .find(|d| via.is_none() || Some(d.ip) == via)
                .cloned();
            let Some(dev) = dev else {
                continue;
            };
            dev.service.end_untaken_request(self.ps, core);
        }
    }
}

/// `rdma_create_id`: a new id on `channel` (NULL: a synchronous id whose calls wait for
/// their own events) in port space `ps` (TCP, or UDP for UD through SIDR; the IB and IPoIB
/// spaces are EOPNOTSUPP: emulated RoCE devices serve the IP port spaces only).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_id(
    channel: *mut RdmaEventChannel,
    id: *mut *mut RdmaCmId,
    context: *mut std::ffi::c_void,
    ps: u32,
) -> i32 {
    if id.is_null() {
        return super::fail(libc::EINVAL);
    }
    let space = match ps {
        RDMA_PS_TCP => PortSpace::Tcp,
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IB | RDMA_PS_IPOIB => return super::fail(libc::EOPNOTSUPP),
        _ => return super::fail(libc::EINVAL),
    };
    // SAFETY: checked against the live table inside.
    let (channel, sync) = match unsafe { channel_for(channel) } {
        Ok(c) => c,
        Err(e) => return super::fail(e),
    };
    let inner = new_id(channel, sync, context, space, Phase::Idle);
    // SAFETY: the caller passes a writable pointer (checked non-null).
    unsafe { *id = inner.c_id() };
    0
}

/// `rdma_destroy_id`: ends the id's connection (a DREQ or REJ as its state needs),
/// stops its listen, gives its port back and drops its waiting events. Its memory goes
/// once every event handed out for it is acknowledged, so an event still held stays
/// readable.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_id(id: *mut RdmaCmId) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    if !unregister(id, Kind::CmId) {
        return super::fail(libc::EINVAL);
    }
    inner.destroyed.store(true, Ordering::SeqCst);
    // SAFETY: the id was live until just now; its QP field is the application's.
    unsafe { super::mcast::detach_all(&inner, id) };
    inner.state.lock().groups.clear();
    inner.teardown();
    // SAFETY: the id was live until just now; its memory stays until free_if_done.
    unsafe { release_held_event(id) };
    if inner.is_sync() {
        let ch = inner.channel.lock().clone();
        ch.retire();
    }
    free_if_done(&inner);
    0
}

/// `rdma_migrate_id`: the id's events (those waiting included) go to `channel` from now
/// on, and the id is asynchronous; NULL makes it synchronous on a private channel. A
/// synchronous id's held event is acknowledged and its private channel retired.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_migrate_id(
    id: *mut RdmaCmId,
    channel: *mut RdmaEventChannel,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: checked against the live table inside.
    let (target, sync) = match unsafe { channel_for(channel) } {
        Ok(c) => c,
        Err(e) => return super::fail(e),
    };
    let old = std::mem::replace(&mut *inner.channel.lock(), target.clone());
    let was_sync = inner.set_sync(sync);
    if was_sync {
        // SAFETY: live id.
        unsafe { release_held_event(id) };
    }
    if Arc::ptr_eq(&old, &target) {
        return 0;
    }
    let mut moved = Vec::new();
    old.queue.with_state_dropping(|_, dropper| {
        dropper.retain(|e| {
            if e.target.ptr_eq(&inner.me) {
                moved.push(e.clone());
                false
            } else {
                true
            }
        });
    });
    for e in moved {
        target.queue.push_if(e, |_, _| true);
    }
    if was_sync {
        old.retire();
    }
    // SAFETY: live id: the library's own field.
    unsafe { (*id).channel = target.c_channel() };
    0
}
