//! One registered memory region, and the raw copies into and out of it.
//!
//! This file holds the emulator's only `unsafe` code. A [`Span`] is an address range already
//! checked to lie inside a region; it borrows the region, and the region is borrowed from the
//! table's read guard, so a span cannot outlive the registration: `deregister` takes the write
//! lock and therefore waits for every copy in flight.
//!
//! The memory is application memory. The application may read or write it while the emulator
//! does (a peer's RDMA WRITE landing in a buffer the application is looking at): that is the
//! RDMA contract, exactly as with a NIC's DMA, and the application sees torn or mixed bytes if
//! it does so without synchronising through completions. The emulator's own atomics use
//! `AtomicU64` on the target address, so they are atomic with respect to each other from any
//! thread; mixing them with plain CPU accesses to the same word is, as on hardware, the
//! application's business.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use softverbs_api::AccessFlags;

use super::error::MemError;

/// A registered region: `[iova, iova + len)` as SGEs and peers address it, backed by the
/// process memory at `host`.
#[derive(Debug)]
pub(crate) struct Region {
    /// Protection domain.
    pub(crate) pd: u32,
    /// First address of the region in the address space keys use (the registered address).
    pub(crate) iova: u64,
    /// First byte of the region in this process; `host + len` does not overflow.
    pub(crate) host: HostPtr,
    /// Length in bytes, at least 1.
    pub(crate) len: u64,
    /// What the region allows.
    pub(crate) access: AccessFlags,
    /// Local key.
    pub(crate) lkey: u32,
    /// Remote key.
    pub(crate) rkey: u32,
}

/// The first byte of a registered region in this process: a pointer made once, at
/// registration, from the address the application gave (`ibv_reg_mr` takes an address, not a
/// Rust pointer), and the only pointer every later copy into or out of the region derives
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostPtr(NonNull<u8>);

// SAFETY: a HostPtr is an address with provenance; it is dereferenced only through a `Span`,
// whose copies are sound from any thread under the reg_mr contract (see the module doc). The
// table that holds it is shared between the application's threads and the engine's.
unsafe impl Send for HostPtr {}
// SAFETY: as above; `&HostPtr` gives nothing but the address.
unsafe impl Sync for HostPtr {}

impl HostPtr {
    /// The memory at `addr`, as registered; `None` for a null address.
    ///
    /// The pointer takes the provenance the application exposed when it turned its own
    /// pointer into this address (`ptr as u64`, or C code, which has no provenance to lose),
    /// so it may access the memory exactly as the application's pointer could.
    pub(crate) fn from_registered_addr(addr: usize) -> Option<HostPtr> {
        NonNull::new(std::ptr::with_exposed_provenance_mut(addr)).map(HostPtr)
    }
}

impl Region {
    /// The part `[va, va + len)` of the region, or `OutOfBounds` if it is not all inside
    /// (including ranges that wrap around the 64-bit address space).
    pub(crate) fn span(&self, va: u64, len: u64) -> Result<Span<'_>, MemError> {
        let offset = va.checked_sub(self.iova).ok_or(MemError::OutOfBounds)?;
        let end = offset.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > self.len {
            return Err(MemError::OutOfBounds);
        }
        // Both fit in usize: they are at most `len`, and `host + len` fits (see `host`).
        Ok(Span {
            // In bounds of the region, so no wrap-around: `wrapping_add` only spares an
            // unsafe block.
            host: self.host.0.as_ptr().wrapping_add(offset as usize),
            len: len as usize,
            _region: PhantomData,
        })
    }
}

/// `len` bytes at `host`, checked to lie inside a region that stays registered for `'r`.
/// `host` derives from the region's [`HostPtr`]; the span never makes a Rust reference into
/// the memory except in [`Span::as_bytes`] and [`Span::as_atomic_u64`], which say why.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'r> {
    host: *mut u8,
    len: usize,
    _region: PhantomData<&'r Region>,
}

impl<'r> Span<'r> {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `len` bytes at `offset` of this span. Panics if they are not inside it (a bug in the
    /// caller, which computes them from this span's length).
    pub(crate) fn sub(&self, offset: usize, len: usize) -> Span<'r> {
        assert!(
            offset <= self.len && len <= self.len - offset,
            "sub-span out of range"
        );
        Span {
            host: self.host.wrapping_add(offset),
            len,
            _region: PhantomData,
        }
    }

    /// Appends the span's bytes to `out`.
    pub(crate) fn append_to(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.len, 0);
        self.copy_to(&mut out[start..]);
    }

    /// Copies the span's bytes into `dst`, which must be exactly as long.
    pub(crate) fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "copy_to: length mismatch");
        // SAFETY: [host, host + len) lies inside a region (checked by `Region::span`) that is
        // registered for 'r, and by the reg_mr contract registered memory stays allocated until
        // deregister returns, which cannot happen while the table's read guard behind 'r is
        // held; `host` derives from the registration's `HostPtr`, so it may access it. `dst`
        // is a Rust slice of exactly `len` bytes (the emulator's own buffer), which by the
        // same contract does not overlap registered memory. u8 has no alignment or validity
        // requirements.
        unsafe { std::ptr::copy_nonoverlapping(self.host.cast_const(), dst.as_mut_ptr(), self.len) }
    }

    /// The span's bytes, borrowed for as long as the region stays registered: for reads
    /// that must not copy (a send hands the kernel this memory, and the ICRC covers it).
    pub(crate) fn as_bytes(&self) -> &'r [u8] {
        // SAFETY: [host, host + len) is registered, allocated memory for 'r (see `copy_to`);
        // `host` is non-null and u8 needs no alignment. The emulator only reads through the
        // slice. The application may write the memory meanwhile, which the RDMA contract in
        // the module doc makes its own race (a NIC's DMA reads torn bytes the same way); here
        // the worst outcome is a packet whose ICRC does not match the bytes sent, which the
        // receiver drops and the requester sends again.
        unsafe { std::slice::from_raw_parts(self.host.cast_const(), self.len) }
    }

    /// Overwrites the span with `src`, which must be exactly as long.
    pub(crate) fn write_from(&self, src: &[u8]) {
        assert_eq!(src.len(), self.len, "write_from: length mismatch");
        // SAFETY: as in `copy_to`, [host, host + len) is registered, allocated memory for 'r;
        // the registration's access flags were checked by the caller, and the reg_mr contract
        // allows the backend to write it. `src` is a Rust slice, so it cannot overlap memory
        // that the contract hands to the backend.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.host, self.len) }
    }

    /// The span as a 64-bit atomic word: it must be 8 bytes long and 8-byte aligned in this
    /// process (`Misaligned` otherwise).
    pub(crate) fn as_atomic_u64(&self) -> Result<&'r AtomicU64, MemError> {
        if self.len != 8 || self.host.addr() & 7 != 0 {
            return Err(MemError::Misaligned);
        }
        // SAFETY: the 8 bytes at `host` are registered, allocated memory for 'r (see
        // `copy_to`), and `host` is 8-aligned as AtomicU64 requires. The emulator accesses
        // this word only atomically while the reference lives; the application's own
        // concurrent accesses are the RDMA contract described in the module doc.
        Ok(unsafe { AtomicU64::from_ptr(self.host.cast::<u64>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(host: usize, iova: u64, len: u64) -> Region {
        Region {
            pd: 1,
            iova,
            host: HostPtr::from_registered_addr(host).unwrap(),
            len,
            access: AccessFlags::LOCAL_WRITE,
            lkey: 1,
            rkey: 2,
        }
    }

    #[test]
    fn span_bounds() {
        let r = region(0x1000, 0x1000, 16);
        assert_eq!(r.span(0x1000, 16).map(|s| s.len()), Ok(16));
        assert_eq!(r.span(0x100f, 1).map(|s| s.len()), Ok(1));
        assert_eq!(r.span(0x1010, 0).map(|s| s.len()), Ok(0));
        assert_eq!(r.span(0x1010, 1).err(), Some(MemError::OutOfBounds));
        assert_eq!(r.span(0x0fff, 1).err(), Some(MemError::OutOfBounds));
        assert_eq!(r.span(0x1001, 16).err(), Some(MemError::OutOfBounds));
        assert_eq!(r.span(0x1000, u64::MAX).err(), Some(MemError::OutOfBounds));
        assert_eq!(r.span(u64::MAX, 2).err(), Some(MemError::OutOfBounds));
    }

    #[test]
    fn copies() {
        let mut buf = vec![0u8; 32];
        let r = region(buf.as_mut_ptr() as usize, 0x5000, 32);
        r.span(0x5004, 4).unwrap().write_from(&[1, 2, 3, 4]);
        let mut out = vec![9];
        r.span(0x5003, 6).unwrap().append_to(&mut out);
        assert_eq!(out, [9, 0, 1, 2, 3, 4, 0]);
        let s = r.span(0x5000, 32).unwrap().sub(8, 2);
        s.write_from(&[7, 7]);
        assert_eq!(buf[4..12], [1, 2, 3, 4, 7, 7, 0, 0]);
    }
}
