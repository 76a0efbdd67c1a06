//! In-place re-registration (`ibv_rereg_mr`): the region keeps its slot and its keys while
//! its range, protection domain or access change, as on mlx5 and kernel rxe, so a peer's
//! rkey stays valid across the change.

use super::*;

impl MrTable {
    /// `ibv_rereg_mr` in place: the region whose lkey is `lkey` now covers
    /// `[addr, addr + length)` of `pd` with `access` (the caller passes the old values for
    /// what does not change), under the same lkey and rkey, which are returned.
    ///
    /// The arguments are checked as [`MrTable::register`] checks them; EINVAL if there is no
    /// such region; EBUSY while memory windows are bound to it (their bounds and access were
    /// checked against the region as it was). Waits for copies in flight, as deregistration
    /// does; on an error the region is unchanged. The memory contract of `register` applies
    /// to the new range.
    pub fn reregister(
        &self,
        lkey: u32,
        pd: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> VerbsResult<MrKeys> {
        let (host, access) = checked_registration(addr, length, access)?;
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let slot = inner.unbound_slot(lkey, "rereg_mr")?;
        let region = slot.region.as_mut().expect("a live slot");
        let old_pd = std::mem::replace(&mut region.pd, pd);
        region.iova = addr;
        region.host = host;
        region.len = length;
        region.access = access;
        let keys = MrKeys {
            lkey: region.lkey,
            rkey: region.rkey,
        };
        if old_pd != pd {
            inner.count_region_of(old_pd, false);
            inner.count_region_of(pd, true);
        }
        Ok(keys)
    }
}

impl Inner {
    /// The slot of the live region `lkey` names, if no window is bound to it: EINVAL without
    /// such a region, EBUSY with windows bound (IBA 10.6.7.2.6; rxe says EINVAL). `verb`
    /// names the caller in the error.
    pub(super) fn unbound_slot(&mut self, lkey: u32, verb: &str) -> VerbsResult<&mut Slot> {
        let index = self.layout.index(lkey);
        let slot = self
            .slots
            .get_mut(index)
            .filter(|s| s.region.as_ref().is_some_and(|r| r.lkey == lkey))
            .ok_or_else(|| VerbsError::inval(format!("{verb}: no region with lkey {lkey:#x}")))?;
        if slot.bound_windows > 0 {
            return Err(VerbsError::Busy(format!(
                "{verb}: {} memory window(s) still bound to the region",
                slot.bound_windows
            )));
        }
        Ok(slot)
    }

    /// Counts a region of `pd` in (`up`) or out, so that a PD with regions cannot go.
    pub(super) fn count_region_of(&mut self, pd: u32, up: bool) {
        if up {
            *self.pd_regions.entry(pd).or_insert(0) += 1;
        } else if let Some(n) = self.pd_regions.get_mut(&pd) {
            *n -= 1;
            if *n == 0 {
                self.pd_regions.remove(&pd);
            }
        }
    }
}
