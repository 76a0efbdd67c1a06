//! Shared receive queues: create (plain and extended, basic type), modify (limit, resize),
//! query and destroy. Posting is in `post`.

use std::ffi::c_void;

use softverbs_api::{SrqAttr, SrqAttrMask};

use crate::abi::*;
use crate::handle::{fail_null, is_live, live_pd, register, unregister, Kind, SvContext};

unsafe fn create(pd: *mut IbvPd, srq_context: *mut c_void, a: *mut IbvSrqAttr) -> *mut IbvSrq {
    // SAFETY: checked live.
    let Some((ctx, pd_id)) = (unsafe { live_pd(pd) }) else {
        return fail_null(libc::EINVAL);
    };
    // SAFETY: a points into the application's (non-NULL) init attributes.
    let requested = SrqAttr::from(unsafe { &*a });
    let (id, granted) = match ctx.backend().create_srq(pd_id, &requested) {
        Ok(v) => v,
        Err(e) => return fail_null(e.errno()),
    };
    // SAFETY: as above; rdma-core reports the granted sizes back.
    unsafe { *a = IbvSrqAttr::from(&granted) };
    let srq = Box::into_raw(Box::new(IbvSrq {
        // SAFETY: pd is live.
        context: unsafe { (*pd).context },
        srq_context,
        pd,
        handle: id,
        mutex: PthreadMutex([0; std::mem::size_of::<libc::pthread_mutex_t>()]),
        cond: PthreadCond([0; std::mem::size_of::<libc::pthread_cond_t>()]),
        events_completed: 0,
    }));
    register(srq, Kind::Srq);
    ctx.srqs.lock().insert(id, srq as usize);
    srq
}

/// `ibv_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_srq(
    pd: *mut IbvPd,
    init: *mut IbvSrqInitAttr,
) -> *mut IbvSrq {
    if init.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL init attributes.
    unsafe { create(pd, (*init).srq_context, &mut (*init).attr) }
}

/// IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD
const SRQ_INIT_TYPE: u32 = 1;
const SRQ_INIT_PD: u32 = 1 << 1;

/// `verbs_context.create_srq_ex`: basic SRQs only (no XRC, no tag matching).
pub unsafe extern "C" fn sv_create_srq_ex(
    _context: *mut IbvContext,
    init: *mut c_void,
) -> *mut IbvSrq {
    if init.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: an ibv_srq_init_attr_ex of the application.
    let a = unsafe { &mut *(init as *mut IbvSrqInitAttrEx) };
    if a.comp_mask & SRQ_INIT_PD == 0 {
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & !(SRQ_INIT_TYPE | SRQ_INIT_PD) != 0
        || (a.comp_mask & SRQ_INIT_TYPE != 0 && a.srq_type != 0)
    {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: create checks the PD; attr is inside a.
    unsafe { create(a.pd, a.srq_context, &mut a.attr) }
}

unsafe fn live_srq<'a>(srq: *mut IbvSrq) -> Option<(&'a SvContext, u32)> {
    if !is_live(srq, Kind::Srq) {
        return None;
    }
    // SAFETY: a live SRQ of ours.
    unsafe { Some((SvContext::from_ptr((*srq).context)?, (*srq).handle)) }
}

/// `ibv_modify_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_modify_srq(srq: *mut IbvSrq, a: *mut IbvSrqAttr, mask: i32) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, id)) = (unsafe { live_srq(srq) }) else {
        return libc::EINVAL;
    };
    if a.is_null() || mask & !0b11 != 0 {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL attributes.
    match ctx
        .backend()
        .modify_srq(id, &SrqAttr::from(unsafe { &*a }), SrqAttrMask(mask as u32))
    {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// `ibv_query_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_srq(srq: *mut IbvSrq, a: *mut IbvSrqAttr) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, id)) = (unsafe { live_srq(srq) }) else {
        return libc::EINVAL;
    };
    if a.is_null() {
        return libc::EINVAL;
    }
    match ctx.backend().query_srq(id) {
        Ok(q) => {
            // SAFETY: non-NULL, writable.
            unsafe { a.write(IbvSrqAttr::from(&q)) };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_destroy_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_srq(srq: *mut IbvSrq) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, id)) = (unsafe { live_srq(srq) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = ctx.backend().destroy_srq(id) {
        return e.errno();
    }
    unregister(srq, Kind::Srq);
    ctx.srqs.lock().remove(&id);
    // SAFETY: made by Box::into_raw; unregistered: freed once.
    drop(unsafe { Box::from_raw(srq) });
    0
}
