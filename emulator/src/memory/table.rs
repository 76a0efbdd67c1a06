//! The device's memory-region table: registration, key lookup and every checked access.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};
use softverbs_api::backend::MrKeys;
use softverbs_api::{AccessFlags, BindMwWr, MwType, Sge, VerbsError, VerbsResult};

use super::error::MemError;
use super::keys::{KeyGen, KeyLayout, MAX_SLOTS};
use super::local_slice::LocalSlice;
use super::region::{HostPtr, Region, Span};
use super::window::{is_window_key, Binding, MrView, QpRef, WindowTable};

// The table's methods by job: what a peer may do (remote.rs), in-place re-registration
// (rereg.rs) and windows (windows.rs).
mod remote;
mod rereg;
mod windows;

/// Access bits `ibv_reg_mr` knows (the kernel's `IB_ACCESS_SUPPORTED` without the optional
/// range): LOCAL_WRITE .. FLUSH_PERSISTENT.
const REG_KNOWN: u32 = (AccessFlags::FLUSH_PERSISTENT.0 << 1) - 1;
/// The "optional" access bits (`IB_UVERBS_ACCESS_OPTIONAL_RANGE`, bits 20..29, e.g.
/// RELAXED_ORDERING): a device that does not implement one ignores it instead of failing.
const REG_OPTIONAL: u32 = 0x3ff << 20;

/// Who accesses memory through an rkey: the PD of the QP a request arrived on and, so that
/// type 2 windows (usable only through the QP that bound them) can match, its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAccessor {
    /// The QP's protection domain.
    pub pd: u32,
    /// The QP's number; `None` matches no type 2 window.
    pub qpn: Option<u32>,
}

impl RemoteAccessor {
    /// A request arriving on QP `qpn` of `pd`.
    pub fn qp(pd: u32, qpn: u32) -> RemoteAccessor {
        RemoteAccessor { pd, qpn: Some(qpn) }
    }
}

impl From<u32> for RemoteAccessor {
    /// An accessor known only by its PD: regions and type 1 windows of that PD.
    fn from(pd: u32) -> RemoteAccessor {
        RemoteAccessor { pd, qpn: None }
    }
}

/// The table held for reading: no region is deregistered while it lives, so the bytes it
/// lends stay valid. Held across a send call; `deregister` waits for it.
pub struct MrReader<'a>(RwLockReadGuard<'a, Inner>);

impl MrReader<'_> {
    /// The bytes of `slice`, checked again (its region may have gone since the packet was
    /// built): key, PD, bounds, as [`MrTable::gather`] checks them.
    ///
    /// The one place the table lends a reference into registered memory: the link hands it
    /// to the kernel (`sendmsg`) without a copy. Everything else copies through raw pointers.
    pub fn bytes(&self, slice: &LocalSlice) -> Result<&[u8], MemError> {
        Ok(self.0.slice_span(slice)?.as_bytes())
    }
}

/// The memory regions (and memory windows) of one device. `Send + Sync`; every method takes
/// `&self`.
///
/// Copies run under the table's read lock and `deregister` takes the write lock, so once
/// `deregister` returns no copy touches the region any more. Checks on every access, in order:
/// the key names a live region, its PD is the caller's, the region allows the access, and the
/// whole range lies inside it; nothing is copied unless all of them pass. An rkey may also
/// name a bound memory window (see `window.rs`): then the window's PD, QP, rights and bounds
/// are checked instead of the region's rights, and the bytes are those of the region it lies
/// in. A region with windows bound to it cannot be deregistered (EBUSY).
pub struct MrTable {
    inner: RwLock<Inner>,
}

struct Inner {
    /// Slot per index; grows up to `max_mr` entries.
    slots: Vec<Slot>,
    /// Freed indices, reused oldest first so that a stale key meets a reused slot late.
    free: VecDeque<u32>,
    max_mr: u32,
    layout: KeyLayout,
    keygen: KeyGen,
    /// Number of regions per PD.
    pd_regions: HashMap<u32, u32>,
    /// The device's memory windows.
    windows: WindowTable,
}

struct Slot {
    region: Option<Region>,
    /// Tags of the last region in this slot, which its next region must not reuse.
    old_tags: [u32; 2],
    /// Windows bound to the region (it cannot be deregistered while there are any).
    bound_windows: u32,
}

impl Inner {
    /// Visits bytes `[offset, offset + len)` of the SGE list `sges`: for each SGE they touch
    /// (zero-length ones skipped), the part of its span they cover (the whole SGE checked for
    /// `pd` and `need`), where that part sits within the range, and its lkey and address as
    /// the SGE names them. `LengthExceeded`, before
    /// any SGE is looked at, if the list ends before the range does; otherwise stops at the
    /// first SGE that fails.
    fn list_range<'a>(
        &'a self,
        pd: u32,
        sges: &[Sge],
        offset: u64,
        len: usize,
        need: AccessFlags,
        mut visit: impl FnMut(Span<'a>, std::ops::Range<usize>, u32, u64),
    ) -> Result<(), MemError> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= total)
            .ok_or(MemError::LengthExceeded)?;
        let mut sge_start = 0u64;
        for sge in sges {
            let sge_end = sge_start + u64::from(sge.length);
            if sge.length > 0 && sge_end > offset && sge_start < end {
                let whole = self.span(pd, sge.lkey, false, need, sge.addr, sge.length.into())?;
                let lo = offset.max(sge_start);
                let hi = end.min(sge_end);
                let part = whole.sub((lo - sge_start) as usize, (hi - lo) as usize);
                let at = (lo - offset) as usize..(hi - offset) as usize;
                visit(part, at, sge.lkey, sge.addr + (lo - sge_start));
            }
            sge_start = sge_end;
        }
        Ok(())
    }

    /// The checked span of `slice`: key, PD and bounds, no access right (a local read).
    fn slice_span(&self, slice: &LocalSlice) -> Result<Span<'_>, MemError> {
        self.span(
            slice.pd,
            slice.lkey,
            false,
            AccessFlags::empty(),
            slice.addr,
            slice.len.into(),
        )
    }

    fn region_by(&self, key: u32, remote: bool) -> Result<&Region, MemError> {
        let region = self
            .slots
            .get(self.layout.index(key))
            .and_then(|s| s.region.as_ref())
            .ok_or(MemError::InvalidKey)?;
        let expected = if remote { region.rkey } else { region.lkey };
        if expected == key {
            Ok(region)
        } else {
            Err(MemError::InvalidKey)
        }
    }

    /// The checked span `[va, va + len)` of the region `key` names, for an access needing `need`.
    fn span(
        &self,
        pd: u32,
        key: u32,
        remote: bool,
        need: AccessFlags,
        va: u64,
        len: u64,
    ) -> Result<Span<'_>, MemError> {
        self.checked_region(pd, key, remote, need)?.span(va, len)
    }

    /// The region `key` names, checked to be `pd`'s and to allow `need`.
    fn checked_region(
        &self,
        pd: u32,
        key: u32,
        remote: bool,
        need: AccessFlags,
    ) -> Result<&Region, MemError> {
        let region = self.region_by(key, remote)?;
        if region.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if !region.access.contains(need) {
            return Err(MemError::AccessDenied);
        }
        Ok(region)
    }

    /// The checked span `[va, va + len)` a peer's request on `who` reaches through `rkey`
    /// with `need`: a region's rkey, or a bound window's.
    fn remote_span(
        &self,
        who: RemoteAccessor,
        rkey: u32,
        need: AccessFlags,
        va: u64,
        len: u64,
    ) -> Result<Span<'_>, MemError> {
        self.remote_region(who, rkey, need, va, len)?.span(va, len)
    }

    /// The region a peer's request on `who` reaches through `rkey` with `need` for
    /// `[va, va + len)` (window bounds checked; the caller checks the region's own).
    fn remote_region(
        &self,
        who: RemoteAccessor,
        rkey: u32,
        need: AccessFlags,
        va: u64,
        len: u64,
    ) -> Result<&Region, MemError> {
        if !is_window_key(rkey) {
            return self.checked_region(who.pd, rkey, true, need);
        }
        let binding = self
            .windows
            .resolve(who.pd, who.qpn, rkey, need, Some((va, len)))?;
        // The region outlives the binding: deregistration fails while it exists.
        self.region_by(binding.mr_lkey, false)
    }

    /// See [`MrTable::remote_slice`].
    fn remote_slice(
        &self,
        who: RemoteAccessor,
        rkey: u32,
        va: u64,
        len: u32,
    ) -> Result<Option<LocalSlice>, MemError> {
        if len == 0 {
            return Ok(None);
        }
        let need = AccessFlags::REMOTE_READ;
        let region = self.remote_region(who, rkey, need, va, len.into())?;
        region.span(va, len.into())?;
        Ok(Some(LocalSlice {
            pd: region.pd,
            lkey: region.lkey,
            addr: va,
            len,
        }))
    }

    /// What a bind needs to know of the region `lkey` names, if any.
    fn mr_view(&self, lkey: u32) -> Option<MrView> {
        self.region_by(lkey, false).ok().map(|r| MrView {
            lkey: r.lkey,
            pd: r.pd,
            iova: r.iova,
            len: r.len,
            access: r.access,
        })
    }

    /// Moves the count of bound windows from the region of `old` to that of `new`.
    fn rebind_counts(&mut self, old: Option<Binding>, new: Option<Binding>) {
        for (binding, up) in [(old, false), (new, true)] {
            let Some(b) = binding else { continue };
            let index = self.layout.index(b.mr_lkey);
            if let Some(slot) = self.slots.get_mut(index) {
                slot.bound_windows = if up {
                    slot.bound_windows + 1
                } else {
                    slot.bound_windows.saturating_sub(1)
                };
            }
        }
    }
}

impl MrTable {
    /// A table for at most `max_mr` regions (clamped to 2^24, so that keys keep at least 8
    /// random bits; see the key scheme in `keys.rs`).
    pub fn new(max_mr: u32) -> MrTable {
        MrTable::with_windows(max_mr, crate::memory::MAX_MW)
    }

    /// A table for at most `max_mr` regions (as [`MrTable::new`]) and `max_mw` memory
    /// windows (clamped to [`crate::memory::MAX_MW`]).
    pub fn with_windows(max_mr: u32, max_mw: u32) -> MrTable {
        let max_mr = max_mr.min(MAX_SLOTS);
        MrTable {
            inner: RwLock::new(Inner {
                slots: Vec::new(),
                free: VecDeque::new(),
                max_mr,
                layout: KeyLayout::for_slots(max_mr),
                keygen: KeyGen::new(),
                pd_regions: HashMap::new(),
                windows: WindowTable::new(max_mw),
            }),
        }
    }

    /// `ibv_reg_mr` of `[addr, addr + length)` in `pd`.
    ///
    /// Checks as the kernel does (`ib_check_mr_access`, `ib_umem_get`): REMOTE_WRITE or
    /// REMOTE_ATOMIC without LOCAL_WRITE, unknown access bits (outside LOCAL_WRITE ..
    /// FLUSH_PERSISTENT and the ignored optional bits 20..29), a zero length (the kernel
    /// refuses a region of no pages), a null address, and a range that wraps around the
    /// address space give EINVAL; ON_DEMAND gives EOPNOTSUPP, as on rxe; a full table gives
    /// ENOMEM. ZERO_BASED and HUGETLB are accepted and ignored for a user region, as in rxe;
    /// MW_BIND is recorded. The keys address the region by `addr` (iova = addr).
    ///
    /// The table reads and writes `[addr, addr + length)` from any thread until
    /// [`MrTable::deregister`] returns: the caller must keep it allocated that long, which is
    /// the contract of `VerbsContext::reg_mr` that the safe `softverbs::Mr` upholds.
    pub fn register(
        &self,
        pd: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> VerbsResult<MrKeys> {
        let (host, access) = checked_registration(addr, length, access)?;

        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let index = match inner.free.pop_front() {
            Some(i) => i,
            None if (inner.slots.len() as u64) < u64::from(inner.max_mr) => {
                inner.slots.push(Slot {
                    region: None,
                    old_tags: [0; 2],
                    bound_windows: 0,
                });
                (inner.slots.len() - 1) as u32
            }
            None => {
                return Err(VerbsError::nomem(format!(
                    "reg_mr: all {} memory regions in use",
                    inner.max_mr
                )))
            }
        };
        // One tag bit less: the top bit of every region key is 0, which keeps region keys
        // apart from window keys (see `window.rs`).
        let tag_bits = inner.layout.tag_bits() - 1;
        let slot = &mut inner.slots[index as usize];
        let ltag = inner.keygen.tag(tag_bits, &slot.old_tags);
        let rtag = inner
            .keygen
            .tag(tag_bits, &[slot.old_tags[0], slot.old_tags[1], ltag]);
        let keys = MrKeys {
            lkey: inner.layout.key(index, ltag),
            rkey: inner.layout.key(index, rtag),
        };
        slot.old_tags = [ltag, rtag];
        slot.region = Some(Region {
            pd,
            iova: addr,
            host,
            len: length,
            access,
            lkey: keys.lkey,
            rkey: keys.rkey,
        });
        inner.count_region_of(pd, true);
        Ok(keys)
    }

    /// `ibv_dereg_mr` of the region whose lkey is `lkey` (EINVAL if there is none; EBUSY while
    /// memory windows are bound to it, as IBA 10.6.7.2.6 requires: rxe says EINVAL). Waits for
    /// copies in flight; once it returns, nothing touches the region.
    pub fn deregister(&self, lkey: u32) -> VerbsResult<()> {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let slot = inner.unbound_slot(lkey, "dereg_mr")?;
        let region = slot.region.take().expect("a live slot");
        inner.count_region_of(region.pd, false);
        let index = inner.layout.index(lkey);
        inner.free.push_back(index as u32);
        Ok(())
    }

    /// True while `pd` has registered regions or memory windows (`ibv_dealloc_pd` must then
    /// fail with EBUSY).
    pub fn pd_in_use(&self, pd: u32) -> bool {
        let inner = self.inner.read();
        inner.pd_regions.contains_key(&pd) || inner.windows.pd_in_use(pd)
    }

    /// Local gather for a send: appends the bytes of `sges`, in order, to `out`.
    ///
    /// Each SGE must name by lkey a region of `pd` that holds all of `[addr, addr + length)`;
    /// zero-length SGEs are skipped without looking at their key, as rxe does. Nothing is
    /// appended unless every SGE passes.
    pub fn gather(&self, pd: u32, sges: &[Sge], out: &mut Vec<u8>) -> Result<(), MemError> {
        let inner = self.inner.read();
        let mut spans = Vec::with_capacity(sges.len());
        for sge in sges.iter().filter(|s| s.length > 0) {
            spans.push(inner.span(
                pd,
                sge.lkey,
                false,
                AccessFlags::empty(),
                sge.addr,
                sge.length.into(),
            )?);
        }
        out.reserve(spans.iter().map(Span::len).sum());
        for span in &spans {
            span.append_to(out);
        }
        Ok(())
    }

    /// Local gather of one packet's payload: copies bytes `[offset, offset + out.len())` of
    /// the gather list `sges` into `out` (a send builds each packet straight from the
    /// registered memory, with no copy of the whole message).
    ///
    /// The SGEs those bytes come from must pass the checks of [`MrTable::gather`];
    /// `LengthExceeded` if the range goes past the list's end. Nothing is copied unless all
    /// of that holds.
    pub fn gather_at(
        &self,
        pd: u32,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), MemError> {
        let inner = self.inner.read();
        let need = AccessFlags::empty();
        // Check every SGE the range touches before copying any (a packet is all or nothing);
        // one SGE is checked as it is copied.
        if sges.len() > 1 {
            inner.list_range(pd, sges, offset, out.len(), need, |_, _, _, _| {})?;
        }
        inner.list_range(pd, sges, offset, out.len(), need, |span, at, _, _| {
            span.copy_to(&mut out[at])
        })
    }

    /// Where bytes `[offset, offset + len)` of the gather list `sges` live, if they lie in
    /// one SGE: checked as [`MrTable::gather_at`] checks them (same errors), but not copied.
    /// `Ok(None)` if they span several SGEs (the caller copies them with `gather_at`), or
    /// none.
    pub fn local_slice(
        &self,
        pd: u32,
        sges: &[Sge],
        offset: u64,
        len: usize,
    ) -> Result<Option<LocalSlice>, MemError> {
        let inner = self.inner.read();
        let (mut found, mut pieces) = (None, 0);
        let need = AccessFlags::empty();
        inner.list_range(pd, sges, offset, len, need, |_, _, lkey, addr| {
            pieces += 1;
            found = Some(LocalSlice {
                pd,
                lkey,
                addr,
                len: len as u32,
            });
        })?;
        Ok(found.filter(|_| pieces == 1 && len > 0))
    }

    /// The table held for reading, for sends that read registered memory in place.
    pub fn reader(&self) -> MrReader<'_> {
        MrReader(self.inner.read())
    }

    /// Local scatter for a receive or a read response: writes `data` into the scatter list
    /// `sges` starting at byte `offset` of the list (for the later packets of a message).
    ///
    /// `LengthExceeded` if `offset + data.len()` is beyond the list's total length. Every SGE
    /// the data reaches must name by lkey a region of `pd` with LOCAL_WRITE that holds the
    /// whole SGE; zero-length SGEs are skipped. Nothing is written unless all of that holds.
    pub fn scatter(&self, pd: u32, sges: &[Sge], offset: u64, data: &[u8]) -> Result<(), MemError> {
        let inner = self.inner.read();
        let need = AccessFlags::LOCAL_WRITE;
        // As in gather_at: all checked before any is written, one SGE as it is written.
        if sges.len() > 1 {
            inner.list_range(pd, sges, offset, data.len(), need, |_, _, _, _| {})?;
        }
        inner.list_range(pd, sges, offset, data.len(), need, |span, at, _, _| {
            span.write_from(&data[at])
        })
    }

    /// Validates a whole SGE list up front (key, PD, `need` access, bounds; zero-length SGEs
    /// skipped) and returns its total length in bytes.
    pub fn check_sges(&self, pd: u32, sges: &[Sge], need: AccessFlags) -> Result<u64, MemError> {
        let inner = self.inner.read();
        let mut total = 0u64;
        for sge in sges.iter().filter(|s| s.length > 0) {
            inner.span(pd, sge.lkey, false, need, sge.addr, sge.length.into())?;
            total += u64::from(sge.length);
        }
        Ok(total)
    }
}

/// The checks of `ibv_reg_mr`'s arguments (see [`MrTable::register`]), shared by
/// re-registration: the region's first byte and the access it gets (optional bits this
/// device does not implement dropped, as the kernel does).
fn checked_registration(
    addr: u64,
    length: u64,
    access: AccessFlags,
) -> VerbsResult<(HostPtr, AccessFlags)> {
    let bits = access.bits();
    if bits & !(REG_KNOWN | REG_OPTIONAL) != 0 {
        return Err(VerbsError::inval(format!(
            "reg_mr: unknown access flags {:#x}",
            bits & !(REG_KNOWN | REG_OPTIONAL)
        )));
    }
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(VerbsError::inval(
            "reg_mr: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
        ));
    }
    if access.contains(AccessFlags::ON_DEMAND) {
        return Err(VerbsError::NotSupported("reg_mr: on-demand paging".into()));
    }
    if length == 0 {
        return Err(VerbsError::inval("reg_mr: zero length"));
    }
    if addr == 0 {
        return Err(VerbsError::inval("reg_mr: null address"));
    }
    let host = usize::try_from(addr)
        .ok()
        .filter(|h| length <= usize::MAX as u64 && h.checked_add(length as usize).is_some())
        .and_then(HostPtr::from_registered_addr)
        .ok_or_else(|| VerbsError::inval("reg_mr: range wraps around the address space"))?;
    let access = AccessFlags(bits & REG_KNOWN);
    Ok((host, access))
}
