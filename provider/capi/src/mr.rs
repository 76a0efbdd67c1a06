//! Memory regions on the application's own memory, in place: `ibv_reg_mr` (and the iova
//! variants), `ibv_rereg_mr`, `ibv_dereg_mr`.

use std::ffi::c_void;

use crate::abi::*;
use crate::convert;
use crate::handle::{
    fail_null, is_live, live_pd, register, set_errno, unregister, Kind, SvContext,
};

/// An MR: the `ibv_mr` applications see, then what `ibv_rereg_mr` must keep of the
/// registration and `ibv_mr` does not hold.
#[repr(C)]
struct SvMr {
    /// What applications see.
    mr: IbvMr,
    /// The raw `ibv_access_flags` it was registered with.
    access: u32,
}

/// Registers `[addr, addr + length)` of the application's memory (`iova` must be `addr`:
/// the emulator addresses remote accesses by virtual address).
///
/// # Safety
/// `pd` is NULL or a pointer C handed us (checked against the live table).
pub(crate) unsafe fn register_mr(
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
    let mr = Box::into_raw(Box::new(SvMr {
        mr: IbvMr {
            context,
            pd,
            addr,
            length,
            handle: keys.lkey,
            lkey: keys.lkey,
            rkey: keys.rkey,
        },
        access,
    })) as *mut IbvMr;
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
    // SAFETY: made by Box::into_raw of an SvMr; unregistered: freed once.
    drop(unsafe { Box::from_raw(mr as *mut SvMr) });
    0
}

/// IBV_REREG_MR_CHANGE_TRANSLATION: new address and length.
const REREG_CHANGE_TRANSLATION: i32 = 1;
/// IBV_REREG_MR_CHANGE_PD.
const REREG_CHANGE_PD: i32 = 1 << 1;
/// IBV_REREG_MR_CHANGE_ACCESS.
const REREG_CHANGE_ACCESS: i32 = 1 << 2;
/// IBV_REREG_MR_FLAGS_SUPPORTED.
const REREG_FLAGS: i32 = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;
/// IBV_REREG_MR_ERR_INPUT: the arguments fail libibverbs' own checks (errno EINVAL).
const REREG_ERR_INPUT: i32 = -1;
/// IBV_REREG_MR_ERR_CMD: the re-registration itself failed (errno says why).
const REREG_ERR_CMD: i32 = -4;

/// `ibv_rereg_mr`: changes the MR's range, PD and/or access, as `flags` says.
///
/// Returns 0, IBV_REREG_MR_ERR_INPUT (errno EINVAL) for what libibverbs rejects before
/// asking the kernel (unknown flags, CHANGE_TRANSLATION with a NULL address or zero length,
/// an access without CHANGE_ACCESS, and here also a handle that is not a live MR), or
/// IBV_REREG_MR_ERR_CMD with errno for what the kernel rejects (no flag, a PD that is not
/// live or of another context, invalid access, windows bound to the MR: EBUSY). The
/// emulator re-registers in place, so `lkey` and `rkey` stay what they were (as on mlx5 and
/// rxe: a peer's rkey stays valid). On any error the MR is unchanged and still registered. The dontfork / dofork steps of libibverbs have nothing to do here (the
/// emulator pins no pages), so their error codes never occur.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_rereg_mr(
    mr: *mut IbvMr,
    flags: i32,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: i32,
) -> i32 {
    let translation = flags & REREG_CHANGE_TRANSLATION != 0;
    if !is_live(mr, Kind::Mr)
        || flags & !REREG_FLAGS != 0
        || (translation && (addr.is_null() || length == 0))
        || (access != 0 && flags & REREG_CHANGE_ACCESS == 0)
    {
        set_errno(libc::EINVAL);
        return REREG_ERR_INPUT;
    }
    let failed = |errno: i32| {
        set_errno(errno);
        REREG_ERR_CMD
    };
    if flags == 0 {
        return failed(libc::EINVAL);
    }
    // SAFETY: a live MR of ours (an SvMr) with an open context; the application does not
    // use it from another thread during the call (ibv_rereg_mr(3)).
    let (ctx, old) = unsafe {
        (
            SvContext::from_ptr((*mr).context).expect("open"),
            &mut *(mr as *mut SvMr),
        )
    };
    let (new_pd, pd_id) = if flags & REREG_CHANGE_PD != 0 {
        // SAFETY: checked live.
        match unsafe { live_pd(pd) } {
            Some((pd_ctx, id)) if std::ptr::eq(pd_ctx, ctx) => (pd, id),
            _ => return failed(libc::EINVAL),
        }
    } else {
        // SAFETY: the MR's PD is live: a PD with MRs cannot be deallocated.
        (old.mr.pd, unsafe { (*old.mr.pd).handle })
    };
    let (new_addr, new_length) = if translation {
        (addr, length)
    } else {
        (old.mr.addr, old.mr.length)
    };
    let new_access = if flags & REREG_CHANGE_ACCESS != 0 {
        access as u32
    } else {
        old.access
    };
    // As for ibv_reg_mr, the application keeps the new range allocated until dereg.
    let keys = match ctx.backend().rereg_mr(
        old.mr.lkey,
        pd_id,
        new_addr as u64,
        new_length as u64,
        convert::access(new_access),
    ) {
        Ok(k) => k,
        Err(e) => return failed(e.errno()),
    };
    // Forgotten first: an in-place re-registration keeps the lkey (and maybe the address).
    ctx.remove_region(old.mr.addr as u64, old.mr.lkey);
    ctx.add_region(new_addr as u64, new_length as u64, keys.lkey);
    old.mr.pd = new_pd;
    old.mr.addr = new_addr;
    old.mr.length = new_length;
    old.mr.handle = keys.lkey;
    old.mr.lkey = keys.lkey;
    old.mr.rkey = keys.rkey;
    old.access = new_access;
    0
}
