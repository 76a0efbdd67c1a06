//! Protection domains.

use std::sync::Arc;

use softverbs_api::VerbsResult;

use crate::context::Context;

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
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> VerbsResult<Pd> {
        Pd::alloc(self)
    }
}
