//! Async events: `ibv_get_async_event` (on the context's real `async_fd`) and
//! `ibv_ack_async_event`.

use softverbs_api::{AsyncElement, AsyncEvent, AsyncEventKind};

use crate::abi::*;
use crate::channel::wait_for;
use crate::handle::{live_context, set_errno, SvContext};

/// The object pointer an event is about (or the port number, as the union holds it).
fn element(ctx: &SvContext, e: &AsyncElement) -> usize {
    match *e {
        AsyncElement::Cq(id) => ctx.cqs.lock().get(&id).copied().unwrap_or(0),
        AsyncElement::Qp(n) => ctx.qps.lock().get(&n).copied().unwrap_or(0),
        AsyncElement::Srq(id) => ctx.srqs.lock().get(&id).copied().unwrap_or(0),
        AsyncElement::Port(p) => p as usize,
        AsyncElement::Device => 0,
    }
}

/// `ibv_get_async_event`: blocks unless `async_fd` is non-blocking (then EAGAIN).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_async_event(
    context: *mut IbvContext,
    event: *mut IbvAsyncEvent,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: live context.
    let fd = unsafe { (*context).async_fd };
    match ctx.backend().get_async_event(wait_for(fd)) {
        Ok(Some(e)) => {
            // SAFETY: writable, non-NULL.
            unsafe {
                event.write(IbvAsyncEvent {
                    element: element(ctx, &e.element) as *mut std::ffi::c_void,
                    event_type: e.kind.to_raw(),
                })
            };
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

/// `ibv_ack_async_event`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_ack_async_event(event: *mut IbvAsyncEvent) {
    if event.is_null() {
        return;
    }
    // SAFETY: the application's event, filled by ibv_get_async_event.
    let e = unsafe { &*event };
    let Some(k) = AsyncEventKind::from_raw(e.event_type) else {
        return;
    };
    let p = e.element as usize;
    // The element pointer leads to the object's context; find which object it is.
    let (ctx_ptr, element) = match k {
        AsyncEventKind::CqErr => {
            // SAFETY: a CQ pointer we delivered.
            unsafe {
                (
                    (*(p as *mut IbvCq)).context,
                    AsyncElement::Cq((*(p as *mut IbvCq)).handle),
                )
            }
        }
        AsyncEventKind::SrqErr | AsyncEventKind::SrqLimitReached => {
            // SAFETY: an SRQ pointer we delivered.
            unsafe {
                (
                    (*(p as *mut IbvSrq)).context,
                    AsyncElement::Srq((*(p as *mut IbvSrq)).handle),
                )
            }
        }
        AsyncEventKind::PortActive
        | AsyncEventKind::PortErr
        | AsyncEventKind::LidChange
        | AsyncEventKind::PkeyChange
        | AsyncEventKind::SmChange
        | AsyncEventKind::ClientReregister
        | AsyncEventKind::GidChange
        | AsyncEventKind::DeviceFatal => return, // no object: nothing to wait for
        _ => {
            if p == 0 {
                return;
            }
            // SAFETY: a QP pointer we delivered.
            unsafe {
                (
                    (*(p as *mut IbvQp)).context,
                    AsyncElement::Qp((*(p as *mut IbvQp)).qp_num),
                )
            }
        }
    };
    if p == 0 {
        return;
    }
    // SAFETY: the object's context is open while it lives.
    if let Some(ctx) = unsafe { SvContext::from_ptr(ctx_ptr) } {
        let _ = ctx
            .backend()
            .ack_async_event(&AsyncEvent { kind: k, element });
    }
}
