//! Protection domains: `ibv_alloc_pd`, `ibv_dealloc_pd`.

use crate::abi::*;
use crate::handle::{fail_null, live_context, live_pd, register, unregister, Kind};

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
