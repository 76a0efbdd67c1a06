//! Work requests and completions: `ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`.

use super::attr::IbvMwBindInfo;
use super::objects::{IbvAh, IbvMw};

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WrRdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WrAtomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WrUd {
    pub ah: *mut IbvAh,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The union `wr` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union WrUnion {
    pub rdma: WrRdma,
    pub atomic: WrAtomic,
    pub ud: WrUd,
}

/// `bind_mw` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WrBindMw {
    pub mw: *mut IbvMw,
    pub rkey: u32,
    pub bind_info: IbvMwBindInfo,
}

/// `tso` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WrTso {
    pub hdr: *mut std::ffi::c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The last union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union WrExtra {
    pub bind_mw: WrBindMw,
    pub tso: WrTso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: i32,
    pub opcode: u32,
    pub send_flags: u32,
    /// `imm_data` (big-endian) or `invalidate_rkey`.
    pub imm_data_or_invalidate_rkey: u32,
    pub wr: WrUnion,
    /// `qp_type.xrc.remote_srqn`.
    pub xrc_remote_srqn: u32,
    pub extra: WrExtra,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: i32,
}

/// `struct ibv_wc` (shared with the `hw` backend, which reads rdma-core's through it).
pub use softverbs_api::c_layout::IbvWc;
