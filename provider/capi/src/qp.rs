//! Queue pairs: create (plain and extended), modify, query, destroy, `ibv_qp_to_qp_ex`.

use std::ffi::c_void;

use parking_lot::Mutex;
use softverbs_api::{QpAttrMask, QpCap, QpInitAttr, QpPoster};

use crate::abi::*;
use crate::convert;
use crate::handle::{fail_null, is_live, live_pd, register, unregister, Kind, SvContext, SvQp};
use crate::qp_ex;

/// IBV_QP_INIT_ATTR_PD
const INIT_ATTR_PD: u32 = 1;
/// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// IBV_QP_INIT_ATTR_CREATE_FLAGS
const INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;

struct CreateArgs {
    pd: *mut IbvPd,
    qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut IbvSrq,
    cap: *mut IbvQpCap,
    qp_type: u32,
    sq_sig_all: bool,
}

unsafe fn create(a: CreateArgs) -> *mut IbvQp {
    // SAFETY: checked live.
    let Some((ctx, pd_id)) = (unsafe { live_pd(a.pd) }) else {
        return fail_null(libc::EINVAL);
    };
    let Some(qp_type) = convert::qp_type(a.qp_type) else {
        return fail_null(libc::EOPNOTSUPP);
    };
    if !is_live(a.send_cq, Kind::Cq) || !is_live(a.recv_cq, Kind::Cq) {
        return fail_null(libc::EINVAL);
    }
    let srq = if a.srq.is_null() {
        None
    } else if is_live(a.srq, Kind::Srq) {
        // SAFETY: live SRQ.
        Some(unsafe { (*a.srq).handle })
    } else {
        return fail_null(libc::EINVAL);
    };
    // SAFETY: cap points into the application's init attributes; CQs are live.
    let init = unsafe {
        QpInitAttr {
            qp_type,
            send_cq: (*a.send_cq).handle,
            recv_cq: (*a.recv_cq).handle,
            srq,
            cap: QpCap::from(&*a.cap),
            sq_sig_all: a.sq_sig_all,
        }
    };
    let (qpn, granted) = match ctx.backend().create_qp(pd_id, &init) {
        Ok(v) => v,
        Err(e) => return fail_null(e.errno()),
    };
    // rdma-core reports the granted capacities back in the caller's attributes.
    // SAFETY: as above.
    unsafe { *a.cap = IbvQpCap::from(&granted) };
    // SAFETY: pd is live.
    let context = unsafe { (*a.pd).context };
    let sv = Box::new(SvQp {
        qp: qp_ex::new_qp_ex(IbvQp {
            context,
            qp_context: a.qp_context,
            pd: a.pd,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            handle: qpn,
            qp_num: qpn,
            state: 0,
            qp_type: a.qp_type,
            mutex: PthreadMutex([0; std::mem::size_of::<libc::pthread_mutex_t>()]),
            cond: PthreadCond([0; std::mem::size_of::<libc::pthread_cond_t>()]),
            events_completed: 0,
        }),
        building: Mutex::new(Default::default()),
        pd_id,
        send_depth: granted.max_send_wr,
        atomic: crate::bounce::AtomicRing::new(),
        poster: QpPoster::new(ctx.backend(), qpn),
    });
    let p = Box::into_raw(sv) as *mut IbvQp;
    register(p, Kind::Qp);
    ctx.qps.lock().insert(qpn, p as usize);
    p
}

/// `ibv_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL attributes of the application.
    let a = unsafe { &mut *attr };
    // SAFETY: create checks every object.
    unsafe {
        create(CreateArgs {
            pd,
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: &mut a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
        })
    }
}

/// `verbs_context.create_qp_ex`.
pub unsafe extern "C" fn sv_create_qp_ex(
    _context: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL attributes of the application.
    let a = unsafe { &mut *attr };
    if a.comp_mask & INIT_ATTR_PD == 0 {
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & !(INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS | INIT_ATTR_CREATE_FLAGS) != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    if a.comp_mask & INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    if a.comp_mask & INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags & !qp_ex::SEND_OPS != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: create checks every object.
    unsafe {
        create(CreateArgs {
            pd: a.pd,
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: &mut a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
        })
    }
}

/// `ibv_qp_to_qp_ex`: every QP of this library is an `ibv_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut IbvQpEx {
    if !is_live(qp, Kind::Qp) {
        return fail_null(libc::EINVAL);
    }
    qp as *mut IbvQpEx
}

/// The context and QP number of a live QP.
pub(crate) unsafe fn live_qp<'a>(qp: *mut IbvQp) -> Option<(&'a SvContext, u32)> {
    if !is_live(qp, Kind::Qp) {
        return None;
    }
    // SAFETY: a live QP of ours, with an open context.
    unsafe { Some((SvContext::from_ptr((*qp).context)?, (*qp).qp_num)) }
}

/// `ibv_modify_qp`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: i32) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, qpn)) = (unsafe { live_qp(qp) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL attributes.
    let a = match convert::qp_attr(unsafe { &*attr }, mask as u32) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let mask = QpAttrMask(mask as u32);
    if let Err(e) = ctx.backend().modify_qp(qpn, &a, mask) {
        return e.errno();
    }
    if mask.contains(QpAttrMask::STATE) {
        // SAFETY: live QP; the state field mirrors the last successful transition.
        unsafe { (*qp).state = a.qp_state.to_raw() };
    }
    0
}

/// `ibv_query_qp`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    _mask: i32,
    init_attr: *mut IbvQpInitAttr,
) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, qpn)) = (unsafe { live_qp(qp) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || init_attr.is_null() {
        return libc::EINVAL;
    }
    let (a, init) = match ctx.backend().query_qp(qpn) {
        Ok(v) => v,
        Err(e) => return e.errno(),
    };
    // SAFETY: both structures are writable (non-NULL); the QP is live.
    unsafe {
        attr.write(convert::qp_attr_raw(&a));
        (*init_attr).qp_context = (*qp).qp_context;
        (*init_attr).send_cq = (*qp).send_cq;
        (*init_attr).recv_cq = (*qp).recv_cq;
        (*init_attr).srq = (*qp).srq;
        (*init_attr).cap = IbvQpCap::from(&init.cap);
        (*init_attr).qp_type = init.qp_type.to_raw();
        (*init_attr).sq_sig_all = init.sq_sig_all as i32;
        (*qp).state = a.qp_state.to_raw();
    }
    0
}

/// `ibv_query_qp_data_in_order`: 0, no promise beyond the verbs ordering rules.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_qp_data_in_order(
    _qp: *mut IbvQp,
    _op: u32,
    _flags: u32,
) -> i32 {
    0
}

/// `ibv_destroy_qp`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_qp(qp: *mut IbvQp) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, qpn)) = (unsafe { live_qp(qp) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = ctx.backend().destroy_qp(qpn) {
        return e.errno();
    }
    unregister(qp, Kind::Qp);
    ctx.qps.lock().remove(&qpn);
    // SAFETY: made by Box::into_raw; unregistered: freed once.
    let sv = unsafe { Box::from_raw(qp as *mut SvQp) };
    sv.atomic.release(ctx);
    drop(sv);
    0
}
