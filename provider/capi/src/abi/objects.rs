//! The verbs objects applications hold pointers to: PD, MR, CQ (`ibv_cq` / `ibv_cq_ex`),
//! QP (`ibv_qp` / `ibv_qp_ex`), SRQ, AH, MW and completion channel.

use std::ffi::c_void;

use super::context::{IbvContext, PthreadCond, PthreadMutex};
use super::{IbvMwBindInfo, IbvSge, Opaque};

/// `struct ibv_pd`.
#[repr(C)]
pub struct IbvPd {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Kernel handle (the backend's PD id).
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Start of the region.
    pub addr: *mut c_void,
    /// Length of the region.
    pub length: usize,
    /// Handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct IbvCompChannel {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Readable while an event is pending.
    pub fd: i32,
    /// CQs using it.
    pub refcnt: i32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct IbvCq {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Completion channel, if any.
    pub channel: *mut IbvCompChannel,
    /// The application's pointer.
    pub cq_context: *mut c_void,
    /// Handle.
    pub handle: u32,
    /// Capacity.
    pub cqe: i32,
    /// Library mutex.
    pub mutex: PthreadMutex,
    /// Library condition.
    pub cond: PthreadCond,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct IbvPollCqAttr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_cq_ex`: an `ibv_cq` (same leading fields) plus the polling functions.
#[repr(C)]
pub struct IbvCqEx {
    /// The `ibv_cq` part.
    pub cq: IbvCq,
    /// Which optional fields are valid.
    pub comp_mask: u32,
    /// Status of the current completion.
    pub status: u32,
    /// wr_id of the current completion.
    pub wr_id: u64,
    /// `start_poll`
    pub start_poll: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut IbvPollCqAttr) -> i32>,
    /// `next_poll`
    pub next_poll: Option<unsafe extern "C" fn(*mut IbvCqEx) -> i32>,
    /// `end_poll`
    pub end_poll: Option<unsafe extern "C" fn(*mut IbvCqEx)>,
    /// `read_opcode`
    pub read_opcode: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_vendor_err`
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_byte_len`
    pub read_byte_len: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_imm_data` (big-endian)
    pub read_imm_data: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_qp_num`
    pub read_qp_num: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_src_qp`
    pub read_src_qp: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_wc_flags`
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_slid`
    pub read_slid: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_sl`
    pub read_sl: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    /// `read_dlid_path_bits`
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    /// `read_completion_ts`
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u64>,
    /// `read_cvlan`
    pub read_cvlan: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u16>,
    /// `read_flow_tag`
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// `read_tm_info`
    pub read_tm_info: Opaque,
    /// `read_completion_wallclock_ns`
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u64>,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct IbvQp {
    /// Owning context.
    pub context: *mut IbvContext,
    /// The application's pointer.
    pub qp_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Send CQ.
    pub send_cq: *mut IbvCq,
    /// Receive CQ.
    pub recv_cq: *mut IbvCq,
    /// SRQ, if any.
    pub srq: *mut IbvSrq,
    /// Handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Library mutex.
    pub mutex: PthreadMutex,
    /// Library condition.
    pub cond: PthreadCond,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp_ex`: an `ibv_qp` plus the work-request builder functions.
#[repr(C)]
pub struct IbvQpEx {
    /// The `ibv_qp` part.
    pub qp_base: IbvQp,
    /// Valid optional fields.
    pub comp_mask: u64,
    /// wr_id of the next WR.
    pub wr_id: u64,
    /// Send flags of the next WR.
    pub wr_flags: u32,
    /// `wr_atomic_cmp_swp`
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64, u64)>,
    /// `wr_atomic_fetch_add`
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64)>,
    /// `wr_bind_mw`
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvMw, u32, *const IbvMwBindInfo)>,
    /// `wr_local_inv`
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `wr_rdma_read`
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    /// `wr_rdma_write`
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    /// `wr_rdma_write_imm`
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    /// `wr_send`
    pub wr_send: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// `wr_send_imm`
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `wr_send_inv`
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `wr_send_tso`
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, u16, u16)>,
    /// `wr_set_ud_addr`
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvAh, u32, u32)>,
    /// `wr_set_xrc_srqn`
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `wr_set_inline_data`
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, usize)>,
    /// `wr_set_inline_data_list`
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvDataBuf)>,
    /// `wr_set_sge`
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    /// `wr_set_sge_list`
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvSge)>,
    /// `wr_start`
    pub wr_start: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// `wr_complete`
    pub wr_complete: Option<unsafe extern "C" fn(*mut IbvQpEx) -> i32>,
    /// `wr_abort`
    pub wr_abort: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// `wr_atomic_write`
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, *const c_void)>,
    /// `wr_flush` (rdma-core 45 and later; beyond what rdma-core 44 applications read).
    pub wr_flush: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, usize, u8, u8)>,
}

/// `struct ibv_data_buf`.
#[repr(C)]
pub struct IbvDataBuf {
    /// Start.
    pub addr: *mut c_void,
    /// Length.
    pub length: usize,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct IbvSrq {
    /// Owning context.
    pub context: *mut IbvContext,
    /// The application's pointer.
    pub srq_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Handle.
    pub handle: u32,
    /// Library mutex.
    pub mutex: PthreadMutex,
    /// Library condition.
    pub cond: PthreadCond,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct IbvAh {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Handle.
    pub handle: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct IbvMw {
    /// Owning context.
    pub context: *mut IbvContext,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Current remote key.
    pub rkey: u32,
    /// Handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: u32,
}
