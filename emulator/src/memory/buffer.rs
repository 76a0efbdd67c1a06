//! Owned, page-aligned memory for registration: what the safe `softverbs::Mr` wraps.
//!
//! The engine writes into a registered buffer from its own thread (receives, RDMA WRITEs)
//! while the application holds it, so the buffer is never handed out as `&[u8]` / `&mut [u8]`;
//! the application copies in and out with [`RdmaBuffer::read`] / [`RdmaBuffer::write`].
//! As with any RDMA memory, bytes a posted WR is still using have no defined value until its
//! completion has been polled.
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: a page, as `ibv_reg_mr` users usually allocate.
pub const BUFFER_ALIGN: usize = 4096;

/// An access outside the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range {offset}+{len} is outside the {size}-byte buffer")]
pub struct OutOfRange {
    /// Requested offset.
    pub offset: usize,
    /// Requested length.
    pub len: usize,
    /// Buffer size.
    pub size: usize,
}

/// A zero-initialised, page-aligned heap buffer with a stable address.
pub struct RdmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation; all access goes through raw copies that the RDMA
// contract (no use of bytes under an outstanding WR) keeps from racing meaningfully.
unsafe impl Send for RdmaBuffer {}
// SAFETY: as above; `&RdmaBuffer` only exposes copying methods, never references into it.
unsafe impl Sync for RdmaBuffer {}

impl RdmaBuffer {
    /// A buffer of `len` zero bytes. `None` if the allocation fails.
    pub fn new(len: usize) -> Option<RdmaBuffer> {
        if len == 0 {
            return Some(RdmaBuffer {
                ptr: NonNull::dangling(),
                len: 0,
            });
        }
        let layout = Layout::from_size_align(len, BUFFER_ALIGN).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        NonNull::new(raw).map(|ptr| RdmaBuffer { ptr, len })
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Option<RdmaBuffer> {
        let buf = RdmaBuffer::new(data.len())?;
        buf.write(0, data).ok()?;
        Some(buf)
    }

    /// Start address, as registered with `reg_mr`.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `out.len()` bytes starting at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the range was checked to lie inside the live allocation, and `out` is a
        // distinct Rust-owned slice, so the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.check(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range was checked to lie inside the live allocation, and `data` is a
        // distinct Rust-owned slice, so the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Sets every byte to `byte`.
    pub fn fill(&self, byte: u8) {
        if self.len == 0 {
            return;
        }
        // SAFETY: writes exactly the allocation's `len` bytes.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len) };
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // The range is the whole buffer, which cannot be out of range.
        let _ = self.read(0, &mut v);
        v
    }
}

impl Drop for RdmaBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.len, BUFFER_ALIGN) {
            // SAFETY: allocated in `new` with this same layout, and freed only here.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for RdmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaBuffer({:#x}, {} bytes)", self.addr(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_bounds() {
        let b = RdmaBuffer::new(100).unwrap();
        assert_eq!(b.addr() % BUFFER_ALIGN as u64, 0);
        assert!(b.to_vec().iter().all(|&x| x == 0));
        b.write(98, &[1, 2]).unwrap();
        assert_eq!(b.write(99, &[1, 2]).unwrap_err().size, 100);
        let mut two = [0u8; 2];
        b.read(98, &mut two).unwrap();
        assert_eq!(two, [1, 2]);
        assert!(b.read(usize::MAX, &mut two).is_err());
        let empty = RdmaBuffer::new(0).unwrap();
        assert!(empty.to_vec().is_empty());
        assert!(empty.write(0, &[1]).is_err());
    }
}
