//! The device's limits, close to rxe's (rxe_param.h): what `query_device` reports and
//! what the verbs calls enforce.

use softverbs_api::{QpCap, SrqAttr, VerbsError, VerbsResult};

/// Most QPs.
pub const MAX_QP: u32 = 0x1_0000;
/// Most WRs per work queue.
pub const MAX_QP_WR: u32 = 0x4000;
/// Most SGEs per WR.
pub const MAX_SGE: u32 = 32;
/// Most CQs.
pub const MAX_CQ: u32 = 0x1_0000;
/// Most CQEs per CQ.
pub const MAX_CQE: u32 = 0x1_0000;
/// Most MRs.
pub const MAX_MR: u32 = 0x1_0000;
/// Most PDs.
pub const MAX_PD: u32 = 0x1_0000;
/// Most inline bytes per send WR.
pub const MAX_INLINE_DATA: u32 = 400;
/// Outstanding READ/atomic per QP (both directions).
pub const MAX_RD_ATOMIC: u32 = 128;
/// First QP number handed out (rxe starts above the special QPs 0 and 1).
pub const FIRST_QPN: u32 = 0x11;
/// Most SRQs (rxe_param.h).
pub const MAX_SRQ: u32 = 0x4_0000;
/// Most WRs per SRQ.
pub const MAX_SRQ_WR: u32 = 0x4000;
/// Most SGEs per SRQ receive WR.
pub const MAX_SRQ_SGE: u32 = 27;
/// Most address handles.
pub const MAX_AH: u32 = 0x3ffe;
/// Most completion channels per context (each holds a file descriptor).
pub const MAX_COMP_CHANNELS: usize = 1024;

/// Most memory windows (rxe_param.h).
pub const MAX_MW: u32 = crate::memory::MAX_MW;

/// A device's limits: what `query_device` reports and what every verbs call that creates
/// something enforces (ENOMEM for a full table, EINVAL for a size beyond a limit), so that
/// no caller, local or remote, grows the device without bound. The default is rxe's
/// (`rxe_param.h`); a [`super::DeviceConfig`] may set smaller ones (tests do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most QPs.
    pub max_qp: u32,
    /// Most WRs per send or receive queue.
    pub max_qp_wr: u32,
    /// Most SGEs per WR.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most CQEs per CQ.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Most memory windows.
    pub max_mw: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most outstanding READ / atomic requests per QP, either direction
    /// (`max_rd_atomic`, `max_dest_rd_atomic`).
    pub max_rd_atomic: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most WRs per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ receive WR.
    pub max_srq_sge: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most inline bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_qp: MAX_QP,
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cq: MAX_CQ,
            max_cqe: MAX_CQE,
            max_mr: MAX_MR,
            max_mw: MAX_MW,
            max_pd: MAX_PD,
            max_rd_atomic: MAX_RD_ATOMIC,
            max_srq: MAX_SRQ,
            max_srq_wr: MAX_SRQ_WR,
            max_srq_sge: MAX_SRQ_SGE,
            max_ah: MAX_AH,
            max_inline_data: MAX_INLINE_DATA,
        }
    }
}

impl DeviceLimits {
    /// ENOMEM if a table of `what` that holds `len` entries may take no more than `max`.
    pub(crate) fn room(what: &str, len: usize, max: u32) -> VerbsResult<()> {
        if len >= max as usize {
            return Err(VerbsError::nomem(format!(
                "{what} table full ({max}, the device's max)"
            )));
        }
        Ok(())
    }

    /// Checks the capacities asked of a new QP against the limits (EINVAL past one).
    pub(crate) fn check_qp_cap(&self, c: &QpCap) -> VerbsResult<()> {
        if c.max_send_wr > self.max_qp_wr || c.max_recv_wr > self.max_qp_wr {
            return Err(VerbsError::inval(format!(
                "queue depth above max_qp_wr {}",
                self.max_qp_wr
            )));
        }
        if c.max_send_sge > self.max_sge || c.max_recv_sge > self.max_sge {
            return Err(VerbsError::inval(format!(
                "SGE count above max_sge {}",
                self.max_sge
            )));
        }
        if c.max_inline_data > self.max_inline_data {
            return Err(VerbsError::inval(format!(
                "max_inline_data above {}",
                self.max_inline_data
            )));
        }
        Ok(())
    }

    /// Checks the attributes asked of a new SRQ against the limits (EINVAL past one).
    pub(crate) fn check_srq_attr(&self, attr: &SrqAttr) -> VerbsResult<()> {
        if attr.max_wr == 0 || attr.max_wr > self.max_srq_wr {
            return Err(VerbsError::inval(format!(
                "SRQ max_wr {} not in 1..={}",
                attr.max_wr, self.max_srq_wr
            )));
        }
        if attr.max_sge > self.max_srq_sge {
            return Err(VerbsError::inval(format!(
                "SRQ max_sge {} above {}",
                attr.max_sge, self.max_srq_sge
            )));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(VerbsError::inval(format!(
                "SRQ limit {} above max_wr {}",
                attr.srq_limit, attr.max_wr
            )));
        }
        Ok(())
    }

    /// Checks the depth asked of a new CQ (EINVAL outside 1..=max_cqe).
    pub(crate) fn check_cqe(&self, cqe: u32) -> VerbsResult<()> {
        if cqe == 0 || cqe > self.max_cqe {
            return Err(VerbsError::inval(format!(
                "cqe {cqe} not in 1..={}",
                self.max_cqe
            )));
        }
        Ok(())
    }
}
