//! What a protection domain creates (MRs, QPs, SRQs, AHs, MWs) and the keys of MRs and MWs.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

use rdma_sys::*;

use super::{last_errno, non_null, Errno, RawAh, RawCq, RawMr, RawMw, RawPd, RawQp, RawSrq};

impl RawPd {
    /// `ibv_reg_mr` of `[addr, addr + length)` (iova = addr, as `ibv_reg_mr` does).
    ///
    /// The caller keeps the region allocated until the MR is destroyed (the contract of
    /// `VerbsContext::reg_mr`, which the safe `Mr` handle fulfils by owning the buffer).
    pub(crate) fn reg_mr(&self, addr: u64, length: usize, access: u32) -> Result<RawMr, Errno> {
        // SAFETY: live PD. The kernel pins and maps the range (or fails with EFAULT for an
        // unmapped one); it is not dereferenced here. Its lifetime is the caller's contract.
        let mr = unsafe {
            ibv_reg_mr_iova2(
                self.0.as_ptr(),
                addr as usize as *mut c_void,
                length,
                addr,
                access,
            )
        };
        non_null(mr).map(RawMr)
    }

    /// `ibv_create_qp`; `init.cap` is updated to what was granted.
    pub(crate) fn create_qp(
        &self,
        qp_type: u32,
        send_cq: &RawCq,
        recv_cq: &RawCq,
        srq: Option<&RawSrq>,
        cap: &mut ibv_qp_cap,
        sq_sig_all: bool,
    ) -> Result<RawQp, Errno> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.0.as_ptr(),
            recv_cq: recv_cq.0.as_ptr(),
            srq: srq.map_or(ptr::null_mut(), |s| s.0.as_ptr()),
            cap: *cap,
            qp_type,
            sq_sig_all: i32::from(sq_sig_all),
        };
        // SAFETY: live PD, CQs and SRQ (the tables keep them until the QP is destroyed;
        // libibverbs refuses their destruction while the QP uses them); valid attr pointer.
        let qp = non_null(unsafe { ibv_create_qp(self.0.as_ptr(), &mut init) })?;
        *cap = init.cap;
        Ok(RawQp(qp))
    }

    /// `ibv_create_srq` with `srq_context` = `id`; `attr` is updated to what was granted.
    pub(crate) fn create_srq(&self, id: u32, attr: &mut ibv_srq_attr) -> Result<RawSrq, Errno> {
        let mut init = ibv_srq_init_attr {
            srq_context: id as usize as *mut c_void,
            attr: *attr,
        };
        // SAFETY: live PD, valid attr pointer.
        let srq = non_null(unsafe { ibv_create_srq(self.0.as_ptr(), &mut init) })?;
        *attr = init.attr;
        Ok(RawSrq(srq))
    }

    /// `ibv_create_ah`.
    pub(crate) fn create_ah(&self, attr: &ibv_ah_attr) -> Result<RawAh, Errno> {
        let mut attr = *attr;
        // SAFETY: live PD, valid attr pointer (copied, as libibverbs may not modify it).
        non_null(unsafe { ibv_create_ah(self.0.as_ptr(), &mut attr) }).map(RawAh)
    }

    /// `ibv_alloc_mw`.
    pub(crate) fn alloc_mw(&self, mw_type: u32) -> Result<RawMw, Errno> {
        // SAFETY: live PD; rdma-sys's inline version sets errno when the op is missing.
        match unsafe { ibv_alloc_mw(self.0.as_ptr(), mw_type) } {
            Some(p) => non_null(p).map(RawMw),
            None => Err(last_errno()),
        }
    }
}

impl RawMr {
    /// Local and remote keys.
    pub(crate) fn keys(&self) -> (u32, u32) {
        // SAFETY: live MR; plain integer fields set at registration.
        unsafe { ((*self.0.as_ptr()).lkey, (*self.0.as_ptr()).rkey) }
    }
}

impl RawMw {
    /// The window's current rkey (updated by libibverbs when a bind is posted).
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: live MW; plain integer field.
        unsafe { (*self.0.as_ptr()).rkey }
    }
}
