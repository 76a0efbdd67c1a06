//! The work-request builder of `ibv_qp_ex` (`ibv_wr_start`, `ibv_wr_rdma_write`,
//! `ibv_wr_set_sge`, ..., `ibv_wr_complete`): the WRs are collected between start and
//! complete and posted as one list; the first builder error fails the complete.

use std::ffi::c_void;

use softverbs_api::wr::{FlushParams, RemoteAddr};
use softverbs_api::{SendFlags, SendWr, Sge, WrOpcode};

use crate::abi::*;
use crate::handle::{SvContext, SvQp};
use crate::post::{bind_wr, blank_send_wr, sges, ud_dest};

/// IBV_QP_EX_WITH_* operations the builder supports: RDMA write (+imm), send (+imm),
/// RDMA read, both atomics, local invalidate, bind MW, send with invalidate, atomic write
/// and flush (not TSO).
pub const SEND_OPS: u64 = 0b1111111111 | (1 << 11) | (1 << 12);

/// The `ibv_qp_ex` of a new QP, with every builder function set.
pub fn new_qp_ex(qp: IbvQp) -> IbvQpEx {
    IbvQpEx {
        qp_base: qp,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: Some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: Some(wr_atomic_fetch_add),
        wr_bind_mw: Some(wr_bind_mw),
        wr_local_inv: Some(wr_local_inv),
        wr_rdma_read: Some(wr_rdma_read),
        wr_rdma_write: Some(wr_rdma_write),
        wr_rdma_write_imm: Some(wr_rdma_write_imm),
        wr_send: Some(wr_send),
        wr_send_imm: Some(wr_send_imm),
        wr_send_inv: Some(wr_send_inv),
        wr_send_tso: Some(wr_send_tso),
        wr_set_ud_addr: Some(wr_set_ud_addr),
        wr_set_xrc_srqn: Some(wr_set_xrc_srqn),
        wr_set_inline_data: Some(wr_set_inline_data),
        wr_set_inline_data_list: Some(wr_set_inline_data_list),
        wr_set_sge: Some(wr_set_sge),
        wr_set_sge_list: Some(wr_set_sge_list),
        wr_start: Some(wr_start),
        wr_complete: Some(wr_complete),
        wr_abort: Some(wr_abort),
        wr_atomic_write: Some(wr_atomic_write),
        wr_flush: Some(wr_flush),
    }
}

fn sv<'a>(qp: *mut IbvQpEx) -> &'a SvQp {
    // SAFETY: the application calls these through the table of a QP we made: an SvQp.
    unsafe { &*(qp as *const SvQp) }
}

/// Starts a new WR with the QP's current `wr_id` and `wr_flags`.
fn push(qp: *mut IbvQpEx, opcode: WrOpcode, fill: impl FnOnce(&mut SendWr)) {
    // SAFETY: our QP; wr_id / wr_flags are plain fields the application set.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    let mut wr = blank_send_wr(wr_id, opcode, flags);
    fill(&mut wr);
    sv(qp).building.lock().wrs.push(wr);
}

/// Changes the WR being built (the last one), or records EINVAL if there is none.
fn last(qp: *mut IbvQpEx, change: impl FnOnce(&mut SendWr) -> Result<(), i32>) {
    let mut b = sv(qp).building.lock();
    let result = match b.wrs.last_mut() {
        Some(wr) => change(wr),
        None => Err(libc::EINVAL),
    };
    if let Err(e) = result {
        b.error.get_or_insert(e);
    }
}

fn fail(qp: *mut IbvQpEx, errno: i32) {
    sv(qp).building.lock().error.get_or_insert(errno);
}

fn remote(rkey: u32, remote_addr: u64) -> RemoteAddr {
    RemoteAddr { remote_addr, rkey }
}

extern "C" fn wr_start(qp: *mut IbvQpEx) {
    let mut b = sv(qp).building.lock();
    b.wrs.clear();
    b.error = None;
}

extern "C" fn wr_abort(qp: *mut IbvQpEx) {
    wr_start(qp);
}

extern "C" fn wr_complete(qp: *mut IbvQpEx) -> i32 {
    let (wrs, error) = {
        let mut b = sv(qp).building.lock();
        (std::mem::take(&mut b.wrs), b.error.take())
    };
    if let Some(e) = error {
        return e;
    }
    // SAFETY: our QP, with an open context.
    let ctx = unsafe { SvContext::from_ptr((*qp).qp_base.context).expect("open") };
    let sv = sv(qp);
    match crate::bounce::post_send(ctx, sv.pd_id, &sv.poster, wrs) {
        Ok(()) => 0,
        Err(e) => e.error.errno(),
    }
}

extern "C" fn wr_atomic_cmp_swp(qp: *mut IbvQpEx, rkey: u32, addr: u64, compare: u64, swap: u64) {
    push(qp, WrOpcode::AtomicCmpAndSwp, |w| {
        w.remote = remote(rkey, addr);
        w.compare_add = compare;
        w.swap = swap;
    });
}

extern "C" fn wr_atomic_fetch_add(qp: *mut IbvQpEx, rkey: u32, addr: u64, add: u64) {
    push(qp, WrOpcode::AtomicFetchAndAdd, |w| {
        w.remote = remote(rkey, addr);
        w.compare_add = add;
    });
}

extern "C" fn wr_bind_mw(qp: *mut IbvQpEx, mw: *mut IbvMw, rkey: u32, info: *const IbvMwBindInfo) {
    if info.is_null() {
        return fail(qp, libc::EINVAL);
    }
    // SAFETY: non-NULL bind info of the application.
    match bind_wr(mw, rkey, unsafe { &*info }) {
        Ok(b) => push(qp, WrOpcode::BindMw, |w| w.bind_mw = Some(b)),
        Err(e) => fail(qp, e),
    }
}

extern "C" fn wr_local_inv(qp: *mut IbvQpEx, rkey: u32) {
    push(qp, WrOpcode::LocalInv, |w| w.invalidate_rkey = rkey);
}

extern "C" fn wr_rdma_read(qp: *mut IbvQpEx, rkey: u32, addr: u64) {
    push(qp, WrOpcode::RdmaRead, |w| w.remote = remote(rkey, addr));
}

extern "C" fn wr_rdma_write(qp: *mut IbvQpEx, rkey: u32, addr: u64) {
    push(qp, WrOpcode::RdmaWrite, |w| w.remote = remote(rkey, addr));
}

extern "C" fn wr_rdma_write_imm(qp: *mut IbvQpEx, rkey: u32, addr: u64, imm_be: u32) {
    push(qp, WrOpcode::RdmaWriteWithImm, |w| {
        w.remote = remote(rkey, addr);
        w.imm_data = u32::from_be(imm_be);
    });
}

extern "C" fn wr_send(qp: *mut IbvQpEx) {
    push(qp, WrOpcode::Send, |_| {});
}

extern "C" fn wr_send_imm(qp: *mut IbvQpEx, imm_be: u32) {
    push(qp, WrOpcode::SendWithImm, |w| {
        w.imm_data = u32::from_be(imm_be)
    });
}

extern "C" fn wr_send_inv(qp: *mut IbvQpEx, rkey: u32) {
    push(qp, WrOpcode::SendWithInv, |w| w.invalidate_rkey = rkey);
}

extern "C" fn wr_send_tso(qp: *mut IbvQpEx, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    fail(qp, libc::EOPNOTSUPP);
}

extern "C" fn wr_atomic_write(qp: *mut IbvQpEx, rkey: u32, addr: u64, atomic_wr: *const c_void) {
    if atomic_wr.is_null() {
        return fail(qp, libc::EINVAL);
    }
    // The 8 bytes are the caller's until this returns: keep them in a registered slot.
    // SAFETY: atomic_wr points to 8 readable bytes (verbs.h contract), non-NULL.
    let value = unsafe { std::ptr::read_unaligned(atomic_wr as *const u64) };
    let q = sv(qp);
    // SAFETY: our QP, with an open context.
    let ctx = unsafe { SvContext::from_ptr((*qp).qp_base.context) }.expect("open");
    match q.atomic.stage(ctx, q.pd_id, q.send_depth, value) {
        Ok(sge) => push(qp, WrOpcode::AtomicWrite, |w| {
            w.remote = remote(rkey, addr);
            w.sg_list = vec![sge];
        }),
        Err(e) => fail(qp, e),
    }
}

extern "C" fn wr_flush(qp: *mut IbvQpEx, rkey: u32, addr: u64, len: usize, ty: u8, level: u8) {
    let Ok(length) = u32::try_from(len) else {
        return fail(qp, libc::EINVAL);
    };
    push(qp, WrOpcode::Flush, |w| {
        w.remote = remote(rkey, addr);
        w.flush = FlushParams {
            length,
            placement_type: ty,
            selectivity_level: level,
        };
    });
}

extern "C" fn wr_set_ud_addr(qp: *mut IbvQpEx, ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) {
    last(qp, |w| {
        w.ud = Some(ud_dest(ah, remote_qpn, remote_qkey)?);
        Ok(())
    });
}

extern "C" fn wr_set_xrc_srqn(qp: *mut IbvQpEx, _srqn: u32) {
    fail(qp, libc::EOPNOTSUPP);
}

extern "C" fn wr_set_sge(qp: *mut IbvQpEx, lkey: u32, addr: u64, length: u32) {
    last(qp, |w| {
        w.sg_list = vec![Sge { addr, length, lkey }];
        Ok(())
    });
}

extern "C" fn wr_set_sge_list(qp: *mut IbvQpEx, num_sge: usize, list: *const IbvSge) {
    let Ok(n) = i32::try_from(num_sge) else {
        return fail(qp, libc::EINVAL);
    };
    // SAFETY: list has num_sge entries (verbs.h contract); NULL with n > 0 is refused.
    match unsafe { sges(list, n) } {
        Ok(s) => last(qp, |w| {
            w.sg_list = s;
            Ok(())
        }),
        Err(e) => fail(qp, e),
    }
}

/// Inline data given by address: copied at post time (see `bounce::post_send`, which
/// finds the region holding it or stages it).
fn inline(qp: *mut IbvQpEx, bufs: &[(u64, usize)]) {
    let mut list = Vec::with_capacity(bufs.len());
    for &(addr, len) in bufs {
        let Ok(length) = u32::try_from(len) else {
            return fail(qp, libc::EINVAL);
        };
        list.push(Sge {
            addr,
            length,
            lkey: 0,
        });
    }
    last(qp, |w| {
        w.sg_list = list;
        w.send_flags |= SendFlags::INLINE;
        Ok(())
    });
}

extern "C" fn wr_set_inline_data(qp: *mut IbvQpEx, addr: *mut c_void, length: usize) {
    inline(qp, &[(addr as u64, length)]);
}

extern "C" fn wr_set_inline_data_list(qp: *mut IbvQpEx, num_buf: usize, list: *const IbvDataBuf) {
    if num_buf > 0 && list.is_null() {
        return fail(qp, libc::EINVAL);
    }
    let raw: &[IbvDataBuf] = if num_buf == 0 {
        &[]
    } else {
        // SAFETY: list has num_buf entries (verbs.h contract), non-NULL (checked).
        unsafe { std::slice::from_raw_parts(list, num_buf) }
    };
    let bufs: Vec<(u64, usize)> = raw.iter().map(|b| (b.addr as u64, b.length)).collect();
    inline(qp, &bufs);
}
