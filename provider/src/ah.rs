//! Address handles: where UD sends go.

use std::sync::Arc;

use softverbs_api::wr::UdDest;
use softverbs_api::{AhAttr, VerbsError, VerbsResult, WcFlags, WorkCompletion};

use crate::pd::Pd;

struct AhInner {
    pd: Pd,
    id: u32,
    attr: AhAttr,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        let _ = self.pd.inner.ctx.inner.backend.destroy_ah(self.id);
    }
}

/// An address handle (`ibv_ah`). Cloning shares it.
#[derive(Clone)]
pub struct Ah {
    inner: Arc<AhInner>,
}

impl Ah {
    pub(crate) fn create(pd: &Pd, attr: &AhAttr) -> VerbsResult<Ah> {
        let id = pd.inner.ctx.inner.backend.create_ah(pd.id(), attr)?;
        Ok(Ah {
            inner: Arc::new(AhInner {
                pd: pd.clone(),
                id,
                attr: *attr,
            }),
        })
    }

    /// `ibv_create_ah_from_wc`: an AH back to the sender of UD receive `wc`, whose buffer
    /// starts with the 40-byte GRH area `grh`.
    pub(crate) fn from_wc(pd: &Pd, wc: &WorkCompletion, grh: &[u8]) -> VerbsResult<Ah> {
        if !wc.wc_flags.contains(WcFlags::GRH) {
            return Err(VerbsError::inval(
                "the completion has no GRH (not a UD receive?)",
            ));
        }
        let attr = AhAttr::from_grh(grh, 1, 1)
            .ok_or_else(|| VerbsError::inval("the GRH area holds no IPv4 or IPv6 header"))?;
        Ah::create(pd, &attr)
    }

    /// Backend id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// The attributes it was created with.
    pub fn attr(&self) -> AhAttr {
        self.inner.attr
    }

    /// The destination of a UD send through this AH to QP `remote_qpn` with Q_Key
    /// `remote_qkey` (high bit set: the sending QP's own Q_Key), for [`SendWr::ud`].
    ///
    /// [`SendWr::ud`]: softverbs_api::SendWr::ud
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            ah: self.inner.id,
            remote_qpn,
            remote_qkey,
        }
    }
}

impl Pd {
    /// `ibv_create_ah`: an address handle for UD sends.
    pub fn create_ah(&self, attr: &AhAttr) -> VerbsResult<Ah> {
        Ah::create(self, attr)
    }

    /// `ibv_create_ah_from_wc`: an address handle back to the sender of a UD receive `wc`
    /// whose buffer starts with the 40-byte GRH area `grh`.
    pub fn create_ah_from_wc(&self, wc: &WorkCompletion, grh: &[u8]) -> VerbsResult<Ah> {
        Ah::from_wc(self, wc, grh)
    }
}
