//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, and the reply addresses of UD
//! receives (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use softverbs_api::{AhAttr, VerbsContext as _};

use crate::abi::*;
use crate::convert;
use crate::handle::{
    fail_null, is_live, live_context, live_pd, register, unregister, Kind, SvContext,
};

/// `ibv_create_ah`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    // SAFETY: checked live.
    let Some((ctx, pd_id)) = (unsafe { live_pd(pd) }) else {
        return fail_null(libc::EINVAL);
    };
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL attributes.
    let a = match convert::ah_attr(unsafe { &*attr }) {
        Ok(a) => a,
        Err(e) => return fail_null(e),
    };
    match ctx.backend().create_ah(pd_id, &a) {
        Ok(id) => {
            let ah = Box::into_raw(Box::new(IbvAh {
                // SAFETY: pd is live.
                context: unsafe { (*pd).context },
                pd,
                handle: id,
            }));
            register(ah, Kind::Ah);
            ah
        }
        Err(e) => fail_null(e.errno()),
    }
}

/// `ibv_destroy_ah`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_ah(ah: *mut IbvAh) -> i32 {
    if !is_live(ah, Kind::Ah) {
        return libc::EINVAL;
    }
    // SAFETY: a live AH of ours.
    let (ctx, id) = unsafe {
        (
            SvContext::from_ptr((*ah).context).expect("open"),
            (*ah).handle,
        )
    };
    if let Err(e) = ctx.backend().destroy_ah(id) {
        return e.errno();
    }
    unregister(ah, Kind::Ah);
    // SAFETY: made by Box::into_raw; unregistered: freed once.
    drop(unsafe { Box::from_raw(ah) });
    0
}

/// IBV_WC_GRH
const WC_GRH: u32 = 1;

/// The reply address of a UD receive, sent from the local GID of the same address family.
fn reply_attr(ctx: &SvContext, port_num: u8, wc: &IbvWc, grh: &[u8; 40]) -> Result<AhAttr, i32> {
    if wc.wc_flags & WC_GRH == 0 {
        // RoCE has no LID routing: without a GRH there is no reply address.
        return Err(libc::EINVAL);
    }
    let mut a = AhAttr::from_grh(grh, 0, port_num).ok_or(libc::EINVAL)?;
    let want_v4 = a.dgid.to_ip().is_ipv4();
    let port = ctx.emu.query_port(port_num).map_err(|e| e.errno())?;
    let sgid = (0..port.gid_tbl_len)
        .filter_map(|i| ctx.emu.query_gid(port_num, i).ok())
        .find(|g| !g.gid.is_zero() && g.gid.to_ip().is_ipv4() == want_v4)
        .ok_or(libc::EINVAL)?;
    a.sgid_index = sgid.gid_index as u8;
    a.sl = wc.sl;
    Ok(a)
}

/// `ibv_init_ah_from_wc`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_init_ah_from_wc(
    context: *mut IbvContext,
    port_num: u8,
    wc: *mut IbvWc,
    grh: *mut [u8; 40],
    ah_attr: *mut IbvAhAttr,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if wc.is_null() || grh.is_null() || ah_attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL wc and 40-byte GRH area of the application.
    match reply_attr(ctx, port_num, unsafe { &*wc }, unsafe { &*grh }) {
        Ok(a) => {
            // SAFETY: writable, non-NULL.
            unsafe { ah_attr.write(IbvAhAttr::from(&a)) };
            0
        }
        Err(e) => e,
    }
}

/// `ibv_create_ah_from_wc`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *mut IbvWc,
    grh: *mut [u8; 40],
    port_num: u8,
) -> *mut IbvAh {
    if !is_live(pd, Kind::Pd) {
        return fail_null(libc::EINVAL);
    }
    let mut attr = IbvAhAttr::default();
    // SAFETY: pd is live; the rest is checked by the callee.
    let rc = unsafe { sv_ibv_init_ah_from_wc((*pd).context, port_num, wc, grh, &mut attr) };
    if rc != 0 {
        return fail_null(rc);
    }
    // SAFETY: live pd, local attributes.
    unsafe { sv_ibv_create_ah(pd, &mut attr) }
}
