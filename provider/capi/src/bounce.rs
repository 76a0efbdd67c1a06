//! Registered copies of data verbs.h lets applications pass from unregistered memory: the
//! 8 bytes of an ATOMIC WRITE (`ibv_wr_atomic_write`) and inline send data whose buffer lies
//! in no registered region. The emulator reads process memory only through its MR table.
//!
//! - ATOMIC WRITE values go to a per-QP ring of 8-byte slots registered once, twice as many
//!   slots as the send queue is deep: a slot is reused only after as many later WRs as the
//!   queue holds, so its WR has completed (it kept a send queue entry until then).
//! - Inline data the emulator copies at post time, so a region registered for the length of
//!   the post call carries it.

use parking_lot::Mutex;
use softverbs_api::{AccessFlags, QpPoster, SendFlags, SendWr, Sge};

/// What the copies need of a context: its backend, and the lkey of a registered region
/// that covers some bytes (the context's handle table, one layer up, provides it).
pub trait RegionLookup {
    /// The backend the copies are registered with and posted to.
    fn backend(&self) -> &dyn softverbs_api::VerbsContext;
    /// The lkey of a region registered by the application that covers `[addr, addr + len)`.
    fn lkey_covering(&self, addr: u64, len: u64) -> Option<u32>;
}

/// A per-QP ring of registered 8-byte slots.
pub struct AtomicRing {
    slots: Mutex<Option<Ring>>,
}

struct Ring {
    buf: Box<[u64]>,
    lkey: u32,
    next: usize,
}

impl AtomicRing {
    /// An empty ring (registered on first use).
    pub fn new() -> Self {
        AtomicRing {
            slots: Mutex::new(None),
        }
    }

    /// Copies `value` into the next slot (registering the ring in `pd` with room for
    /// `2 * depth` values on first use) and gives the SGE that reads it.
    pub fn stage(
        &self,
        ctx: &dyn RegionLookup,
        pd: u32,
        depth: u32,
        value: u64,
    ) -> Result<Sge, i32> {
        let mut guard = self.slots.lock();
        if guard.is_none() {
            let n = (depth.max(1) as usize) * 2;
            let buf = vec![0u64; n].into_boxed_slice();
            let keys = ctx
                .backend()
                .reg_mr(
                    pd,
                    buf.as_ptr() as u64,
                    (n * 8) as u64,
                    AccessFlags::LOCAL_WRITE,
                )
                .map_err(|e| e.errno())?;
            *guard = Some(Ring {
                buf,
                lkey: keys.lkey,
                next: 0,
            });
        }
        let ring = guard.as_mut().expect("set above");
        let i = ring.next % ring.buf.len();
        ring.next = ring.next.wrapping_add(1);
        ring.buf[i] = value;
        Ok(Sge {
            addr: &ring.buf[i] as *const u64 as u64,
            length: 8,
            lkey: ring.lkey,
        })
    }

    /// Deregisters the ring (when its QP is destroyed).
    pub fn release(&self, ctx: &dyn RegionLookup) {
        if let Some(ring) = self.slots.lock().take() {
            // Deregister before the buffer is freed at the end of this scope.
            let _ = ctx.backend().dereg_mr(ring.lkey);
        }
    }
}

/// Posts `wrs` through `qp`'s post calls, first copying the inline data that lies in no
/// registered region into a region registered (in `pd`) for the duration of the call.
pub fn post_send(
    ctx: &dyn RegionLookup,
    pd: u32,
    qp: &QpPoster,
    mut wrs: Vec<SendWr>,
) -> Result<(), softverbs_api::PostError> {
    let post = |wrs: &[SendWr]| qp.post_send(ctx.backend(), wrs);
    let inline = |w: &SendWr| w.send_flags.contains(SendFlags::INLINE);
    if !wrs.iter().any(inline) {
        return post(&wrs);
    }
    // verbs.h ignores the lkey of inline data: find the region that holds each buffer, and
    // gather the bytes in none into one staging buffer.
    let mut staged: Vec<u8> = Vec::new();
    let mut places = Vec::new();
    for (wi, w) in wrs.iter_mut().enumerate() {
        if !w.send_flags.contains(SendFlags::INLINE) {
            continue;
        }
        for (si, s) in w.sg_list.iter_mut().enumerate() {
            if s.length == 0 {
                continue;
            }
            if let Some(lkey) = ctx.lkey_covering(s.addr, s.length as u64) {
                s.lkey = lkey;
                continue;
            }
            let offset = staged.len();
            // SAFETY: inline data: the application's buffer of `length` readable bytes,
            // valid for this post call (verbs.h contract of IBV_SEND_INLINE).
            let bytes =
                unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            staged.extend_from_slice(bytes);
            places.push((wi, si, offset));
        }
    }
    if places.is_empty() {
        return post(&wrs);
    }
    let keys = ctx
        .backend()
        .reg_mr(
            pd,
            staged.as_ptr() as u64,
            staged.len() as u64,
            AccessFlags::empty(),
        )
        .map_err(|error| softverbs_api::PostError { index: 0, error })?;
    for (wi, si, offset) in places {
        let s = &mut wrs[wi].sg_list[si];
        s.addr = staged.as_ptr() as u64 + offset as u64;
        s.lkey = keys.lkey;
    }
    let result = post(&wrs);
    // Inline data was copied by the post: the staging region can go.
    let _ = ctx.backend().dereg_mr(keys.lkey);
    result
}
