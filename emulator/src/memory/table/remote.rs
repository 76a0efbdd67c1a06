//! The MR table's remote accesses: what a peer's request may do to memory (RDMA READ and
//! WRITE, atomics, FLUSH), each checked for key, protection domain, access and bounds
//! before a byte moves.

use super::*;

impl MrTable {
    /// Checks, without copying, that a peer may access `[va, va + len)` through `rkey` with
    /// `need` (e.g. the whole DMA length of a multi-packet WRITE, at its FIRST packet). A
    /// zero-length access checks nothing (C9-88).
    pub fn check_remote(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.inner
            .read()
            .remote_span(who.into(), rkey, need, va, len)?;
        Ok(())
    }

    /// A peer's RDMA WRITE of `data` at `va` through `rkey`, for a QP of `pd`: needs
    /// REMOTE_WRITE. A zero-length write touches nothing and checks nothing (IB spec C9-88, as
    /// rxe).
    pub fn remote_write(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        let inner = self.inner.read();
        inner
            .remote_span(
                who.into(),
                rkey,
                AccessFlags::REMOTE_WRITE,
                va,
                data.len() as u64,
            )?
            .write_from(data);
        Ok(())
    }

    /// A peer's RDMA READ of `len` bytes at `va` through `rkey`, for a QP of `pd`: needs
    /// REMOTE_READ; appends the bytes to `out`. A zero-length read checks nothing (C9-88).
    pub fn remote_read(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        len: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.inner
            .read()
            .remote_span(who.into(), rkey, AccessFlags::REMOTE_READ, va, len.into())?
            .append_to(out);
        Ok(())
    }

    /// A peer's RDMA READ checked as [`MrTable::remote_read`] checks it, but not copied: the
    /// range as a slice of the region it lies in (a window's rkey is resolved to its
    /// region), for responses that read their payload when they are built or sent. `None`
    /// for a zero-length read, which checks nothing.
    pub fn remote_slice(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        len: u32,
    ) -> Result<Option<LocalSlice>, MemError> {
        self.inner.read().remote_slice(who.into(), rkey, va, len)
    }

    /// Copies the bytes of `slice` into `out`, checked again as [`MrReader::bytes`] checks
    /// them; `LengthExceeded` if `out` is not the slice's length.
    pub fn read_slice(&self, slice: &LocalSlice, out: &mut [u8]) -> Result<(), MemError> {
        if out.len() != slice.len as usize {
            return Err(MemError::LengthExceeded);
        }
        self.inner.read().slice_span(slice)?.copy_to(out);
        Ok(())
    }

    /// A peer's ATOMIC CMP_AND_SWP on the host-order u64 at `va` (8-aligned, REMOTE_ATOMIC):
    /// stores `swap` if the word equals `compare`; returns the original word either way.
    pub fn atomic_cmp_swap(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemError> {
        self.with_atomic(who.into(), rkey, va, |word| {
            match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// A peer's ATOMIC FETCH_AND_ADD (wrapping) on the host-order u64 at `va` (8-aligned,
    /// REMOTE_ATOMIC); returns the original word.
    pub fn atomic_fetch_add(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        add: u64,
    ) -> Result<u64, MemError> {
        self.with_atomic(who.into(), rkey, va, |word| {
            word.fetch_add(add, Ordering::SeqCst)
        })
    }

    /// A peer's ATOMIC WRITE: the 8 bytes `value` stored at the 8-aligned `va` in one atomic
    /// store. Needs REMOTE_WRITE (as rxe; not REMOTE_ATOMIC). The bytes land as sent.
    pub fn atomic_write(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        value: [u8; 8],
    ) -> Result<(), MemError> {
        let inner = self.inner.read();
        let span = inner.remote_span(who.into(), rkey, AccessFlags::REMOTE_WRITE, va, 8)?;
        if va & 7 != 0 {
            return Err(MemError::Misaligned);
        }
        span.as_atomic_u64()?
            .store(u64::from_ne_bytes(value), Ordering::Release);
        Ok(())
    }

    /// A peer's FLUSH of `[va, va + len)` (or of the whole region when `whole_region`, the
    /// FETH's selectivity level 1): needs FLUSH_PERSISTENT for placement type 2, else
    /// FLUSH_GLOBAL. Host memory is made globally visible with a full fence; there is no
    /// persistent memory here, so a persistence FLUSH succeeds only on a region registered
    /// with FLUSH_PERSISTENT, which `register` accepts as the same host memory.
    pub fn flush(
        &self,
        who: impl Into<RemoteAccessor>,
        rkey: u32,
        va: u64,
        len: u64,
        persistent: bool,
        whole_region: bool,
    ) -> Result<(), MemError> {
        let need = if persistent {
            AccessFlags::FLUSH_PERSISTENT
        } else {
            AccessFlags::FLUSH_GLOBAL
        };
        let who = who.into();
        let inner = self.inner.read();
        let range = (!whole_region && len > 0).then_some((va, len));
        if is_window_key(rkey) {
            // The whole "region" of a window is the window.
            inner.windows.resolve(who.pd, who.qpn, rkey, need, range)?;
        } else {
            let region = inner.region_by(rkey, true)?;
            if region.pd != who.pd {
                return Err(MemError::PdMismatch);
            }
            if !region.access.contains(need) {
                return Err(MemError::AccessDenied);
            }
            if let Some((va, len)) = range {
                region.span(va, len)?;
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn with_atomic<R>(
        &self,
        who: RemoteAccessor,
        rkey: u32,
        va: u64,
        op: impl FnOnce(&AtomicU64) -> R,
    ) -> Result<R, MemError> {
        let inner = self.inner.read();
        let span = inner.remote_span(who, rkey, AccessFlags::REMOTE_ATOMIC, va, 8)?;
        // The IB rule is on the virtual address; the host check inside matters only if the two
        // ever differ.
        if va & 7 != 0 {
            return Err(MemError::Misaligned);
        }
        Ok(op(span.as_atomic_u64()?))
    }
}
