//! Completion queues and completion channels: polling, notification, events.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr;

use rdma_sys::*;

use super::{last_errno, rc, Errno, RawChannel, RawCq};

impl RawChannel {
    /// The channel's (non-blocking) descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: live channel; plain int field.
        unsafe { (*self.0.as_ptr()).fd }
    }

    /// `ibv_get_cq_event` without waiting: the `cq_context` (CQ id) of the next event, or
    /// `Ok(None)` if none is pending.
    pub(crate) fn take_cq_event(&self) -> Result<Option<u32>, Errno> {
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: live channel with a non-blocking descriptor; valid out-pointers.
        if unsafe { ibv_get_cq_event(self.0.as_ptr(), &mut cq, &mut cq_ctx) } != 0 {
            let e = last_errno();
            return if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(cq_ctx as usize as u32))
    }
}

/// `struct ibv_wc`, copied out of the CQ.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// imm_data (network order) or invalidated_rkey, by `wc_flags`.
    pub imm_or_inv: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

impl RawCq {
    /// Granted number of entries.
    pub(crate) fn cqe(&self) -> i32 {
        // SAFETY: live CQ; plain int field.
        unsafe { (*self.0.as_ptr()).cqe }
    }

    /// `ibv_poll_cq` of up to `max` completions.
    pub(crate) fn poll(&self, max: usize) -> Result<Vec<RawWc>, Errno> {
        let n = i32::try_from(max).unwrap_or(i32::MAX);
        // Zeroed rather than uninitialised: a provider that leaves a field it considers
        // undefined (e.g. on error completions) unwritten then reads as 0, not as garbage.
        // SAFETY: ibv_wc is integers and a union of integers: all-zero is a valid value.
        let mut wcs: Vec<ibv_wc> = (0..max).map(|_| unsafe { std::mem::zeroed() }).collect();
        // SAFETY: live CQ; `wcs` holds `max` >= `n` entries, of which the provider fills the
        // first `got`.
        let got = unsafe { ibv_poll_cq(self.0.as_ptr(), n, wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(if got == -1 { last_errno() } else { -got });
        }
        wcs.truncate(got as usize);
        Ok(wcs
            .iter()
            .map(|w| RawWc {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                vendor_err: w.vendor_err,
                byte_len: w.byte_len,
                // SAFETY: both union members are u32; any bit pattern is valid.
                imm_or_inv: unsafe { w.imm_data_invalidated_rkey_union.imm_data },
                qp_num: w.qp_num,
                src_qp: w.src_qp,
                wc_flags: w.wc_flags,
                pkey_index: w.pkey_index,
                slid: w.slid,
                sl: w.sl,
                dlid_path_bits: w.dlid_path_bits,
            })
            .collect())
    }

    /// `ibv_req_notify_cq`.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<(), Errno> {
        // SAFETY: live CQ.
        rc(unsafe { ibv_req_notify_cq(self.0.as_ptr(), i32::from(solicited_only)) })
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_events(&self, count: u32) {
        // SAFETY: live CQ; the caller acks only events it took.
        unsafe { ibv_ack_cq_events(self.0.as_ptr(), count) }
    }
}
