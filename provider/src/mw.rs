//! Memory windows (`ibv_mw`): remote access to part of an [`Mr`] through a key of its own,
//! granted and revoked without re-registering the memory.
//!
//! A window borrows every MR it may be bound to (`Mw<'mr>`), so an MR outlives the windows
//! that can point into it: dropping a window deallocates it (which unbinds it) before its MR
//! can be deregistered and its buffer freed, and deregistering an MR a window is bound to (an
//! EBUSY at the verbs layer) cannot happen through these handles:
//!
//! ```compile_fail
//! use softverbs::{AccessFlags, Context, MwBindTarget, MwType, RdmaBuffer, SendFlags};
//! let ctx = Context::open("softrxe0").unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let mw = pd.alloc_mw(MwType::Type2).unwrap();
//! let mr = pd.register(RdmaBuffer::new(64).unwrap(), AccessFlags::MW_BIND).unwrap();
//! let target = MwBindTarget { mr: &mr, offset: 0, len: 8, access: AccessFlags::REMOTE_READ };
//! let wr = mw.bind_wr(target, 1, SendFlags::SIGNALED).unwrap();
//! drop(mr); // the window may point into it: refused at compile time
//! ```

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use softverbs_api::mw::next_rkey;
use softverbs_api::{
    AccessFlags, BindMwWr, MwBind, MwBindInfo, MwType, SendFlags, SendWr, VerbsError, VerbsResult,
    WrOpcode,
};

use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;

/// Where and with which rights a window is bound: `len` bytes at `offset` of `mr`.
#[derive(Clone, Copy)]
pub struct MwBindTarget<'mr> {
    /// The region the window lies in (registered with `MW_BIND`, in the window's PD).
    pub mr: &'mr Mr,
    /// First byte of the window in the MR.
    pub offset: usize,
    /// Length of the window in bytes.
    pub len: usize,
    /// Remote rights the window grants (REMOTE_READ / REMOTE_WRITE / REMOTE_ATOMIC; write and
    /// atomic need LOCAL_WRITE on the MR).
    pub access: AccessFlags,
}

/// A memory window (`ibv_mw`). It keeps its PD alive and borrows, for `'mr`, the MRs it
/// may be bound to. Dropping it deallocates it (`ibv_dealloc_mw`), which unbinds it.
pub struct Mw<'mr> {
    pd: Pd,
    id: u32,
    mw_type: MwType,
    /// The rkey of the latest bind posted (as libibverbs updates `ibv_mw.rkey` at post).
    rkey: AtomicU32,
    /// Invariant in `'mr`: a window may not be shortened to the lifetime of a shorter-lived
    /// MR (which covariance would allow, letting the MR go first).
    _mrs: PhantomData<fn(&'mr Mr) -> &'mr Mr>,
}

impl Pd {
    /// `ibv_alloc_mw` of `mw_type` in this PD.
    pub fn alloc_mw<'mr>(&self, mw_type: MwType) -> VerbsResult<Mw<'mr>> {
        let (id, rkey) = self.inner.ctx.inner.backend.alloc_mw(self.id(), mw_type)?;
        Ok(Mw {
            pd: self.clone(),
            id,
            mw_type,
            rkey: AtomicU32::new(rkey),
            _mrs: PhantomData,
        })
    }
}

impl<'mr> Mw<'mr> {
    /// The rkey a peer uses: the one of the latest bind posted. If that bind fails (a
    /// completion with IBV_WC_MW_BIND_ERR), the window keeps its previous key.
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// Type 1 or type 2.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The backend's id of the window.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The IBV_WR_BIND_MW work request that binds this type 2 window to `target`, with the
    /// next rkey (`ibv_inc_rkey`), which [`Mw::rkey`] reports from now on. Post it on a QP
    /// of the window's PD; once it completes, the window is usable by requests arriving on
    /// that QP only, until LOCAL_INV or a peer's SEND_WITH_INV of its rkey (or a drop).
    ///
    /// EINVAL for a type 1 window, a zero length or a range outside the MR; EPERM for an MR
    /// of another PD.
    pub fn bind_wr(
        &self,
        target: MwBindTarget<'mr>,
        wr_id: u64,
        send_flags: SendFlags,
    ) -> VerbsResult<SendWr> {
        if self.mw_type != MwType::Type2 {
            return Err(VerbsError::inval(
                "a type 1 window is bound with Qp::bind_mw, not a work request",
            ));
        }
        if target.len == 0 {
            return Err(VerbsError::inval(
                "a type 2 window is unbound by LOCAL_INV, not a zero-length bind",
            ));
        }
        let bind_info = self.bind_info(Some(target))?;
        let rkey = next_rkey(self.rkey());
        self.rkey.store(rkey, Ordering::Release);
        Ok(SendWr {
            opcode: WrOpcode::BindMw,
            send_flags,
            bind_mw: Some(BindMwWr {
                mw: self.id,
                rkey,
                bind_info,
            }),
            ..SendWr::send(wr_id, Vec::new())
        })
    }

    /// The LOCAL_INV work request that unbinds this type 2 window (its current rkey).
    pub fn local_inv_wr(&self, wr_id: u64, send_flags: SendFlags) -> SendWr {
        SendWr {
            opcode: WrOpcode::LocalInv,
            send_flags,
            invalidate_rkey: self.rkey(),
            ..SendWr::send(wr_id, Vec::new())
        }
    }

    /// Checks `target` against this window and describes it for the backend (`None`
    /// unbinds).
    fn bind_info(&self, target: Option<MwBindTarget<'mr>>) -> VerbsResult<MwBindInfo> {
        let Some(t) = target else {
            return Ok(MwBindInfo::default());
        };
        if !Arc::ptr_eq(&t.mr.pd().inner, &self.pd.inner) {
            return Err(VerbsError::PermissionDenied(
                "the MR belongs to another PD than the window".into(),
            ));
        }
        let fits = t
            .offset
            .checked_add(t.len)
            .is_some_and(|end| end <= t.mr.len());
        if !fits {
            return Err(VerbsError::inval(format!(
                "window {}+{} outside the {}-byte MR",
                t.offset,
                t.len,
                t.mr.len()
            )));
        }
        Ok(MwBindInfo {
            mr_lkey: t.mr.lkey(),
            addr: t.mr.addr() + t.offset as u64,
            length: t.len as u64,
            mw_access_flags: t.access,
        })
    }
}

impl Drop for Mw<'_> {
    fn drop(&mut self) {
        // Unbinds it too: the MRs it borrows are still registered here.
        let _ = self.pd.inner.ctx.inner.backend.dealloc_mw(self.id);
    }
}

impl Qp {
    /// `ibv_bind_mw`: binds type 1 window `mw` to `target` (`None` unbinds it) through this
    /// QP's send queue, and returns the window's new rkey (also [`Mw::rkey`] from now on).
    /// The bind completes on the send CQ like any WR (`WcOpcode::BindMw`; a failure there is
    /// IBV_WC_MW_BIND_ERR and moves the QP to ERR).
    ///
    /// EINVAL for a type 2 window, a QP of another PD or device, a range outside the MR;
    /// EPERM for an MR of another PD; post errors as `post_send`.
    pub fn bind_mw<'mr>(
        &self,
        mw: &Mw<'mr>,
        target: Option<MwBindTarget<'mr>>,
        wr_id: u64,
        send_flags: SendFlags,
    ) -> VerbsResult<u32> {
        if mw.mw_type != MwType::Type1 {
            return Err(VerbsError::inval(
                "a type 2 window is bound with a work request (Mw::bind_wr)",
            ));
        }
        if !Arc::ptr_eq(&self.pd().inner, &mw.pd.inner) {
            return Err(VerbsError::inval(
                "the QP belongs to another PD than the window",
            ));
        }
        let bind = MwBind {
            wr_id,
            send_flags,
            bind_info: mw.bind_info(target)?,
        };
        let rkey = mw
            .pd
            .inner
            .ctx
            .inner
            .backend
            .bind_mw(self.qp_num(), mw.id, &bind)?;
        mw.rkey.store(rkey, Ordering::Release);
        Ok(rkey)
    }
}
