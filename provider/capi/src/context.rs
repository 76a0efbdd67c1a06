//! Contexts: `ibv_open_device` builds the `verbs_context` (with the `ibv_context_ops` and
//! extended operations tables that verbs.h's inline functions call through), and
//! `ibv_close_device` frees it. This file is where the tables name every module's entry
//! points; the modules themselves never import it.

use std::ffi::c_void;

use softverbs_api::VerbsContext as _;
use softverbs_emu::engine;

use crate::abi::*;
use crate::device::{device_name, sv_query_device_ex, sv_query_port_ex};
use crate::handle::{fail_null, register, unregister, Kind, SvContext};
use crate::{channel, cq, mw, post, qp, srq};

/// `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    // SAFETY: device is NULL or ours.
    let Some(name) = (unsafe { device_name(device) }) else {
        return fail_null(libc::EINVAL);
    };
    let emu = match engine::open_device(name) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("softverbs libibverbs.so.1: opening {name}: {e}");
            return fail_null(e.errno());
        }
    };
    let async_fd = emu.async_event_fd().unwrap_or(-1);
    if async_fd >= 0 {
        channel::make_blocking(async_fd);
    }
    // Programs dup or poll cmd_fd; the emulator has no command channel, so it is a
    // descriptor of /dev/null that the context owns (closed by ibv_close_device).
    // SAFETY: open(2) of a constant path; the result is checked.
    let cmd_fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let ctx = Box::new(SvContext {
        vctx: VerbsContext {
            query_port: Some(sv_query_port_ex),
            unsupported0: [0; 24],
            create_cq_ex: Some(cq::sv_create_cq_ex),
            private: 0,
            query_device_ex: Some(sv_query_device_ex),
            unsupported1: [0; 5],
            create_qp_ex: Some(qp::sv_create_qp_ex),
            get_srq_num: 0,
            create_srq_ex: Some(srq::sv_create_srq_ex),
            unsupported2: [0; 3],
            sz: std::mem::size_of::<VerbsContext>(),
            context: IbvContext {
                device,
                ops: IbvContextOps {
                    compat0: [0; 7],
                    alloc_mw: Some(mw::sv_alloc_mw),
                    bind_mw: Some(mw::sv_bind_mw),
                    dealloc_mw: Some(mw::sv_dealloc_mw),
                    compat1: 0,
                    poll_cq: Some(cq::sv_poll_cq),
                    req_notify_cq: Some(cq::sv_req_notify_cq),
                    compat2: [0; 7],
                    post_srq_recv: Some(post::sv_post_srq_recv),
                    compat3: [0; 4],
                    post_send: Some(post::sv_post_send),
                    post_recv: Some(post::sv_post_recv),
                    compat4: [0; 5],
                },
                cmd_fd,
                async_fd,
                num_comp_vectors: 1,
                mutex: PthreadMutex([0; std::mem::size_of::<libc::pthread_mutex_t>()]),
                // __VERBS_ABI_IS_EXTENDED: this context is a verbs_context.
                abi_compat: usize::MAX as *mut c_void,
            },
        },
        emu,
        cqs: Default::default(),
        qps: Default::default(),
        srqs: Default::default(),
        regions: Default::default(),
    });
    let ctx = Box::into_raw(ctx);
    // SAFETY: ctx was just allocated; the field pointer stays valid until close.
    let ibv = unsafe { std::ptr::addr_of_mut!((*ctx).vctx.context) };
    register(ibv, Kind::Context);
    ibv
}

/// `ibv_close_device`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_close_device(context: *mut IbvContext) -> i32 {
    if !unregister(context, Kind::Context) {
        return libc::EINVAL;
    }
    // SAFETY: a live context of ours: recover and free the box made by open.
    let sv = unsafe { SvContext::from_ptr(context) }.expect("non-null") as *const SvContext;
    // SAFETY: sv came from Box::into_raw in sv_ibv_open_device and is unregistered now.
    let sv = unsafe { Box::from_raw(sv as *mut SvContext) };
    if sv.vctx.context.cmd_fd >= 0 {
        // SAFETY: the /dev/null descriptor open made for this context.
        unsafe { libc::close(sv.vctx.context.cmd_fd) };
    }
    drop(sv);
    0
}
