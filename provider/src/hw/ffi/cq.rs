//! Completion queues and completion channels: polling, notification, events.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr;

use rdma_sys::*;
use softverbs_api::c_layout::IbvWc;

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

impl RawCq {
    /// Granted number of entries.
    pub(crate) fn cqe(&self) -> i32 {
        // SAFETY: live CQ; plain int field.
        unsafe { (*self.0.as_ptr()).cqe }
    }

    /// `ibv_poll_cq` of up to `max` completions, in softverbs-api's layout of `ibv_wc`.
    pub(crate) fn poll(&self, max: usize) -> Result<Vec<IbvWc>, Errno> {
        let n = i32::try_from(max).unwrap_or(i32::MAX);
        // Zeroed rather than uninitialised: a provider that leaves a field it considers
        // undefined (e.g. on error completions) unwritten then reads as 0, not as garbage.
        let mut wcs = vec![IbvWc::default(); max];
        // SAFETY: live CQ; `wcs` holds `max` >= `n` entries of `struct ibv_wc` (IbvWc is its
        // layout, checked against rdma-sys's in `layout`), of which the provider fills the
        // first `got`; every field is an integer, valid for any bits.
        let got = unsafe { ibv_poll_cq(self.0.as_ptr(), n, wcs.as_mut_ptr().cast::<ibv_wc>()) };
        if got < 0 {
            return Err(if got == -1 { last_errno() } else { -got });
        }
        wcs.truncate(got as usize);
        Ok(wcs)
    }

    /// `ibv_req_notify_cq`.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<(), Errno> {
        // SAFETY: live CQ.
        rc(unsafe { ibv_req_notify_cq(self.0.as_ptr(), i32::from(solicited_only)) })
    }

    /// `ibv_resize_cq`; the granted size is then [`RawCq::cqe`].
    pub(crate) fn resize(&self, cqe: i32) -> Result<(), Errno> {
        // SAFETY: live CQ; the backend does not resize one CQ from two threads at once
        // (callers hold the table entry, and libibverbs asks no more).
        rc(unsafe { ibv_resize_cq(self.0.as_ptr(), cqe) })
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_events(&self, count: u32) {
        // SAFETY: live CQ; the caller acks only events it took.
        unsafe { ibv_ack_cq_events(self.0.as_ptr(), count) }
    }
}
