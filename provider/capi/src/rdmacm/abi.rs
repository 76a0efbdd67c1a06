//! `#[repr(C)]` definitions of the rdma_cma.h structures (rdma-core 44), written from the
//! header's documented layout and proven by the C layout test (`layout_test`), which
//! compiles against the system's `<rdma/rdma_cma.h>`. Field names follow rdma_cma.h.
#![allow(missing_docs)]

use std::ffi::c_void;
use std::os::raw::c_char;

use crate::abi::{IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvPd, IbvQp, IbvSrq};

/// `enum rdma_port_space` values.
pub const RDMA_PS_IPOIB: u32 = 0x0002;
pub const RDMA_PS_TCP: u32 = 0x0106;
pub const RDMA_PS_UDP: u32 = 0x0111;
pub const RDMA_PS_IB: u32 = 0x013F;

/// The Q_Key rdma_cm gives UD QPs of the UDP port space.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `rdma_addrinfo.ai_flags` bits.
pub const RAI_PASSIVE: i32 = 1;
pub const RAI_NUMERICHOST: i32 = 2;
pub const RAI_NOROUTE: i32 = 4;
pub const RAI_FAMILY: i32 = 8;

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// `struct sockaddr_storage`: room for any address (128 bytes, 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct SockaddrStorage(pub [u8; 128]);

impl Default for SockaddrStorage {
    fn default() -> Self {
        SockaddrStorage([0; 128])
    }
}

/// `struct rdma_ib_addr` (its `union ibv_gid`s make it 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct RdmaIbAddr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
}

/// `struct rdma_addr`: the anonymous unions of sockaddr types are their storage.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct RdmaAddr {
    pub src_storage: SockaddrStorage,
    pub dst_storage: SockaddrStorage,
    pub ibaddr: RdmaIbAddr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct RdmaRoute {
    pub addr: RdmaAddr,
    /// `struct ibv_sa_path_rec *`: RoCE ids have no SA path record here.
    pub path_rec: *mut c_void,
    pub num_paths: i32,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct RdmaEventChannel {
    pub fd: i32,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
    pub route: RdmaRoute,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut IbvCompChannel,
    pub send_cq: *mut IbvCq,
    pub recv_cq_channel: *mut IbvCompChannel,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub pd: *mut IbvPd,
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaUdParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: IbvAhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaEventParam {
    pub conn: RdmaConnParam,
    pub ud: RdmaUdParam,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: u32,
    pub status: i32,
    pub param: RdmaEventParam,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct RdmaAddrinfo {
    pub ai_flags: i32,
    pub ai_family: i32,
    pub ai_qp_type: i32,
    pub ai_port_space: i32,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut RdmaAddrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex` (rdma_join_multicast_ex).
#[repr(C)]
pub struct RdmaCmJoinMcAttrEx {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`: `addr` is set.
pub const JOIN_MC_ATTR_ADDRESS: u32 = 1;
/// `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`: `join_flags` is set.
pub const JOIN_MC_ATTR_JOIN_FLAGS: u32 = 2;
/// `RDMA_CM_JOIN_MC_ATTR_RESERVED`: the first unknown comp_mask bit.
pub const JOIN_MC_ATTR_RESERVED: u32 = 4;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER`: send and receive.
pub const MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
/// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: send only (the QP is not attached).
pub const MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// `RDMA_MC_JOIN_FLAG_RESERVED`: the first unknown join flag.
pub const MC_JOIN_FLAG_RESERVED: u32 = 2;

/// `struct ibv_ece` (verbs.h; rdma_set_local_ece / rdma_get_remote_ece).
#[repr(C)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}
