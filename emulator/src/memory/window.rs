//! Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, BIND_MW, LOCAL_INV / SEND_WITH_INV): their
//! keys, states and the checks of binding, invalidation and remote access through a window.
//!
//! A window's rkey is, as in rxe, an index in the high 24 bits and an 8-bit key in the low
//! byte: a bind changes only the low byte (`ibv_inc_rkey`), so the index names the window for
//! its whole life and is also its id at the verbs layer. Unlike rxe the index is not a pool
//! position but a random 23-bit value with the top bit of the key set; region keys never have
//! that bit (see `MrTable::register`), so one bit tells which table a key belongs to, and a
//! window's key says nothing about any region's key or about other windows.
//!
//! This file knows regions only through [`MrView`]; `MrTable` resolves the region a binding
//! names, holds both tables under one lock and counts the windows bound to each region (a
//! region with bound windows cannot be deregistered).

use std::collections::HashMap;

use softverbs_api::{AccessFlags, BindMwWr, MwType, VerbsError, VerbsResult};

use super::error::MemError;
use super::keys::KeyGen;

/// The key bit that marks a window's rkey; region keys never have it.
pub(crate) const WINDOW_KEY_BIT: u32 = 1 << 31;

/// Most windows per device (rxe's RXE_MAX_MW).
pub const MAX_MW: u32 = 0x1_0000;

/// Rights a window may grant. LOCAL_WRITE means nothing for a window and is tolerated (as in
/// rxe); ZERO_BASED windows are not supported (a bind asking for one fails).
const WINDOW_RIGHTS: u32 = AccessFlags::LOCAL_WRITE.0
    | AccessFlags::REMOTE_READ.0
    | AccessFlags::REMOTE_WRITE.0
    | AccessFlags::REMOTE_ATOMIC.0
    | AccessFlags::FLUSH_GLOBAL.0
    | AccessFlags::FLUSH_PERSISTENT.0;

/// Draws of a fresh index before giving up (with at most `MAX_MW` of 2^23 indices in use, a
/// draw hits a used one with probability below 1%).
const INDEX_DRAWS: usize = 64;

/// True if `key` can only be a window's rkey.
pub(crate) fn is_window_key(key: u32) -> bool {
    key & WINDOW_KEY_BIT != 0
}

/// The window id (key index) of an rkey.
pub(crate) fn window_id(key: u32) -> u32 {
    key >> 8
}

/// What a bind needs to know of the region it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MrView {
    /// The region's lkey (how the binding refers to it).
    pub(crate) lkey: u32,
    pub(crate) pd: u32,
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) access: AccessFlags,
}

/// Where a bound window points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding {
    /// lkey of the region the window lies in.
    pub(crate) mr_lkey: u32,
    /// First address of the window (in the region's address space).
    pub(crate) addr: u64,
    /// Length in bytes, at least 1.
    pub(crate) len: u64,
    /// Rights it grants.
    pub(crate) access: AccessFlags,
    /// The QP a type 2 window was bound through: only requests arriving on it may use the
    /// window (IB type 2B, as rxe).
    pub(crate) qpn: Option<u32>,
}

/// Who asks for a bind or an invalidation: the QP that executes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpRef {
    pub(crate) pd: u32,
    pub(crate) qpn: u32,
}

struct Window {
    pd: u32,
    mw_type: MwType,
    /// The current rkey (changes with each successful bind).
    rkey: u32,
    /// The rkey the latest type 1 bind posted through the verb will give, so that binds
    /// posted back to back get successive keys before any of them has executed.
    posted_rkey: u32,
    /// `None`: a type 2 window is free, a type 1 window is valid but covers nothing.
    binding: Option<Binding>,
}

/// How a successful bind changed the window: the binding it replaced and the new one, so
/// that the caller can move the count of windows bound to each region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rebind {
    pub(crate) old: Option<Binding>,
    pub(crate) new: Option<Binding>,
    pub(crate) rkey: u32,
}

/// The windows of one device.
pub(crate) struct WindowTable {
    windows: HashMap<u32, Window>,
    keygen: KeyGen,
    /// Windows per PD (a PD with windows cannot be deallocated).
    pd_windows: HashMap<u32, u32>,
    /// Most windows at once (at most [`MAX_MW`]).
    max_mw: u32,
}

impl WindowTable {
    /// A table of at most `max_mw` windows (clamped to [`MAX_MW`]).
    pub(crate) fn new(max_mw: u32) -> WindowTable {
        WindowTable {
            windows: HashMap::new(),
            keygen: KeyGen::new(),
            pd_windows: HashMap::new(),
            max_mw: max_mw.min(MAX_MW),
        }
    }

    /// `ibv_alloc_mw`: a new window in `pd`, unbound; returns its id and first rkey.
    pub(crate) fn alloc(&mut self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        if self.windows.len() >= self.max_mw as usize {
            return Err(VerbsError::nomem(format!(
                "alloc_mw: all {} memory windows in use",
                self.max_mw
            )));
        }
        let mut id = None;
        for _ in 0..INDEX_DRAWS {
            let candidate = (WINDOW_KEY_BIT >> 8) | self.keygen.tag(23, &[]);
            if !self.windows.contains_key(&candidate) {
                id = Some(candidate);
                break;
            }
        }
        let id = id.ok_or_else(|| VerbsError::nomem("alloc_mw: no free window index"))?;
        let rkey = (id << 8) | self.keygen.tag(8, &[]);
        self.windows.insert(
            id,
            Window {
                pd,
                mw_type,
                rkey,
                posted_rkey: rkey,
                binding: None,
            },
        );
        *self.pd_windows.entry(pd).or_insert(0) += 1;
        Ok((id, rkey))
    }

    /// `ibv_dealloc_mw`: removes the window; returns the binding it had (the region it was
    /// bound to is free of it now). EINVAL for an unknown id.
    pub(crate) fn dealloc(&mut self, id: u32) -> VerbsResult<Option<Binding>> {
        let window = self
            .windows
            .remove(&id)
            .ok_or_else(|| VerbsError::inval(format!("dealloc_mw: no memory window {id:#x}")))?;
        if let Some(n) = self.pd_windows.get_mut(&window.pd) {
            *n -= 1;
            if *n == 0 {
                self.pd_windows.remove(&window.pd);
            }
        }
        Ok(window.binding)
    }

    /// True while `pd` has windows.
    pub(crate) fn pd_in_use(&self, pd: u32) -> bool {
        self.pd_windows.contains_key(&pd)
    }

    /// The checks `ibv_bind_mw` makes before posting a type 1 bind (as the rxe provider:
    /// EINVAL for an unknown or type 2 window and for ZERO_BASED, EPERM for a region of
    /// another PD); returns the rkey the bind will give and remembers it for the next one.
    /// `mr` is the region of a non-empty bind (`None` unbinds).
    pub(crate) fn prepare_type1_bind(
        &mut self,
        id: u32,
        access: AccessFlags,
        mr: Option<MrView>,
    ) -> VerbsResult<u32> {
        let window = self
            .windows
            .get_mut(&id)
            .ok_or_else(|| VerbsError::inval(format!("bind_mw: no memory window {id:#x}")))?;
        if window.mw_type != MwType::Type1 {
            return Err(VerbsError::inval(
                "bind_mw: a type 2 window is bound with an IBV_WR_BIND_MW work request",
            ));
        }
        if access.contains(AccessFlags::ZERO_BASED) {
            return Err(VerbsError::inval(
                "bind_mw: zero-based windows are not supported",
            ));
        }
        if let Some(mr) = mr {
            if mr.pd != window.pd {
                return Err(VerbsError::PermissionDenied(
                    "bind_mw: the memory region belongs to another PD than the window".into(),
                ));
            }
        }
        let rkey = softverbs_api::mw::next_rkey(window.posted_rkey);
        window.posted_rkey = rkey;
        Ok(rkey)
    }

    /// Takes back the rkey [`WindowTable::prepare_type1_bind`] gave for a bind whose post
    /// failed, so that the next bind gets it again (as libibverbs updates `ibv_mw.rkey` only
    /// once the post succeeded). Nothing happens if another bind was prepared since.
    pub(crate) fn cancel_type1_bind(&mut self, id: u32, rkey: u32) {
        if let Some(window) = self.windows.get_mut(&id) {
            if window.posted_rkey == rkey {
                window.posted_rkey = (rkey & !0xff) | (rkey.wrapping_sub(1) & 0xff);
            }
        }
    }

    /// Executes a BIND_MW work request on QP `qp` (both window types; the verb's type 1 bind
    /// posts one too). `mr` is the region `wr.bind_info.mr_lkey` names, if any. The checks
    /// are rxe's (`rxe_check_bind_mw`) plus the PD rules of the IB spec; a failure changes
    /// nothing and is reported as IBV_WC_MW_BIND_ERR by the caller.
    pub(crate) fn bind(
        &mut self,
        qp: QpRef,
        wr: &BindMwWr,
        mr: Option<MrView>,
    ) -> VerbsResult<Rebind> {
        let info = &wr.bind_info;
        let window = self
            .windows
            .get_mut(&wr.mw)
            .ok_or_else(|| VerbsError::inval(format!("bind: no memory window {:#x}", wr.mw)))?;
        if window_id(wr.rkey) != wr.mw {
            return Err(VerbsError::inval(format!(
                "bind: new rkey {:#x} does not keep the window's index {:#x}",
                wr.rkey, wr.mw
            )));
        }
        let access = info.mw_access_flags;
        if access.bits() & !WINDOW_RIGHTS != 0 {
            return Err(VerbsError::inval(format!(
                "bind: access {:#x} not supported for a window",
                access.bits()
            )));
        }
        // C10-72 (and the same PD for the QP of a type 1 bind).
        if qp.pd != window.pd {
            return Err(VerbsError::inval(
                "bind: the QP belongs to another PD than the window",
            ));
        }
        if window.mw_type == MwType::Type2 {
            // o10-37.2.30: a type 2 window is bound only while free; o10-37.2.40: a zero
            // length does not invalidate it (LOCAL_INV / SEND_WITH_INV do).
            if window.binding.is_some() {
                return Err(VerbsError::inval("bind: type 2 window is still bound"));
            }
            if info.length == 0 {
                return Err(VerbsError::inval(
                    "bind: zero-length bind of a type 2 window",
                ));
            }
        }
        let new = if info.length == 0 {
            None
        } else {
            let mr = mr.ok_or_else(|| {
                VerbsError::inval(format!(
                    "bind: no memory region with lkey {:#x}",
                    info.mr_lkey
                ))
            })?;
            if mr.pd != window.pd {
                return Err(VerbsError::inval(
                    "bind: the memory region belongs to another PD than the window",
                ));
            }
            // C10-73
            if !mr.access.contains(AccessFlags::MW_BIND) {
                return Err(VerbsError::inval(
                    "bind: the memory region was not registered with MW_BIND",
                ));
            }
            // C10-74
            if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
                && !mr.access.contains(AccessFlags::LOCAL_WRITE)
            {
                return Err(VerbsError::inval(
                    "bind: remote write / atomic rights need LOCAL_WRITE on the memory region",
                ));
            }
            // C10-75
            let inside = info.addr >= mr.iova
                && info
                    .addr
                    .checked_add(info.length)
                    .is_some_and(|end| end <= mr.iova.saturating_add(mr.len));
            if !inside {
                return Err(VerbsError::inval(format!(
                    "bind: window [{:#x}, +{}) is not inside the memory region [{:#x}, +{})",
                    info.addr, info.length, mr.iova, mr.len
                )));
            }
            Some(Binding {
                mr_lkey: mr.lkey,
                addr: info.addr,
                len: info.length,
                access,
                qpn: (window.mw_type == MwType::Type2).then_some(qp.qpn),
            })
        };
        let old = window.binding;
        let old_rkey = window.rkey;
        window.binding = new;
        window.rkey = (old_rkey & !0xff) | (wr.rkey & 0xff);
        if window.posted_rkey == old_rkey {
            // No verb bind is pending beyond this one: the next starts from the new key.
            window.posted_rkey = window.rkey;
        }
        Ok(Rebind {
            old,
            new,
            rkey: window.rkey,
        })
    }

    /// Invalidation of the type 2 window `rkey` names, asked by QP `qp` (LOCAL_INV) or by a
    /// peer's SEND_WITH_INV arriving on it (`remote`; then the window must be bound to that
    /// QP, as for any remote access). Returns the binding it had. `InvalidKey` if the key
    /// names no window, a stale key, a type 1 window (o10-37.2.26) or a window that is not
    /// bound (so a second invalidation fails); `PdMismatch` for a window of another PD.
    pub(crate) fn invalidate(
        &mut self,
        qp: QpRef,
        rkey: u32,
        remote: bool,
    ) -> Result<Binding, MemError> {
        let window = self
            .windows
            .get_mut(&window_id(rkey))
            .filter(|w| w.rkey == rkey && w.mw_type == MwType::Type2)
            .ok_or(MemError::InvalidKey)?;
        if window.pd != qp.pd {
            return Err(MemError::PdMismatch);
        }
        let binding = window.binding.ok_or(MemError::InvalidKey)?;
        if remote && binding.qpn != Some(qp.qpn) {
            return Err(MemError::InvalidKey);
        }
        window.binding = None;
        Ok(binding)
    }

    /// The binding through which a peer may access `[va, va + len)` with `need` using
    /// `rkey`, for a request arriving on QP `qpn` of `pd` (`qpn` None: no type 2 window
    /// matches). `range` None checks key and rights only (a FLUSH of the whole window).
    pub(crate) fn resolve(
        &self,
        pd: u32,
        qpn: Option<u32>,
        rkey: u32,
        need: AccessFlags,
        range: Option<(u64, u64)>,
    ) -> Result<&Binding, MemError> {
        let window = self
            .windows
            .get(&window_id(rkey))
            .filter(|w| w.rkey == rkey)
            .ok_or(MemError::InvalidKey)?;
        // Unbound (free, invalidated, or a type 1 window bound with length 0).
        let binding = window.binding.as_ref().ok_or(MemError::InvalidKey)?;
        if window.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if binding.qpn.is_some() && binding.qpn != qpn {
            return Err(MemError::InvalidKey);
        }
        if !binding.access.contains(need) {
            return Err(MemError::AccessDenied);
        }
        if let Some((va, len)) = range {
            let offset = va.checked_sub(binding.addr).ok_or(MemError::OutOfBounds)?;
            let end = offset.checked_add(len).ok_or(MemError::OutOfBounds)?;
            if end > binding.len {
                return Err(MemError::OutOfBounds);
            }
        }
        Ok(binding)
    }

    /// Unbinds every type 2 window bound through QP `qpn` (the QP is being destroyed);
    /// returns the bindings it removed.
    pub(crate) fn release_qp(&mut self, qpn: u32) -> Vec<Binding> {
        let mut released = Vec::new();
        for window in self.windows.values_mut() {
            if window.binding.is_some_and(|b| b.qpn == Some(qpn)) {
                released.extend(window.binding.take());
            }
        }
        released
    }
}
