//! Completion channels: `ibv_create_comp_channel`, `ibv_get_cq_event`, `ibv_ack_cq_events`,
//! and the blocking rules of the event descriptors (shared with the async events).

use std::ffi::c_void;
use std::time::Duration;

use crate::abi::*;
use crate::handle::{
    fail_null, is_live, live_context, register, set_errno, unregister, Kind, SvContext,
};

/// A completion channel: what applications see, then the backend's channel id.
#[repr(C)]
pub struct SvChannel {
    /// What applications see.
    pub ch: IbvCompChannel,
    /// The backend's channel id.
    pub id: u32,
}

/// `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_comp_channel(
    context: *mut IbvContext,
) -> *mut IbvCompChannel {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return fail_null(libc::EINVAL);
    };
    let made = ctx
        .backend()
        .create_comp_channel()
        .and_then(|id| Ok((id, ctx.backend().comp_channel_fd(id)?)));
    let (id, fd) = match made {
        Ok(v) => v,
        Err(e) => return fail_null(e.errno()),
    };
    make_blocking(fd);
    let ch = Box::into_raw(Box::new(SvChannel {
        ch: IbvCompChannel {
            context,
            fd,
            refcnt: 0,
        },
        id,
    })) as *mut IbvCompChannel;
    register(ch, Kind::Channel);
    ch
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> i32 {
    if !is_live(channel, Kind::Channel) {
        return libc::EINVAL;
    }
    let sv = channel as *mut SvChannel;
    // SAFETY: live channel: an SvChannel of ours with a live context.
    let (ctx, id) = unsafe { (SvContext::from_ptr((*channel).context), (*sv).id) };
    if let Err(e) = ctx.expect("live").backend().destroy_comp_channel(id) {
        return e.errno();
    }
    unregister(channel, Kind::Channel);
    // SAFETY: made by Box::into_raw in create; unregistered, so freed once.
    drop(unsafe { Box::from_raw(sv) });
    0
}

/// Makes `fd` blocking, as rdma-core's channel and async descriptors start out: the
/// emulator creates its descriptors non-blocking, and whether the application later set
/// O_NONBLOCK decides whether the get-event calls may block (the emulator reads a token
/// only when one is pending, so it never blocks on the descriptor itself).
pub(crate) fn make_blocking(fd: i32) {
    // SAFETY: F_GETFL / F_SETFL on a descriptor the backend owns only change its flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

fn nonblocking(fd: i32) -> bool {
    // SAFETY: F_GETFL on a descriptor only reads its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// How long an event wait may block: not at all on a non-blocking descriptor.
pub(crate) fn wait_for(fd: i32) -> Option<Duration> {
    if nonblocking(fd) {
        Some(Duration::ZERO)
    } else {
        None
    }
}

/// `ibv_get_cq_event`: blocks (unless the channel's fd is non-blocking: then EAGAIN).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_cq_event(
    channel: *mut IbvCompChannel,
    cq: *mut *mut IbvCq,
    cq_context: *mut *mut c_void,
) -> i32 {
    if !is_live(channel, Kind::Channel) || cq.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a live channel of ours.
    let (ctx, id, fd) = unsafe {
        (
            SvContext::from_ptr((*channel).context).expect("open"),
            (*(channel as *mut SvChannel)).id,
            (*channel).fd,
        )
    };
    match ctx.backend().get_cq_event(id, wait_for(fd)) {
        Ok(Some(cq_id)) => {
            let Some(p) = ctx.cqs.lock().get(&cq_id).copied() else {
                set_errno(libc::EINVAL);
                return -1;
            };
            let p = p as *mut IbvCq;
            // SAFETY: cq is writable (checked); cq_context is NULL or writable; p is live.
            unsafe {
                *cq = p;
                if !cq_context.is_null() {
                    *cq_context = (*p).cq_context;
                }
            }
            0
        }
        Ok(None) => {
            set_errno(libc::EAGAIN);
            -1
        }
        Err(e) => {
            set_errno(e.errno());
            -1
        }
    }
}

/// `ibv_ack_cq_events`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_ack_cq_events(cq: *mut IbvCq, nevents: u32) {
    if !is_live(cq, Kind::Cq) {
        return;
    }
    // SAFETY: a live CQ of ours.
    unsafe {
        let ctx = SvContext::from_ptr((*cq).context).expect("open");
        if ctx.backend().ack_cq_events((*cq).handle, nevents).is_ok() {
            (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents);
        }
    }
}
