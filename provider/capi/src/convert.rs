//! Conversions between verbs.h's raw values and structures and the softverbs-api types.
//! Pure functions on plain data; no pointers are followed here.

use softverbs_api::{
    AccessFlags, AhAttr, DeviceAttr, PortAttr, PortState, QpAttr, QpAttrMask, QpType, SendFlags,
    WrOpcode,
};

use crate::abi::{IbvAhAttr, IbvDeviceAttr, IbvPortAttr, IbvQpAttr};

/// `enum ibv_qp_type` → contract type (RC, UC, UD; others are not emulated).
pub fn qp_type(raw: u32) -> Option<QpType> {
    QpType::from_raw(raw)
}

/// `enum ibv_wr_opcode` → contract opcode.
pub fn wr_opcode(raw: u32) -> Option<WrOpcode> {
    WrOpcode::from_raw(raw)
}

/// Send flags of verbs.h (unknown bits kept, so that the backend rejects them).
pub fn send_flags(raw: u32) -> SendFlags {
    SendFlags(raw)
}

/// Access flags of verbs.h.
pub fn access(raw: u32) -> AccessFlags {
    AccessFlags(raw)
}

/// `struct ibv_ah_attr` → contract AH: RoCE has no LIDs, so without a GRH there is no
/// destination (EINVAL).
pub fn ah_attr(a: &IbvAhAttr) -> Result<AhAttr, i32> {
    if a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    Ok(a.into())
}

/// `struct ibv_qp_attr` → contract attributes, reading only what `mask` selects (EINVAL for
/// a selected value verbs.h does not define, or a path without a GRH).
pub fn qp_attr(a: &IbvQpAttr, mask: u32) -> Result<QpAttr, i32> {
    let mask = QpAttrMask(mask);
    if mask.contains(QpAttrMask::AV) && a.ah_attr.is_global == 0 {
        return Err(libc::EINVAL);
    }
    a.to_contract(mask).ok_or(libc::EINVAL)
}

/// Contract attributes → `struct ibv_qp_attr` of `ibv_query_qp`: the current state is the
/// state.
pub fn qp_attr_raw(a: &QpAttr) -> IbvQpAttr {
    IbvQpAttr {
        cur_qp_state: a.qp_state.to_raw(),
        ..a.into()
    }
}

/// IBV_ATOMIC_HCA: atomics are atomic with respect to this device.
const ATOMIC_HCA: u32 = 1;

/// Device capability flags the emulator honours (as rxe reports them): RC RNR NAK
/// generation, SRQ resize, port events, system image GUID, memory windows (type 2B),
/// memory management extensions.
const DEVICE_CAP_FLAGS: u32 = (1 << 7) // CURR_QP_STATE_MOD
    | (1 << 10) // PORT_ACTIVE_EVENT
    | (1 << 11) // SYS_IMAGE_GUID
    | (1 << 12) // RC_RNR_NAK_GEN
    | (1 << 13) // SRQ_RESIZE
    | (1 << 14) // N_NOTIFY_CQ
    | (1 << 17) // MEM_WINDOW
    | (1 << 21) // MEM_MGT_EXTENSIONS
    | (1 << 24); // MEM_WINDOW_TYPE_2B

fn clamp_i32(v: u32) -> i32 {
    v.min(i32::MAX as u32) as i32
}

/// Contract device attributes → `struct ibv_device_attr`.
pub fn device_attr(d: &DeviceAttr, max_pkeys: u16) -> IbvDeviceAttr {
    let mut fw_ver = [0 as std::os::raw::c_char; 64];
    for (dst, src) in fw_ver.iter_mut().zip(d.fw_ver.bytes().take(63)) {
        *dst = src as std::os::raw::c_char;
    }
    IbvDeviceAttr {
        fw_ver,
        node_guid: d.node_guid.to_be(),
        sys_image_guid: d.sys_image_guid.to_be(),
        max_mr_size: d.max_mr_size,
        page_size_cap: 0xffff_ffff_ffff_f000,
        vendor_id: d.vendor_id,
        vendor_part_id: d.vendor_part_id,
        hw_ver: d.hw_ver,
        max_qp: clamp_i32(d.max_qp),
        max_qp_wr: clamp_i32(d.max_qp_wr),
        device_cap_flags: DEVICE_CAP_FLAGS,
        max_sge: clamp_i32(d.max_sge),
        max_sge_rd: clamp_i32(d.max_sge),
        max_cq: clamp_i32(d.max_cq),
        max_cqe: clamp_i32(d.max_cqe),
        max_mr: clamp_i32(d.max_mr),
        max_pd: clamp_i32(d.max_pd),
        max_qp_rd_atom: clamp_i32(d.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: clamp_i32(d.max_qp_rd_atom.saturating_mul(d.max_qp)),
        max_qp_init_rd_atom: clamp_i32(d.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: clamp_i32(d.max_mw),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: clamp_i32(d.max_mcast_grp),
        max_mcast_qp_attach: clamp_i32(d.max_mcast_qp_attach),
        max_total_mcast_qp_attach: clamp_i32(d.max_total_mcast_qp_attach),
        max_ah: clamp_i32(d.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: clamp_i32(d.max_srq),
        max_srq_wr: clamp_i32(d.max_srq_wr),
        max_srq_sge: clamp_i32(d.max_srq_sge),
        max_pkeys,
        local_ca_ack_delay: 15,
        phys_port_cnt: d.phys_port_cnt,
    }
}

/// IBV_LINK_LAYER_ETHERNET
const LINK_LAYER_ETHERNET: u8 = 2;

/// Contract port attributes → `struct ibv_port_attr`.
pub fn port_attr(p: &PortAttr) -> IbvPortAttr {
    let active = p.state == PortState::Active;
    IbvPortAttr {
        state: if active { 4 } else { 1 },
        max_mtu: p.max_mtu as u32,
        active_mtu: p.active_mtu as u32,
        gid_tbl_len: p.gid_tbl_len as i32,
        // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS, as rxe.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1,                        // 1X
        active_speed: 32,                       // EDR (25 Gb/s)
        phys_state: if active { 5 } else { 3 }, // LinkUp / Disabled
        link_layer: if p.link_layer_ethernet {
            LINK_LAYER_ETHERNET
        } else {
            1
        },
        flags: 0,
        port_cap_flags2: 0,
    }
}
