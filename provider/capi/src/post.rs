//! `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv`: the linked WR lists of verbs.h
//! turned into the contract's WR slices, with `bad_wr` pointing at the first WR not posted.

use softverbs_api::mw::BindMwWr;
use softverbs_api::wr::{RemoteAddr, UdDest};
use softverbs_api::{PostError, RecvWr, SendWr, Sge, WrOpcode};

use crate::abi::*;
use crate::convert;
use crate::handle::{is_live, Kind, SvContext};
use crate::mw::bind_info;

/// The longest WR list one post call walks (a longer one, or a cycle, fails with ENOMEM at
/// that WR: no queue is that deep).
const MAX_WRS_PER_POST: usize = 1 << 16;

/// The scatter/gather list of a WR.
///
/// # Safety
/// `sg_list` must point to `num_sge` entries when `num_sge > 0`.
pub(crate) unsafe fn sges(sg_list: *const IbvSge, num_sge: i32) -> Result<Vec<Sge>, i32> {
    if num_sge < 0 || (num_sge > 0 && sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    if num_sge == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: per the contract, num_sge readable entries (non-NULL, checked).
    let raw = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(raw
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// A contract send WR with everything but the opcode-specific parts zero.
pub(crate) fn blank_send_wr(wr_id: u64, opcode: WrOpcode, flags: u32) -> SendWr {
    SendWr {
        opcode,
        send_flags: convert::send_flags(flags),
        ..SendWr::send(wr_id, Vec::new())
    }
}

/// The destination of a UD send through address handle `ah`.
pub(crate) fn ud_dest(ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) -> Result<UdDest, i32> {
    if ah.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: an AH the application created through us (not checked against the live
    // table on this hot path; a NULL one is refused above).
    let id = unsafe { (*ah).handle };
    Ok(UdDest {
        ah: id,
        remote_qpn,
        remote_qkey,
    })
}

/// The `bind_mw` part of a WR.
pub(crate) fn bind_wr(mw: *mut IbvMw, rkey: u32, info: &IbvMwBindInfo) -> Result<BindMwWr, i32> {
    if !is_live(mw, Kind::Mw) {
        return Err(libc::EINVAL);
    }
    Ok(BindMwWr {
        // SAFETY: live MW.
        mw: unsafe { (*mw).handle },
        rkey,
        bind_info: bind_info(info)?,
    })
}

unsafe fn send_wr(w: &IbvSendWr, qp_type: u32) -> Result<SendWr, i32> {
    let opcode = convert::wr_opcode(w.opcode).ok_or(libc::EINVAL)?;
    let mut out = blank_send_wr(w.wr_id, opcode, w.send_flags);
    // SAFETY: the application's sg_list has num_sge entries.
    out.sg_list = unsafe { sges(w.sg_list, w.num_sge) }?;
    match opcode {
        WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => {
            out.imm_data = u32::from_be(w.imm_data_or_invalidate_rkey)
        }
        WrOpcode::SendWithInv | WrOpcode::LocalInv => {
            out.invalidate_rkey = w.imm_data_or_invalidate_rkey
        }
        _ => {}
    }
    // SAFETY: the union member read is the one the opcode (and QP type) uses; all members
    // are plain integers and pointers.
    unsafe {
        match opcode {
            WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicWrite
            | WrOpcode::Flush => {
                out.remote = RemoteAddr {
                    remote_addr: w.wr.rdma.remote_addr,
                    rkey: w.wr.rdma.rkey,
                }
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                out.remote = RemoteAddr {
                    remote_addr: w.wr.atomic.remote_addr,
                    rkey: w.wr.atomic.rkey,
                };
                out.compare_add = w.wr.atomic.compare_add;
                out.swap = w.wr.atomic.swap;
            }
            WrOpcode::BindMw => {
                let b = w.extra.bind_mw;
                out.bind_mw = Some(bind_wr(b.mw, b.rkey, &b.bind_info)?);
            }
            _ => {}
        }
        if qp_type == 4 {
            out.ud = Some(ud_dest(
                w.wr.ud.ah,
                w.wr.ud.remote_qpn,
                w.wr.ud.remote_qkey,
            )?);
        }
    }
    Ok(out)
}

/// `ibv_context_ops.post_send`.
pub unsafe extern "C" fn sv_post_send(
    qp: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad_wr: *mut *mut IbvSendWr,
) -> i32 {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the application posts on a QP it created through us.
    let (ctx, qp_type) = unsafe {
        (
            SvContext::from_ptr((*qp).context).expect("open"),
            (*qp).qp_type,
        )
    };
    let mut wrs = Vec::new();
    let mut ptrs = Vec::new();
    let mut cur = wr;
    let mut failed = None;
    while !cur.is_null() {
        if wrs.len() == MAX_WRS_PER_POST {
            failed = Some((cur, libc::ENOMEM));
            break;
        }
        // SAFETY: a WR of the application's list.
        match unsafe { send_wr(&*cur, qp_type) } {
            Ok(w) => {
                wrs.push(w);
                ptrs.push(cur);
            }
            Err(e) => {
                failed = Some((cur, e));
                break;
            }
        }
        // SAFETY: as above.
        cur = unsafe { (*cur).next };
    }
    // SAFETY: the QP is one of ours (an SvQp).
    let sv = unsafe { &*(qp as *const crate::handle::SvQp) };
    let result = crate::bounce::post_send(ctx, sv.pd_id, &sv.poster, wrs);
    // SAFETY: bad_wr is NULL or writable.
    unsafe { report(result, &ptrs, failed, bad_wr) }
}

/// Sets `*bad_wr` to the first WR not posted and returns its errno.
unsafe fn report<T>(
    result: Result<(), PostError>,
    ptrs: &[*mut T],
    failed: Option<(*mut T, i32)>,
    bad_wr: *mut *mut T,
) -> i32 {
    let (bad, errno) = match (result, failed) {
        (Err(e), failed) => match ptrs.get(e.index).copied().or(failed.map(|f| f.0)) {
            Some(p) => (p, e.error.errno()),
            None => return e.error.errno(),
        },
        (Ok(()), Some((p, errno))) => (p, errno),
        (Ok(()), None) => return 0,
    };
    if !bad_wr.is_null() {
        // SAFETY: writable per the caller.
        unsafe { *bad_wr = bad };
    }
    errno
}

unsafe fn recv_list(
    wr: *mut IbvRecvWr,
) -> (
    Vec<RecvWr>,
    Vec<*mut IbvRecvWr>,
    Option<(*mut IbvRecvWr, i32)>,
) {
    let mut wrs = Vec::new();
    let mut ptrs = Vec::new();
    let mut cur = wr;
    while !cur.is_null() {
        if wrs.len() == MAX_WRS_PER_POST {
            return (wrs, ptrs, Some((cur, libc::ENOMEM)));
        }
        // SAFETY: a WR of the application's list.
        let w = unsafe { &*cur };
        // SAFETY: its sg_list has num_sge entries.
        match unsafe { sges(w.sg_list, w.num_sge) } {
            Ok(sg_list) => {
                wrs.push(RecvWr {
                    wr_id: w.wr_id,
                    sg_list,
                });
                ptrs.push(cur);
            }
            Err(e) => return (wrs, ptrs, Some((cur, e))),
        }
        cur = w.next;
    }
    (wrs, ptrs, None)
}

/// `ibv_context_ops.post_recv`.
pub unsafe extern "C" fn sv_post_recv(
    qp: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> i32 {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the application posts on a QP it created through us.
    let ctx = unsafe { SvContext::from_ptr((*qp).context).expect("open") };
    // SAFETY: the application's list.
    let (wrs, ptrs, failed) = unsafe { recv_list(wr) };
    // SAFETY: the QP is one of ours (an SvQp).
    let poster = unsafe { &(*(qp as *const crate::handle::SvQp)).poster };
    let result = poster.post_recv(ctx.backend(), &wrs);
    // SAFETY: bad_wr is NULL or writable.
    unsafe { report(result, &ptrs, failed, bad_wr) }
}

/// `ibv_context_ops.post_srq_recv`.
pub unsafe extern "C" fn sv_post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> i32 {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an SRQ the application created through us.
    let (ctx, id) = unsafe {
        (
            SvContext::from_ptr((*srq).context).expect("open"),
            (*srq).handle,
        )
    };
    // SAFETY: the application's list.
    let (wrs, ptrs, failed) = unsafe { recv_list(wr) };
    let result = ctx.backend().post_srq_recv(id, &wrs);
    // SAFETY: bad_wr is NULL or writable.
    unsafe { report(result, &ptrs, failed, bad_wr) }
}
