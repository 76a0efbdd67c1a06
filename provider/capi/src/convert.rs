//! Conversions between verbs.h's raw values and structures and the softverbs-api types.
//! Pure functions on plain data; no pointers are followed here.

use softverbs_api::{
    AccessFlags, AhAttr, DeviceAttr, Gid, Mtu, PortAttr, PortState, QpAttr, QpCap, QpState, QpType,
    SendFlags, WorkCompletion, WrOpcode,
};

use crate::abi::{
    IbvAhAttr, IbvDeviceAttr, IbvGid, IbvGlobalRoute, IbvPortAttr, IbvQpAttr, IbvQpCap, IbvWc,
};

/// `enum ibv_qp_type` → contract type (RC, UC, UD; others are not emulated).
pub fn qp_type(raw: u32) -> Option<QpType> {
    QpType::from_raw(raw)
}

/// `enum ibv_qp_state` → contract state.
pub fn qp_state(raw: u32) -> Option<QpState> {
    QpState::from_raw(raw)
}

/// `enum ibv_wr_opcode` → contract opcode.
pub fn wr_opcode(raw: u32) -> Option<WrOpcode> {
    WrOpcode::from_raw(raw)
}

/// Contract completion → `struct ibv_wc`.
pub fn wc(w: &WorkCompletion) -> IbvWc {
    let with_inv = w.wc_flags.contains(softverbs_api::WcFlags::WITH_INV);
    IbvWc {
        wr_id: w.wr_id,
        status: w.status.to_raw(),
        opcode: w.opcode.to_raw(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data_or_invalidated_rkey: if with_inv {
            w.invalidated_rkey
        } else {
            w.imm_data.to_be()
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// Send flags of verbs.h (unknown bits kept, so that the backend rejects them).
pub fn send_flags(raw: u32) -> SendFlags {
    SendFlags(raw)
}

/// Access flags of verbs.h.
pub fn access(raw: u32) -> AccessFlags {
    AccessFlags(raw)
}

/// `struct ibv_qp_cap` ↔ contract capacities.
pub fn cap(c: &IbvQpCap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Contract capacities → `struct ibv_qp_cap`.
pub fn cap_raw(c: &QpCap) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_ah_attr` → contract AH (RoCE: the GRH is what addresses the peer).
pub fn ah_attr(a: &IbvAhAttr) -> Result<AhAttr, i32> {
    if a.is_global == 0 {
        // RoCE has no LIDs: without a GRH there is no destination.
        return Err(libc::EINVAL);
    }
    Ok(AhAttr {
        dgid: Gid(a.grh.dgid.0),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        port_num: a.port_num,
        udp_dport: None,
    })
}

/// Contract AH → `struct ibv_ah_attr`.
pub fn ah_attr_raw(a: &AhAttr) -> IbvAhAttr {
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: IbvGid(a.dgid.0),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: a.port_num,
    }
}

/// `struct ibv_qp_attr` → contract attributes, reading only what `mask` selects.
pub fn qp_attr(a: &IbvQpAttr, mask: u32) -> Result<QpAttr, i32> {
    const STATE: u32 = 1;
    const CUR_STATE: u32 = 1 << 1;
    const AV: u32 = 1 << 7;
    const PATH_MTU: u32 = 1 << 8;
    let mut out = QpAttr::default();
    if mask & STATE != 0 {
        out.qp_state = qp_state(a.qp_state).ok_or(libc::EINVAL)?;
    }
    if mask & CUR_STATE != 0 {
        out.cur_qp_state = qp_state(a.cur_qp_state).ok_or(libc::EINVAL)?;
    }
    if mask & PATH_MTU != 0 {
        out.path_mtu = Mtu::from_raw(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if mask & AV != 0 {
        out.ah_attr = ah_attr(&a.ah_attr)?;
    }
    out.rq_psn = a.rq_psn;
    out.sq_psn = a.sq_psn;
    out.dest_qp_num = a.dest_qp_num;
    out.qp_access_flags = access(a.qp_access_flags);
    out.cap = cap(&a.cap);
    out.qkey = a.qkey;
    out.pkey_index = a.pkey_index;
    out.max_rd_atomic = a.max_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
    out.min_rnr_timer = a.min_rnr_timer;
    out.port_num = a.port_num;
    out.timeout = a.timeout;
    out.retry_cnt = a.retry_cnt;
    out.rnr_retry = a.rnr_retry;
    Ok(out)
}

/// Contract attributes → `struct ibv_qp_attr`.
pub fn qp_attr_raw(a: &QpAttr) -> IbvQpAttr {
    IbvQpAttr {
        qp_state: a.qp_state.to_raw(),
        cur_qp_state: a.qp_state.to_raw(),
        path_mtu: a.path_mtu as u32,
        path_mig_state: 0, // IBV_MIG_MIGRATED: no alternate path
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_raw(&a.cap),
        ah_attr: ah_attr_raw(&a.ah_attr),
        alt_ah_attr: IbvAhAttr::default(),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
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
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
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
