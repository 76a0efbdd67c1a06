//! Queue pairs and shared receive queues: modify, query, and the post calls, whose work
//! request lists are built here from data the caller lends for the duration of the call.
#![allow(unsafe_code)]

use std::ptr;

use rdma_sys::*;

use super::{rc, Errno, RawAh, RawMr, RawMw, RawQp, RawSrq};

/// A receive WR lent to a post call.
pub(crate) struct RecvDesc {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
}

/// Where a memory-window bind points (`struct ibv_mw_bind_info`).
pub(crate) struct BindDesc<'a> {
    /// The MR (None with length 0: unbind).
    pub mr: Option<&'a RawMr>,
    pub addr: u64,
    pub length: u64,
    pub access: u32,
}

impl BindDesc<'_> {
    fn to_c(&self) -> ibv_mw_bind_info {
        ibv_mw_bind_info {
            mr: self.mr.map_or(ptr::null_mut(), |m| m.0.as_ptr()),
            addr: self.addr,
            length: self.length,
            mw_access_flags: self.access,
        }
    }
}

/// The opcode-specific part of a send WR.
pub(crate) enum SendKind<'a> {
    /// SEND / SEND_WITH_IMM / SEND_WITH_INV / LOCAL_INV and the like: no remote address.
    Plain,
    /// RDMA WRITE / READ (and their variants): remote address and key.
    Rdma { remote_addr: u64, rkey: u32 },
    /// Atomics.
    Atomic {
        remote_addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
    /// UD destination.
    Ud {
        ah: &'a RawAh,
        remote_qpn: u32,
        remote_qkey: u32,
    },
    /// BIND_MW (type 2 windows).
    BindMw {
        mw: &'a RawMw,
        rkey: u32,
        bind: BindDesc<'a>,
    },
}

/// A send WR lent to a post call.
pub(crate) struct SendDesc<'a> {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
    pub opcode: u32,
    pub send_flags: u32,
    /// imm_data in network order, or the rkey to invalidate.
    pub imm_or_inv: u32,
    pub kind: SendKind<'a>,
}

/// The index of `bad` in the list starting at `base` (0 if libibverbs did not say).
fn bad_index<T>(base: *const T, len: usize, bad: *const T) -> usize {
    if bad.is_null() {
        return 0;
    }
    let offset = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<T>().max(1);
    if offset < len {
        offset
    } else {
        0
    }
}

/// Links `wrs` into an `ibv_recv_wr` list and hands it to `post`.
fn post_recv_list(
    wrs: &[RecvDesc],
    post: impl FnOnce(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32,
) -> Result<(), (usize, Errno)> {
    if wrs.is_empty() {
        return Ok(());
    }
    // Built in place and never moved again while linked: `next` points into this Vec, and
    // the SGE pointers into the caller's `wrs`, all alive until this function returns
    // (libibverbs copies the WRs into the queue during the call).
    let mut list: Vec<ibv_recv_wr> = wrs
        .iter()
        .map(|w| ibv_recv_wr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: w.sges.as_ptr() as *mut ibv_sge,
            num_sge: w.sges.len() as i32,
        })
        .collect();
    let base = list.as_mut_ptr();
    for i in 0..list.len() - 1 {
        // SAFETY: i + 1 < len: a pointer to an element of the same allocation.
        list[i].next = unsafe { base.add(i + 1) };
    }
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    match rc(post(base, &mut bad)) {
        Ok(()) => Ok(()),
        Err(e) => Err((bad_index(base, list.len(), bad), e)),
    }
}

impl RawSrq {
    /// `ibv_modify_srq`.
    pub(crate) fn modify(&self, attr: &ibv_srq_attr, mask: i32) -> Result<(), Errno> {
        let mut attr = *attr;
        // SAFETY: live SRQ, valid attr pointer.
        rc(unsafe { ibv_modify_srq(self.0.as_ptr(), &mut attr, mask) })
    }

    /// `ibv_query_srq`.
    pub(crate) fn query(&self) -> Result<ibv_srq_attr, Errno> {
        let mut attr = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: live SRQ, valid out-pointer.
        rc(unsafe { ibv_query_srq(self.0.as_ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_post_srq_recv`; on failure, the index of the first WR not posted.
    pub(crate) fn post_recv(&self, wrs: &[RecvDesc]) -> Result<(), (usize, Errno)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: live SRQ; `head` is a well-formed list valid for this call.
            unsafe { ibv_post_srq_recv(self.0.as_ptr(), head, bad) }
        })
    }
}

impl RawQp {
    /// QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: live QP; plain integer field.
        unsafe { (*self.0.as_ptr()).qp_num }
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify(&self, mut attr: ibv_qp_attr, mask: i32) -> Result<(), Errno> {
        // SAFETY: live QP, valid attr pointer.
        rc(unsafe { ibv_modify_qp(self.0.as_ptr(), &mut attr, mask) })
    }

    /// `ibv_query_qp` of every attribute in `mask`.
    pub(crate) fn query(&self, mask: i32) -> Result<ibv_qp_attr, Errno> {
        // SAFETY: both structs are integers, pointers and unions of integers: all-zero is
        // valid (null pointers included).
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live QP, valid out-pointers.
        rc(unsafe { ibv_query_qp(self.0.as_ptr(), &mut attr, mask, &mut init) })?;
        Ok(attr)
    }

    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` of multicast GID `gid` (no LID:
    /// RoCE has none).
    pub(crate) fn multicast(&self, gid: [u8; 16], attach: bool) -> Result<(), Errno> {
        let c_gid = ibv_gid { raw: gid };
        // SAFETY: live QP; `c_gid` lives for the call, which only reads it.
        rc(unsafe {
            if attach {
                ibv_attach_mcast(self.0.as_ptr(), &c_gid, 0)
            } else {
                ibv_detach_mcast(self.0.as_ptr(), &c_gid, 0)
            }
        })
    }

    /// `ibv_post_recv`; on failure, the index of the first WR not posted.
    pub(crate) fn post_recv(&self, wrs: &[RecvDesc]) -> Result<(), (usize, Errno)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: live QP; `head` is a well-formed list valid for this call.
            unsafe { ibv_post_recv(self.0.as_ptr(), head, bad) }
        })
    }

    /// `ibv_post_send`; on failure, the index of the first WR not posted. Inline data is
    /// copied by libibverbs during the call; the other SGEs address registered memory.
    pub(crate) fn post_send(&self, wrs: &[SendDesc<'_>]) -> Result<(), (usize, Errno)> {
        if wrs.is_empty() {
            return Ok(());
        }
        // As in post_recv_list: built in place, linked, alive until the call returns.
        let mut list: Vec<ibv_send_wr> = wrs
            .iter()
            .map(|w| {
                let mut wr = ibv_send_wr {
                    wr_id: w.wr_id,
                    next: ptr::null_mut(),
                    sg_list: w.sges.as_ptr() as *mut ibv_sge,
                    num_sge: w.sges.len() as i32,
                    opcode: w.opcode,
                    send_flags: w.send_flags,
                    imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                        imm_data: w.imm_or_inv,
                    },
                    wr: wr_t {
                        atomic: atomic_t {
                            remote_addr: 0,
                            compare_add: 0,
                            swap: 0,
                            rkey: 0,
                        },
                    },
                    qp_type: qp_type_t {
                        xrc: xrc_t { remote_srqn: 0 },
                    },
                    bind_mw_tso_union: bind_mw_tso_union_t {
                        tso: tso_t {
                            hdr: ptr::null_mut(),
                            hdr_sz: 0,
                            mss: 0,
                        },
                    },
                };
                match &w.kind {
                    SendKind::Plain => {}
                    SendKind::Rdma { remote_addr, rkey } => {
                        wr.wr = wr_t {
                            rdma: rdma_t {
                                remote_addr: *remote_addr,
                                rkey: *rkey,
                            },
                        }
                    }
                    SendKind::Atomic {
                        remote_addr,
                        rkey,
                        compare_add,
                        swap,
                    } => {
                        wr.wr = wr_t {
                            atomic: atomic_t {
                                remote_addr: *remote_addr,
                                compare_add: *compare_add,
                                swap: *swap,
                                rkey: *rkey,
                            },
                        }
                    }
                    SendKind::Ud {
                        ah,
                        remote_qpn,
                        remote_qkey,
                    } => {
                        wr.wr = wr_t {
                            ud: ud_t {
                                ah: ah.0.as_ptr(),
                                remote_qpn: *remote_qpn,
                                remote_qkey: *remote_qkey,
                            },
                        }
                    }
                    SendKind::BindMw { mw, rkey, bind } => {
                        wr.bind_mw_tso_union = bind_mw_tso_union_t {
                            bind_mw: bind_mw_t {
                                mw: mw.0.as_ptr(),
                                rkey: *rkey,
                                bind_info: bind.to_c(),
                            },
                        }
                    }
                }
                wr
            })
            .collect();
        let base = list.as_mut_ptr();
        for i in 0..list.len() - 1 {
            // SAFETY: i + 1 < len: a pointer to an element of the same allocation.
            list[i].next = unsafe { base.add(i + 1) };
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; the list, its SGE arrays, AHs, MWs and MRs all outlive the call
        // (borrowed from `wrs` and the tables); libibverbs copies what it needs.
        match rc(unsafe { ibv_post_send(self.0.as_ptr(), base, &mut bad) }) {
            Ok(()) => Ok(()),
            Err(e) => Err((bad_index(base, list.len(), bad), e)),
        }
    }

    /// `ibv_bind_mw` of type 1 window `mw`; returns its new rkey.
    pub(crate) fn bind_mw(
        &self,
        mw: &RawMw,
        wr_id: u64,
        send_flags: u32,
        bind: &BindDesc<'_>,
    ) -> Result<u32, Errno> {
        let mut b = ibv_mw_bind {
            wr_id,
            send_flags,
            bind_info: bind.to_c(),
        };
        // SAFETY: live QP, MW and MR (borrowed from the tables for the call); valid bind
        // pointer. libibverbs posts a bind WR and stores the new rkey in the MW.
        rc(unsafe { ibv_bind_mw(self.0.as_ptr(), mw.0.as_ptr(), &mut b) })?;
        Ok(mw.rkey())
    }
}
