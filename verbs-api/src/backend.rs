//! The backend traits: what a verbs implementation (the emulator, the hardware passthrough)
//! provides. They work on raw regions (address + length, as `ibv_reg_mr` does) and plain WR
//! structs so that the passthrough and a C ABI can sit on them; ownership and lifetimes are
//! enforced one layer up, by the safe handles of the `softverbs` crate.

use crate::device::{DeviceAttr, GidEntry, PortAttr};
use crate::error::{VerbsError, VerbsResult};
use crate::flags::AccessFlags;
use crate::qp::{QpAttr, QpAttrMask, QpInitAttr};
use crate::wc::WorkCompletion;
use crate::wr::{RecvWr, SendWr};

/// A post call failed at WR number `index` of the list (what libibverbs returns as `bad_wr`);
/// the WRs before it were posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} rejected: {error}")]
pub struct PostError {
    /// Index of the first WR that was not posted.
    pub index: usize,
    /// Why.
    pub error: VerbsError,
}

/// What a device list entry says about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (e.g. `softrxe0`).
    pub name: String,
    /// Node GUID.
    pub guid: u64,
    /// Which backend serves it (`emu` or `hw`).
    pub backend: &'static str,
}

/// Keys of a registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key (for SGEs).
    pub lkey: u32,
    /// Remote key (for peers' RDMA and atomics).
    pub rkey: u32,
}

/// An open device: the verbs calls, on backend ids (PD, CQ and QP numbers, MR lkeys).
///
/// Ids are only meaningful to the context that issued them. Every method is safe to call
/// from any thread.
pub trait VerbsContext: Send + Sync {
    /// Device name.
    fn device_name(&self) -> String;
    /// `ibv_query_device`.
    fn query_device(&self) -> VerbsResult<DeviceAttr>;
    /// `ibv_query_port`.
    fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr>;
    /// `ibv_query_gid_ex`: one GID table entry.
    fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry>;
    /// `ibv_alloc_pd`: returns the PD id.
    fn alloc_pd(&self) -> VerbsResult<u32>;
    /// `ibv_dealloc_pd`: EBUSY while MRs or QPs use it.
    fn dealloc_pd(&self, pd: u32) -> VerbsResult<()>;
    /// `ibv_reg_mr` over `[addr, addr + length)`.
    ///
    /// The backend reads and writes that memory until [`VerbsContext::dereg_mr`] returns, from
    /// its own threads: the caller must keep the region allocated (and not otherwise borrowed
    /// in a way Rust forbids to alias) for that long. The safe `softverbs::Mr` guarantees it.
    fn reg_mr(&self, pd: u32, addr: u64, length: u64, access: AccessFlags) -> VerbsResult<MrKeys>;
    /// `ibv_dereg_mr`: once it returns, the backend no longer touches the region.
    fn dereg_mr(&self, lkey: u32) -> VerbsResult<()>;
    /// `ibv_create_cq` with at least `cqe` entries; returns the CQ id and the granted size.
    fn create_cq(&self, cqe: u32) -> VerbsResult<(u32, u32)>;
    /// `ibv_destroy_cq`: EBUSY while QPs use it.
    fn destroy_cq(&self, cq: u32) -> VerbsResult<()>;
    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, oldest first; returns how
    /// many. Never blocks; call again whenever more completions are wanted.
    fn poll_cq(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize>;
    /// `ibv_create_qp`: returns the QP number and the granted capacities.
    fn create_qp(&self, pd: u32, init: &QpInitAttr) -> VerbsResult<(u32, crate::qp::QpCap)>;
    /// `ibv_modify_qp`, with the attribute checks of ibv_modify_qp(3).
    fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()>;
    /// `ibv_query_qp`: current attributes and the creation attributes.
    fn query_qp(&self, qpn: u32) -> VerbsResult<(QpAttr, QpInitAttr)>;
    /// `ibv_destroy_qp`: outstanding WRs are dropped without completions, as in verbs.
    fn destroy_qp(&self, qpn: u32) -> VerbsResult<()>;
    /// `ibv_post_send` of a WR list; on failure, the index of the first WR not posted.
    fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), PostError>;
    /// `ibv_post_recv` of a WR list; on failure, the index of the first WR not posted.
    fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), PostError>;
}
