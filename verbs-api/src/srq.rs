//! Shared receive queues: the attributes of `ibv_create_srq` / `ibv_modify_srq`.

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Receive WRs the SRQ holds at most.
    pub max_wr: u32,
    /// Scatter entries per receive WR at most.
    pub max_sge: u32,
    /// The limit: when the number of posted WRs drops below it (non-zero), an
    /// `SRQ_LIMIT_REACHED` async event fires once and the limit disarms (sets itself to 0).
    pub srq_limit: u32,
}

/// `enum ibv_srq_attr_mask`: which attributes a modify changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttrMask(pub u32);

impl SrqAttrMask {
    /// IBV_SRQ_MAX_WR: resize the queue (when the device supports it).
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1);
    /// IBV_SRQ_LIMIT: arm the limit event.
    pub const LIMIT: SrqAttrMask = SrqAttrMask(1 << 1);

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: SrqAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SrqAttrMask {
    type Output = SrqAttrMask;
    fn bitor(self, rhs: SrqAttrMask) -> SrqAttrMask {
        SrqAttrMask(self.0 | rhs.0)
    }
}
