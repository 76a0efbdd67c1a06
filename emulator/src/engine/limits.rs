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

/// Checks the capacities asked of a new QP against the limits (EINVAL past one).
pub(crate) fn check_qp_cap(c: &QpCap) -> VerbsResult<()> {
    if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
        return Err(VerbsError::inval(format!(
            "queue depth above max_qp_wr {MAX_QP_WR}"
        )));
    }
    if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
        return Err(VerbsError::inval(format!(
            "SGE count above max_sge {MAX_SGE}"
        )));
    }
    if c.max_inline_data > MAX_INLINE_DATA {
        return Err(VerbsError::inval(format!(
            "max_inline_data above {MAX_INLINE_DATA}"
        )));
    }
    Ok(())
}

/// Checks the attributes asked of a new SRQ against the limits (EINVAL past one).
pub(crate) fn check_srq_attr(attr: &SrqAttr) -> VerbsResult<()> {
    if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR {
        return Err(VerbsError::inval(format!(
            "SRQ max_wr {} not in 1..={MAX_SRQ_WR}",
            attr.max_wr
        )));
    }
    if attr.max_sge > MAX_SRQ_SGE {
        return Err(VerbsError::inval(format!(
            "SRQ max_sge {} above {MAX_SRQ_SGE}",
            attr.max_sge
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
