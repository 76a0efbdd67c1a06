//! The MR table's memory windows: allocation, binding (type 1 by the verb, type 2 by a
//! BIND_MW work request), invalidation, and release with their QP.

use super::*;

impl MrTable {
    /// LOCAL_INV of `key` on QP `qpn` of `pd`: unbinds the type 2 window `key` names.
    ///
    /// Only windows can be invalidated here: rxe also invalidates fast-registration MRs
    /// (`ibv_alloc_mr` + REG_MR), which the emulator does not have, and fails with EINVAL for
    /// `ibv_reg_mr` regions, so a region key gives `InvalidKey` as an unknown key does. A stale
    /// key, a type 1 window, a window that is not bound (a second invalidation) and one of
    /// another PD fail too; nothing changes then.
    pub fn invalidate_local(&self, pd: u32, qpn: u32, key: u32) -> Result<(), MemError> {
        self.invalidate(QpRef { pd, qpn }, key, false)
    }

    /// A peer's SEND_WITH_INV of `key` arriving on QP `qpn` of `pd`: as
    /// [`MrTable::invalidate_local`], and the window must be bound through that QP (the rule
    /// of remote access through a type 2 window).
    pub fn invalidate_remote(&self, pd: u32, qpn: u32, key: u32) -> Result<(), MemError> {
        self.invalidate(QpRef { pd, qpn }, key, true)
    }

    fn invalidate(&self, qp: QpRef, key: u32, remote: bool) -> Result<(), MemError> {
        if !is_window_key(key) {
            return Err(MemError::InvalidKey);
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let old = inner.windows.invalidate(qp, key, remote)?;
        inner.rebind_counts(Some(old), None);
        Ok(())
    }

    /// `ibv_alloc_mw` in `pd`: the window's id and first rkey. ENOMEM when the device has
    /// `MAX_MW` windows.
    pub fn alloc_window(&self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        self.inner.write().windows.alloc(pd, mw_type)
    }

    /// `ibv_dealloc_mw` of window `id` (EINVAL if there is none): unbinds it if bound and
    /// forgets it; its rkeys open nothing any more.
    pub fn dealloc_window(&self, id: u32) -> VerbsResult<()> {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let old = inner.windows.dealloc(id)?;
        inner.rebind_counts(old, None);
        Ok(())
    }

    /// The synchronous checks of `ibv_bind_mw` on type 1 window `id` for a bind of `length`
    /// bytes of the region `mr_lkey` with `access`: EINVAL (unknown or type 2 window,
    /// ZERO_BASED, no such region), EPERM (region of another PD). Returns the rkey the bind
    /// gives once it executes.
    pub fn prepare_type1_bind(
        &self,
        id: u32,
        mr_lkey: u32,
        length: u64,
        access: AccessFlags,
    ) -> VerbsResult<u32> {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let mr = if length == 0 {
            None
        } else {
            Some(inner.mr_view(mr_lkey).ok_or_else(|| {
                VerbsError::inval(format!("bind_mw: no memory region with lkey {mr_lkey:#x}"))
            })?)
        };
        inner.windows.prepare_type1_bind(id, access, mr)
    }

    /// Takes back the rkey of a prepared type 1 bind whose post failed.
    pub fn cancel_type1_bind(&self, id: u32, rkey: u32) {
        self.inner.write().windows.cancel_type1_bind(id, rkey);
    }

    /// Executes a BIND_MW work request on QP `qpn` of `pd`: binds (or, for a zero-length type
    /// 1 bind, unbinds) the window and gives it `wr.rkey`. Returns the window's new rkey; an
    /// error (the caller completes the WR with IBV_WC_MW_BIND_ERR) changes nothing.
    pub fn bind_window(&self, pd: u32, qpn: u32, wr: &BindMwWr) -> VerbsResult<u32> {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let mr = inner.mr_view(wr.bind_info.mr_lkey);
        let rebind = inner.windows.bind(QpRef { pd, qpn }, wr, mr)?;
        inner.rebind_counts(rebind.old, rebind.new);
        Ok(rebind.rkey)
    }

    /// Unbinds the type 2 windows bound through QP `qpn`, which is being destroyed (their
    /// regions may then be deregistered).
    pub fn release_qp_windows(&self, qpn: u32) {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        for old in inner.windows.release_qp(qpn) {
            inner.rebind_counts(Some(old), None);
        }
    }
}
