//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw`, `ibv_bind_mw` (type 1) and the bind
//! target that BIND_MW work requests (type 2) share with it.

use softverbs_api::{MwBind, MwBindInfo, MwType};

use crate::abi::*;
use crate::convert;
use crate::handle::{fail_null, is_live, live_pd, register, unregister, Kind, SvContext};

/// `ibv_context_ops.alloc_mw`.
pub unsafe extern "C" fn sv_alloc_mw(pd: *mut IbvPd, mw_type: u32) -> *mut IbvMw {
    // SAFETY: checked live.
    let Some((ctx, pd_id)) = (unsafe { live_pd(pd) }) else {
        return fail_null(libc::EINVAL);
    };
    let t = match mw_type {
        1 => MwType::Type1,
        2 => MwType::Type2,
        _ => return fail_null(libc::EINVAL),
    };
    match ctx.backend().alloc_mw(pd_id, t) {
        Ok((id, rkey)) => {
            // SAFETY: pd is live.
            let context = unsafe { (*pd).context };
            let mw = Box::into_raw(Box::new(IbvMw {
                context,
                pd,
                rkey,
                handle: id,
                mw_type,
            }));
            register(mw, Kind::Mw);
            mw
        }
        Err(e) => fail_null(e.errno()),
    }
}

/// `ibv_context_ops.dealloc_mw`.
pub unsafe extern "C" fn sv_dealloc_mw(mw: *mut IbvMw) -> i32 {
    if !is_live(mw, Kind::Mw) {
        return libc::EINVAL;
    }
    // SAFETY: a live MW of ours.
    let (ctx, id) = unsafe {
        (
            SvContext::from_ptr((*mw).context).expect("open"),
            (*mw).handle,
        )
    };
    if let Err(e) = ctx.backend().dealloc_mw(id) {
        return e.errno();
    }
    unregister(mw, Kind::Mw);
    // SAFETY: made by Box::into_raw; unregistered: freed once.
    drop(unsafe { Box::from_raw(mw) });
    0
}

/// The contract's bind target of `struct ibv_mw_bind_info` (a NULL MR unbinds).
pub(crate) fn bind_info(b: &IbvMwBindInfo) -> Result<MwBindInfo, i32> {
    let mr_lkey = if b.mr.is_null() {
        0
    } else if is_live(b.mr, Kind::Mr) {
        // SAFETY: a live MR.
        unsafe { (*b.mr).lkey }
    } else {
        return Err(libc::EINVAL);
    };
    Ok(MwBindInfo {
        mr_lkey,
        addr: b.addr,
        length: b.length,
        mw_access_flags: convert::access(b.mw_access_flags),
    })
}

/// `ibv_context_ops.bind_mw` (type 1 windows): updates `mw->rkey`.
pub unsafe extern "C" fn sv_bind_mw(qp: *mut IbvQp, mw: *mut IbvMw, bind: *mut IbvMwBind) -> i32 {
    if !is_live(qp, Kind::Qp) || !is_live(mw, Kind::Mw) || bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: live QP and MW of ours, bind non-NULL.
    let (ctx, qpn, b) = unsafe {
        (
            SvContext::from_ptr((*qp).context).expect("open"),
            (*qp).qp_num,
            &*bind,
        )
    };
    let info = match bind_info(&b.bind_info) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let arg = MwBind {
        wr_id: b.wr_id,
        send_flags: convert::send_flags(b.send_flags),
        bind_info: info,
    };
    // SAFETY: live MW.
    match ctx.backend().bind_mw(qpn, unsafe { (*mw).handle }, &arg) {
        Ok(rkey) => {
            // SAFETY: live MW.
            unsafe { (*mw).rkey = rkey };
            0
        }
        Err(e) => e.errno(),
    }
}
