//! UD multicast from C: `ibv_attach_mcast` and `ibv_detach_mcast` (the emulator's groups,
//! see `softverbs_emu::engine::multicast`). The LID is ignored, as on every RoCE device.

use crate::abi::IbvQp;
use crate::qp::live_qp;
use softverbs_api::c_layout::IbvGid;
use softverbs_api::Gid;

/// `ibv_attach_mcast`: 0, or the errno (EINVAL for a destroyed QP, a NULL or unicast GID,
/// a QP that is not UD; ENOMEM beyond the device's limits).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_attach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> i32 {
    // SAFETY: the caller's pointers, checked live / non-NULL inside.
    unsafe {
        with_group(qp, gid, |ctx, qpn, gid| {
            ctx.backend().attach_mcast(qpn, gid)
        })
    }
}

/// `ibv_detach_mcast`: 0, or the errno (EINVAL when the QP is not attached to the group).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_detach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> i32 {
    // SAFETY: as above.
    unsafe {
        with_group(qp, gid, |ctx, qpn, gid| {
            ctx.backend().detach_mcast(qpn, gid)
        })
    }
}

/// Runs `call` on a live QP's context, its number and the GID `gid` points to.
///
/// # Safety
/// `gid`, when non-NULL, points to 16 readable bytes.
unsafe fn with_group(
    qp: *mut IbvQp,
    gid: *const IbvGid,
    call: impl FnOnce(&crate::handle::SvContext, u32, &Gid) -> softverbs_api::VerbsResult<()>,
) -> i32 {
    // SAFETY: checked live.
    let Some((ctx, qpn)) = (unsafe { live_qp(qp) }) else {
        return libc::EINVAL;
    };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL, and the caller's to read (verbs.h's `const union ibv_gid *`).
    let gid = Gid(unsafe { (*gid).0 });
    match call(ctx, qpn, &gid) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}
