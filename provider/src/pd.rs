//! Protection domains.

use std::sync::Arc;

use softverbs_api::{AccessFlags, AhAttr, SrqAttr, VerbsResult, WorkCompletion};
use softverbs_emu::memory::RdmaBuffer;

use crate::ah::Ah;
use crate::context::Context;
use crate::mr::Mr;
use crate::qp::QpBuilder;
use crate::srq::Srq;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) id: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Children hold this PD alive, so nothing can still use it here.
        let _ = self.ctx.inner.backend.dealloc_pd(self.id);
    }
}

/// A protection domain (`ibv_pd`). Cloning shares it; it is freed when the last clone and the
/// last MR / QP in it are gone.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    pub(crate) fn alloc(ctx: &Context) -> VerbsResult<Pd> {
        let id = ctx.inner.backend.alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                id,
            }),
        })
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Backend id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// `ibv_reg_mr` over an owned buffer; the MR gives it back on [`Mr::into_buffer`].
    pub fn register(&self, buffer: RdmaBuffer, access: AccessFlags) -> VerbsResult<Mr> {
        Mr::register(self, buffer, access)
    }

    /// `ibv_create_srq`: returns the SRQ and the attributes granted.
    pub fn create_srq(&self, attr: &SrqAttr) -> VerbsResult<(Srq, SrqAttr)> {
        Srq::create(self, attr)
    }

    /// `ibv_create_ah`: an address handle for UD sends.
    pub fn create_ah(&self, attr: &AhAttr) -> VerbsResult<Ah> {
        Ah::create(self, attr)
    }

    /// `ibv_create_ah_from_wc`: an address handle back to the sender of a UD receive `wc`
    /// whose buffer starts with the 40-byte GRH area `grh`.
    pub fn create_ah_from_wc(&self, wc: &WorkCompletion, grh: &[u8]) -> VerbsResult<Ah> {
        Ah::from_wc(self, wc, grh)
    }

    /// Starts describing a QP in this PD.
    pub fn qp_builder(&self) -> QpBuilder<'_> {
        QpBuilder::new(self)
    }
}
