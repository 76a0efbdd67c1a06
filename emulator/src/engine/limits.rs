//! The device's limits, close to rxe's (rxe_param.h): what `query_device` reports and
//! what the verbs calls enforce.

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
