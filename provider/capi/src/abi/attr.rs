//! Attribute structures: device, port, GID, QP, AH, SRQ, CQ and MW arguments.

use std::ffi::c_void;
use std::os::raw::c_char;

use super::objects::{IbvCompChannel, IbvCq, IbvMr, IbvPd, IbvSrq};
use super::Opaque;

// The attribute structures the hardware backend shares (softverbs-api holds them, so that
// both C-facing layers convert through one definition; the layout test checks them here).
pub use softverbs_api::c_layout::{
    IbvAhAttr, IbvGid, IbvGlobalRoute, IbvQpAttr, IbvQpCap, IbvSrqAttr,
};

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_ee_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_ee_init_rd_atom: i32,
    pub atomic_cap: u32,
    pub max_ee: i32,
    pub max_rdd: i32,
    pub max_mw: i32,
    pub max_raw_ipv6_qp: i32,
    pub max_raw_ethy_qp: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_fmr: i32,
    pub max_map_per_fmr: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// Size of `struct ibv_device_attr_ex` in rdma-core 44.
pub const DEVICE_ATTR_EX_SIZE: usize = 400;
/// Offset of `ibv_device_attr_ex.comp_mask`.
pub const DEVICE_ATTR_EX_COMP_MASK: usize = 232;
/// Offset of `ibv_device_attr_ex.device_cap_flags_ex`.
pub const DEVICE_ATTR_EX_CAP_FLAGS_EX: usize = 280;
/// Offset of `ibv_device_attr_ex.phys_port_cnt_ex`.
pub const DEVICE_ATTR_EX_PHYS_PORT_CNT: usize = 396;

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvPortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvGidEntry {
    pub gid: IbvGid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`.
#[repr(C)]
pub struct IbvAsyncEvent {
    /// The union `element`: a CQ, QP, SRQ or WQ pointer, or a port number.
    pub element: *mut c_void,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
pub struct IbvRxHashConf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: Opaque,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: Opaque,
    pub rx_hash_conf: IbvRxHashConf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_srq_init_attr_ex` (the tag-matching capabilities at the end as bytes).
#[repr(C)]
pub struct IbvSrqInitAttrEx {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
    pub comp_mask: u32,
    pub srq_type: u32,
    pub pd: *mut IbvPd,
    pub xrcd: Opaque,
    pub cq: *mut IbvCq,
    pub tm_cap: [u32; 2],
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvMwBindInfo {
    pub mr: *mut IbvMr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
pub struct IbvMwBind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: IbvMwBindInfo,
}

/// `struct ibv_mr_init_attr` (rdma-core 59 onward, `buf` since 64): the extensible argument
/// of `ibv_reg_mr_ex`. Not in Debian's 44 headers, so the layout test cannot see it; its
/// offsets follow the C rules for these field types (checked in `layout_test` by number and
/// by the newer-ABI C test, which declares it as newer verbs.h does).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvMrInitAttr {
    pub length: usize,
    pub access: i32,
    pub comp_mask: u64,
    pub iova: u64,
    pub addr: *mut c_void,
    pub fd: i32,
    pub fd_offset: u64,
    pub dmah: *mut c_void,
    pub buf: *mut c_void,
}
