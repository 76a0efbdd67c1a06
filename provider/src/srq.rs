//! Shared receive queues.

use std::sync::Arc;

use softverbs_api::{PostError, RecvWr, SrqAttr, SrqAttrMask, VerbsResult};

use crate::pd::Pd;

struct SrqInner {
    pd: Pd,
    id: u32,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // QPs hold their SRQ alive, so none uses it any more.
        let _ = self.pd.inner.ctx.inner.backend.destroy_srq(self.id);
    }
}

/// A shared receive queue (`ibv_srq`): receive WRs that several QPs take from. Cloning
/// shares it; QPs created on it keep it alive.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    pub(crate) fn create(pd: &Pd, attr: &SrqAttr) -> VerbsResult<(Srq, SrqAttr)> {
        let (id, granted) = pd.inner.ctx.inner.backend.create_srq(pd.id(), attr)?;
        let srq = Srq {
            inner: Arc::new(SrqInner { pd: pd.clone(), id }),
        };
        Ok((srq, granted))
    }

    /// Backend id (what SRQ async events name).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    fn backend(&self) -> &Arc<dyn softverbs_api::VerbsContext> {
        &self.inner.pd.inner.ctx.inner.backend
    }

    /// `ibv_post_srq_recv`; on failure, the index of the first WR not posted.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.backend().post_srq_recv(self.inner.id, wrs)
    }

    /// `ibv_modify_srq`.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        self.backend().modify_srq(self.inner.id, attr, mask)
    }

    /// Arms the limit: once fewer than `limit` WRs are posted, one SRQ_LIMIT_REACHED async
    /// event fires and the limit disarms.
    pub fn arm_limit(&self, limit: u32) -> VerbsResult<()> {
        let attr = SrqAttr {
            srq_limit: limit,
            ..SrqAttr::default()
        };
        self.modify(&attr, SrqAttrMask::LIMIT)
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> VerbsResult<SrqAttr> {
        self.backend().query_srq(self.inner.id)
    }
}

impl Pd {
    /// `ibv_create_srq`: returns the SRQ and the attributes granted.
    pub fn create_srq(&self, attr: &SrqAttr) -> VerbsResult<(Srq, SrqAttr)> {
        Srq::create(self, attr)
    }
}
