//! Protection domains, memory regions (on the application's own memory, in place) and
//! memory windows.

use std::ffi::c_void;

use softverbs_api::{MwBind, MwBindInfo, MwType};

use crate::abi::*;
use crate::convert;
use crate::device::live_context;
use crate::handle::{fail_null, is_live, register, set_errno, unregister, Kind, SvContext};

/// `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_alloc_pd(context: *mut IbvContext) -> *mut IbvPd {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return fail_null(libc::EINVAL);
    };
    match ctx.backend().alloc_pd() {
        Ok(id) => {
            let pd = Box::into_raw(Box::new(IbvPd {
                context,
                handle: id,
            }));
            register(pd, Kind::Pd);
            pd
        }
        Err(e) => fail_null(e.errno()),
    }
}

/// `ibv_dealloc_pd`: EBUSY while MRs, QPs, SRQs, AHs or MWs use it.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_dealloc_pd(pd: *mut IbvPd) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, id)) = (unsafe { live_pd(pd) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = ctx.backend().dealloc_pd(id) {
        return e.errno();
    }
    unregister(pd, Kind::Pd);
    // SAFETY: made by Box::into_raw in alloc; unregistered: freed once.
    drop(unsafe { Box::from_raw(pd) });
    0
}

/// The context and backend id of a live PD.
pub(crate) unsafe fn live_pd<'a>(pd: *mut IbvPd) -> Option<(&'a SvContext, u32)> {
    if !is_live(pd, Kind::Pd) {
        return None;
    }
    // SAFETY: a live PD of ours, with an open context.
    unsafe { Some((SvContext::from_ptr((*pd).context)?, (*pd).handle)) }
}

unsafe fn register_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    // SAFETY: checked live.
    let Some((ctx, pd_id)) = (unsafe { live_pd(pd) }) else {
        return fail_null(libc::EINVAL);
    };
    if addr.is_null() && length > 0 {
        return fail_null(libc::EINVAL);
    }
    if iova != addr as u64 {
        // The emulator addresses remote accesses by virtual address.
        return fail_null(libc::EOPNOTSUPP);
    }
    // The application keeps [addr, addr + length) allocated until ibv_dereg_mr, as the
    // verbs contract requires; the emulator reads and writes it there, in place.
    let keys =
        match ctx
            .backend()
            .reg_mr(pd_id, addr as u64, length as u64, convert::access(access))
        {
            Ok(k) => k,
            Err(e) => return fail_null(e.errno()),
        };
    ctx.add_region(addr as u64, length as u64, keys.lkey);
    // SAFETY: pd is live.
    let context = unsafe { (*pd).context };
    let mr = Box::into_raw(Box::new(IbvMr {
        context,
        pd,
        addr,
        length,
        handle: keys.lkey,
        lkey: keys.lkey,
        rkey: keys.rkey,
    }));
    register(mr, Kind::Mr);
    mr
}

/// `ibv_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: i32,
) -> *mut IbvMr {
    // SAFETY: forwarded; register_mr checks the arguments.
    unsafe { register_mr(pd, addr, length, addr as u64, access as u32) }
}

/// `ibv_reg_mr_iova`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: i32,
) -> *mut IbvMr {
    // SAFETY: forwarded; register_mr checks the arguments.
    unsafe { register_mr(pd, addr, length, iova, access as u32) }
}

/// `ibv_reg_mr_iova2`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    // SAFETY: forwarded; register_mr checks the arguments.
    unsafe { register_mr(pd, addr, length, iova, access) }
}

/// `ibv_dereg_mr`: once it returns, the emulator no longer touches the memory.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_dereg_mr(mr: *mut IbvMr) -> i32 {
    if !is_live(mr, Kind::Mr) {
        return libc::EINVAL;
    }
    // SAFETY: a live MR of ours with an open context.
    let (ctx, lkey, addr) = unsafe {
        (
            SvContext::from_ptr((*mr).context).expect("open"),
            (*mr).lkey,
            (*mr).addr as u64,
        )
    };
    if let Err(e) = ctx.backend().dereg_mr(lkey) {
        return e.errno();
    }
    ctx.remove_region(addr, lkey);
    unregister(mr, Kind::Mr);
    // SAFETY: made by Box::into_raw; unregistered: freed once.
    drop(unsafe { Box::from_raw(mr) });
    0
}

/// IBV_REREG_MR_CHANGE_TRANSLATION | CHANGE_PD | CHANGE_ACCESS.
const REREG_FLAGS: i32 = 0b111;
/// IBV_REREG_MR_ERR_INPUT
const REREG_ERR_INPUT: i32 = -1;

/// `ibv_rereg_mr`: not supported (EOPNOTSUPP in errno). A re-registration keeps the MR's
/// keys, which peers already hold; the backend contract can only register anew, with new
/// keys. Bad input still gets EINVAL first.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_rereg_mr(
    mr: *mut IbvMr,
    flags: i32,
    _pd: *mut IbvPd,
    _addr: *mut c_void,
    _length: usize,
    _access: i32,
) -> i32 {
    if !is_live(mr, Kind::Mr) || flags & !REREG_FLAGS != 0 || flags == 0 {
        set_errno(libc::EINVAL);
        return REREG_ERR_INPUT;
    }
    set_errno(libc::EOPNOTSUPP);
    REREG_ERR_INPUT
}

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
