//! Memory regions over owned buffers.

use softverbs_api::{AccessFlags, Sge, VerbsError, VerbsResult};
use softverbs_emu::memory::RdmaBuffer;

use crate::pd::Pd;

/// A registered memory region (`ibv_mr`) that owns its buffer, so the memory cannot be freed
/// or reused while the device may still access it: dropping the MR deregisters it first.
pub struct Mr {
    pd: Pd,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    registered: bool,
    buffer: Option<RdmaBuffer>,
}

impl Mr {
    pub(crate) fn register(pd: &Pd, buffer: RdmaBuffer, access: AccessFlags) -> VerbsResult<Mr> {
        let keys = pd.inner.ctx.inner.backend.reg_mr(
            pd.inner.id,
            buffer.addr(),
            buffer.len() as u64,
            access,
        )?;
        Ok(Mr {
            pd: pd.clone(),
            lkey: keys.lkey,
            rkey: keys.rkey,
            access,
            registered: true,
            buffer: Some(buffer),
        })
    }

    fn buf(&self) -> &RdmaBuffer {
        // Only `into_buffer` takes it, and that consumes the MR.
        self.buffer
            .as_ref()
            .expect("MR buffer present until into_buffer")
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Start address (what a peer uses as remote address).
    pub fn addr(&self) -> u64 {
        self.buf().addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf().len()
    }

    /// True for a zero-length MR.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The PD it is registered in.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// An SGE for `len` bytes at `offset` of this MR; EINVAL if it does not fit.
    pub fn sge(&self, offset: usize, len: u32) -> VerbsResult<Sge> {
        match offset.checked_add(len as usize) {
            Some(end) if end <= self.len() => Ok(Sge {
                addr: self.addr() + offset as u64,
                length: len,
                lkey: self.lkey,
            }),
            _ => Err(VerbsError::inval(format!(
                "SGE {offset}+{len} outside the {}-byte MR",
                self.len()
            ))),
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> VerbsResult<()> {
        self.buf()
            .read(offset, out)
            .map_err(|e| VerbsError::inval(e.to_string()))
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> VerbsResult<()> {
        self.buf()
            .write(offset, data)
            .map_err(|e| VerbsError::inval(e.to_string()))
    }

    /// Sets every byte of the region to `byte`.
    pub fn fill(&self, byte: u8) -> VerbsResult<()> {
        self.buf().fill(byte);
        Ok(())
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.buf().to_vec()
    }

    /// Deregisters and gives the buffer back.
    pub fn into_buffer(mut self) -> VerbsResult<RdmaBuffer> {
        self.deregister()?;
        Ok(self.buffer.take().expect("buffer present"))
    }

    fn deregister(&mut self) -> VerbsResult<()> {
        if !self.registered {
            return Ok(());
        }
        self.pd.inner.ctx.inner.backend.dereg_mr(self.lkey)?;
        self.registered = false;
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // Deregistration must finish before `buffer` is freed (it is dropped after this). If
        // it fails (EBUSY: a memory window bound through the backend layer still points into
        // it), the device may still access the memory: leak it rather than free it.
        if self.deregister().is_err() {
            std::mem::forget(self.buffer.take());
        }
    }
}

impl Pd {
    /// `ibv_reg_mr` over an owned buffer; the MR gives it back on [`Mr::into_buffer`].
    pub fn register(&self, buffer: RdmaBuffer, access: AccessFlags) -> VerbsResult<Mr> {
        Mr::register(self, buffer, access)
    }
}
