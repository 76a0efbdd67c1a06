//! The verbs objects of an id, made with the drop-in's own calls so that `id->qp`,
//! `id->send_cq` ... are ordinary ibverbs objects: `rdma_create_qp(_ex)` (with CQs and
//! completion channels of its own unless given, as librdmacm makes them; the QP moved to
//! INIT, or to RTS with rdma_cm's Q_Key for UD), `rdma_destroy_qp`, `rdma_create_srq(_ex)`,
//! `rdma_destroy_srq`, and `rdma_init_qp_attr`.

use std::ffi::c_void;

use softverbs_api::c_layout::IbvQpAttr;
use softverbs_emu::cm::QpRequest;
use softverbs_emu::cm_service::qp_moves;

use super::abi::*;
use super::shared::{live_id, qp_type_of};
use crate::abi::{IbvPd, IbvQpInitAttr, IbvQpInitAttrEx, IbvSrqInitAttr, IbvSrqInitAttrEx};
use crate::channel::{sv_ibv_create_comp_channel, sv_ibv_destroy_comp_channel};
use crate::cq::{sv_ibv_create_cq, sv_ibv_destroy_cq};
use crate::handle::set_errno;
use crate::qp::{sv_create_qp_ex, sv_ibv_destroy_qp, sv_ibv_modify_qp};
use crate::srq::{sv_create_srq_ex, sv_ibv_destroy_srq};

const QPT_UD: u32 = 4;
/// IBV_QP_INIT_ATTR_PD
const QP_INIT_ATTR_PD: u32 = 1;
/// IBV_SRQ_INIT_ATTR_PD
const SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// IBV_QPS_INIT / RTR / RTS
const QPS_INIT: u32 = 1;
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
/// IBV_QP_STATE | PKEY_INDEX | PORT, and ACCESS_FLAGS / QKEY / SQ_PSN.
const MASK_STATE: i32 = 1;
const MASK_ACCESS: i32 = 1 << 3;
const MASK_PKEY_PORT: i32 = (1 << 4) | (1 << 5);
const MASK_QKEY: i32 = 1 << 6;
const MASK_SQ_PSN: i32 = 1 << 16;
/// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC: rdma_cm opens a connected QP
/// to what the connection's responder resources allow; the emulator checks each request
/// against the MR, so the QP grants all.
const CONN_ACCESS: u32 = 1 | 2 | 4 | 8;

/// The attributes rdma_cm gives a new QP for `state` (INIT, or for UD also RTR / RTS).
fn init_attrs(ud: bool, state: u32) -> (IbvQpAttr, i32) {
    let mut a = IbvQpAttr {
        qp_state: state,
        ..IbvQpAttr::default()
    };
    match state {
        QPS_INIT => {
            a.port_num = 1;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                (a, MASK_STATE | MASK_PKEY_PORT | MASK_QKEY)
            } else {
                a.qp_access_flags = CONN_ACCESS;
                (a, MASK_STATE | MASK_PKEY_PORT | MASK_ACCESS)
            }
        }
        QPS_RTS => (a, MASK_STATE | MASK_SQ_PSN),
        _ => (a, MASK_STATE),
    }
}

/// Makes the id's CQs (each with its own completion channel, the id as CQ context) where
/// `attr` names none; returns whether it made any.
///
/// # Safety
/// `id` is a live id bound to a device.
unsafe fn make_cqs(id: *mut RdmaCmId, attr: &mut IbvQpInitAttrEx) -> Result<bool, i32> {
    let mut made = false;
    // SAFETY: per the contract; each object is made on the id's own context.
    unsafe {
        let verbs = (*id).verbs;
        for (size, cq, channel, slot) in [
            (
                attr.cap.max_recv_wr,
                &mut (*id).recv_cq,
                &mut (*id).recv_cq_channel,
                &mut attr.recv_cq,
            ),
            (
                attr.cap.max_send_wr,
                &mut (*id).send_cq,
                &mut (*id).send_cq_channel,
                &mut attr.send_cq,
            ),
        ] {
            if slot.is_null() && cq.is_null() {
                let ch = sv_ibv_create_comp_channel(verbs);
                if ch.is_null() {
                    return Err(libc::ENOMEM);
                }
                let made_cq = sv_ibv_create_cq(verbs, size.max(1) as i32, id as *mut c_void, ch, 0);
                if made_cq.is_null() {
                    sv_ibv_destroy_comp_channel(ch);
                    return Err(libc::ENOMEM);
                }
                *channel = ch;
                *cq = made_cq;
                made = true;
            }
            if slot.is_null() {
                *slot = *cq;
            }
        }
    }
    Ok(made)
}

/// Destroys the CQs and channels the library made for the id.
///
/// # Safety
/// `id` is a live id.
unsafe fn destroy_cqs(id: *mut RdmaCmId) {
    // SAFETY: per the contract; the objects were made by make_cqs.
    unsafe {
        for (cq, channel) in [
            (&mut (*id).recv_cq, &mut (*id).recv_cq_channel),
            (&mut (*id).send_cq, &mut (*id).send_cq_channel),
        ] {
            if !cq.is_null() {
                sv_ibv_destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !channel.is_null() {
                sv_ibv_destroy_comp_channel(*channel);
                *channel = std::ptr::null_mut();
            }
        }
    }
}

/// rdma_create_qp_ex's work, with an errno on failure.
///
/// # Safety
/// `id` is a live id; `attr` a writable `ibv_qp_init_attr_ex`.
pub unsafe fn create_qp_on(
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: &mut IbvQpInitAttrEx,
) -> Result<(), i32> {
    // SAFETY: checked live inside.
    let inner = unsafe { live_id(id) }.ok_or(libc::EINVAL)?;
    // SAFETY: a live id: the library's own fields.
    let (verbs, id_pd, has_qp, id_srq) =
        unsafe { ((*id).verbs, (*id).pd, !(*id).qp.is_null(), (*id).srq) };
    if has_qp || verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if pd.is_null() { id_pd } else { pd };
    // SAFETY: a PD is checked live before its context is read.
    if pd.is_null()
        || !crate::handle::is_live(pd, crate::handle::Kind::Pd)
        || unsafe { (*pd).context } != verbs
    {
        return Err(libc::EINVAL);
    }
    attr.pd = pd;
    attr.comp_mask |= QP_INIT_ATTR_PD;
    if attr.srq.is_null() {
        attr.srq = id_srq;
    }
    if attr.qp_type == 0 {
        attr.qp_type = qp_type_of(inner.ps);
    }
    // SAFETY: live id bound to a device (verbs checked).
    let made_cqs = unsafe { make_cqs(id, attr) }?;
    // SAFETY: verbs is the id's live context; attr is a complete init_attr_ex.
    let qp = unsafe { sv_create_qp_ex(verbs, attr as *mut IbvQpInitAttrEx) };
    let undo = |e: i32| {
        if made_cqs {
            // SAFETY: live id; the CQs were just made.
            unsafe { destroy_cqs(id) };
        }
        Err(e)
    };
    if qp.is_null() {
        // SAFETY: reading the calling thread's errno.
        return undo(unsafe { *libc::__errno_location() });
    }
    let ud = attr.qp_type == QPT_UD;
    let states: &[u32] = if ud {
        &[QPS_INIT, QPS_RTR, QPS_RTS]
    } else {
        &[QPS_INIT]
    };
    for &state in states {
        let (mut a, mask) = init_attrs(ud, state);
        // SAFETY: qp was just made by this library.
        let rc = unsafe { sv_ibv_modify_qp(qp, &mut a as *mut IbvQpAttr as *mut _, mask) };
        if rc != 0 {
            // SAFETY: as above.
            unsafe { sv_ibv_destroy_qp(qp) };
            return undo(rc);
        }
    }
    inner.state.lock().own_cqs |= made_cqs;
    // SAFETY: live id: the library's own fields.
    unsafe {
        (*id).qp = qp;
        (*id).pd = pd;
    }
    Ok(())
}

/// `rdma_create_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_qp_ex(
    id: *mut RdmaCmId,
    attr: *mut IbvQpInitAttrEx,
) -> i32 {
    if attr.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes, writable as librdmacm's signature says.
    let pd = unsafe {
        if (*attr).comp_mask & QP_INIT_ATTR_PD != 0 {
            (*attr).pd
        } else {
            std::ptr::null_mut()
        }
    };
    // SAFETY: as above.
    match unsafe { create_qp_on(id, pd, &mut *attr) } {
        Ok(()) => 0,
        Err(e) => super::fail(e),
    }
}

/// `rdma_create_qp`: `attr`'s capabilities are updated to what the QP got, as
/// ibv_create_qp does.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_qp(
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> i32 {
    if attr.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let mut ex = ex_attr(a);
    // SAFETY: as above.
    match unsafe { create_qp_on(id, pd, &mut ex) } {
        Ok(()) => {
            a.cap = ex.cap;
            0
        }
        Err(e) => super::fail(e),
    }
}

/// An `ibv_qp_init_attr` as the `_ex` form.
pub fn ex_attr(a: &IbvQpInitAttr) -> IbvQpInitAttrEx {
    // SAFETY: a plain C struct of pointers and integers; all-zero is its empty value.
    let mut ex: IbvQpInitAttrEx = unsafe { std::mem::zeroed() };
    ex.qp_context = a.qp_context;
    ex.send_cq = a.send_cq;
    ex.recv_cq = a.recv_cq;
    ex.srq = a.srq;
    ex.cap = a.cap;
    ex.qp_type = a.qp_type;
    ex.sq_sig_all = a.sq_sig_all;
    ex
}

/// `rdma_destroy_qp`: the QP, and the CQs and channels the library made for it.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_qp(id: *mut RdmaCmId) {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        set_errno(libc::EINVAL);
        return;
    };
    // SAFETY: a live id: the library's own fields and objects.
    unsafe {
        if !(*id).qp.is_null() {
            // Attached to a group, the QP would not go (EBUSY).
            super::mcast::detach_all(&inner, id);
            sv_ibv_destroy_qp((*id).qp);
            (*id).qp = std::ptr::null_mut();
        }
        if std::mem::take(&mut inner.state.lock().own_cqs) {
            destroy_cqs(id);
        }
    }
}

/// `rdma_create_srq_ex`: an SRQ on the id's PD (unless the attributes name one).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_srq_ex(
    id: *mut RdmaCmId,
    attr: *mut IbvSrqInitAttrEx,
) -> i32 {
    // SAFETY: checked live inside.
    if attr.is_null() || unsafe { live_id(id) }.is_none() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: a live id and the caller's writable attributes.
    unsafe {
        if !(*id).srq.is_null() || (*id).verbs.is_null() {
            return super::fail(libc::EINVAL);
        }
        if (*attr).comp_mask & SRQ_INIT_ATTR_PD == 0 || (*attr).pd.is_null() {
            (*attr).pd = (*id).pd;
            (*attr).comp_mask |= SRQ_INIT_ATTR_PD;
        }
        let srq = sv_create_srq_ex((*id).verbs, attr as *mut c_void);
        if srq.is_null() {
            return -1;
        }
        (*id).srq = srq;
    }
    0
}

/// `rdma_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_srq(
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvSrqInitAttr,
) -> i32 {
    if attr.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: a plain C struct; zero is its empty value.
    let mut ex: IbvSrqInitAttrEx = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's attributes.
    unsafe {
        ex.srq_context = (*attr).srq_context;
        ex.attr = (*attr).attr;
    }
    if !pd.is_null() {
        ex.pd = pd;
        ex.comp_mask = SRQ_INIT_ATTR_PD;
    }
    // SAFETY: as above.
    let rc = unsafe { sv_rdma_create_srq_ex(id, &mut ex) };
    if rc == 0 {
        // SAFETY: as above: what the SRQ got.
        unsafe { (*attr).attr = ex.attr };
    }
    rc
}

/// `rdma_destroy_srq`.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_srq(id: *mut RdmaCmId) {
    // SAFETY: checked live first; then the id's own SRQ.
    unsafe {
        if live_id(id).is_some() && !(*id).srq.is_null() {
            sv_ibv_destroy_srq((*id).srq);
            (*id).srq = std::ptr::null_mut();
        }
    }
}

/// `rdma_init_qp_attr`: the attributes rdma_cm would move the id's QP with to
/// `attr->qp_state` (INIT: port, P_Key index, access / Q_Key; RTR and RTS of UD: none
/// beyond the state; RTR / RTS of a connection: exactly those the device's CM moves its
/// own QPs with, once the peer's QP is known).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_init_qp_attr(
    id: *mut RdmaCmId,
    attr: *mut IbvQpAttr,
    mask: *mut i32,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    if attr.is_null() || mask.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller's writable attributes.
    let (attr, mask) = unsafe { (&mut *attr, &mut *mask) };
    let ud = inner.ps == softverbs_emu::wire::cm::PortSpace::Udp;
    let state = attr.qp_state;
    if state == QPS_INIT || ud {
        let (a, m) = init_attrs(ud, state);
        *attr = a;
        *mask = m;
        return 0;
    }
    let st = inner.state.lock();
    let attrs = match (&st.dev, st.core) {
        (Some(dev), Some(core)) => dev.service.qp_attrs(core),
        _ => None,
    };
    drop(st);
    // SAFETY: live id: its QP number, for the request (the number itself is not used).
    let qpn = unsafe { (*id).qp.as_ref() }.map_or(0, |q| q.qp_num);
    let request = match (state, attrs) {
        (QPS_RTR, Some((rtr, _))) => QpRequest::Rtr { qpn, attrs: rtr },
        (QPS_RTS, Some((_, rts))) => QpRequest::Rts { qpn, attrs: rts },
        // Before the peer's QP is known, or another state: nothing to give.
        _ => return super::fail(libc::EINVAL),
    };
    // Exactly what the CM moves a QP of its own with.
    let (_, qp_attr, qp_mask) = qp_moves::attr_and_mask(&request);
    let a = IbvQpAttr::from(&qp_attr);
    *mask = qp_mask.0 as i32;
    *attr = a;
    0
}
