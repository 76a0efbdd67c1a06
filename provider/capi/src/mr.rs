//! Memory regions on the application's own memory, in place: `ibv_reg_mr` (and the iova
//! variants), `ibv_rereg_mr`, `ibv_dereg_mr`.

use std::ffi::c_void;

use crate::abi::*;
use crate::convert;
use crate::handle::{
    fail_null, is_live, live_pd, register, set_errno, unregister, Kind, SvContext,
};

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
