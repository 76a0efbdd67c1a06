//! Attribute structs of the hardware backend: device, port, QP, SRQ and address-handle
//! attributes between the contract types and their `verbs.h` forms.

use rdma_sys::{
    ibv_ah_attr, ibv_device_attr, ibv_gid, ibv_global_route, ibv_port_attr, ibv_qp_attr,
    ibv_qp_cap, ibv_srq_attr,
};
use softverbs_api::{
    AccessFlags, AhAttr, DeviceAttr, Gid, PortAttr, QpAttr, QpAttrMask, QpCap, SrqAttr, VerbsError,
    VerbsResult,
};

use super::convert;
use super::ffi::gid_bytes;

/// The attribute mask of `ibv_query_qp`: every attribute the contract's [`QpAttr`] holds.
pub(crate) const QUERY_MASK: i32 = (1 << 21) - 1;

/// IBV_LINK_LAYER_ETHERNET.
const LINK_LAYER_ETHERNET: u8 = 2;

fn nonneg(v: i32) -> u32 {
    v.max(0) as u32
}

/// `ibv_device_attr` to the contract's.
pub(crate) fn device_attr(a: &ibv_device_attr) -> DeviceAttr {
    let fw: Vec<u8> = a
        .fw_ver
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    DeviceAttr {
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: nonneg(a.max_qp),
        max_qp_wr: nonneg(a.max_qp_wr),
        max_sge: nonneg(a.max_sge),
        max_cq: nonneg(a.max_cq),
        max_cqe: nonneg(a.max_cqe),
        max_mr: nonneg(a.max_mr),
        max_mw: nonneg(a.max_mw),
        max_pd: nonneg(a.max_pd),
        max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
        max_qp_init_rd_atom: nonneg(a.max_qp_init_rd_atom),
        max_srq: nonneg(a.max_srq),
        max_srq_wr: nonneg(a.max_srq_wr),
        max_srq_sge: nonneg(a.max_srq_sge),
        max_ah: nonneg(a.max_ah),
        // ibv_device_attr has no inline limit; the QP's granted cap says it.
        max_inline_data: 0,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// `ibv_port_attr` to the contract's.
pub(crate) fn port_attr(a: &ibv_port_attr) -> PortAttr {
    PortAttr {
        state: convert::port_state(a.state),
        max_mtu: convert::mtu(a.max_mtu),
        active_mtu: convert::mtu(a.active_mtu),
        gid_tbl_len: nonneg(a.gid_tbl_len),
        pkey_tbl_len: a.pkey_tbl_len,
        max_msg_sz: a.max_msg_sz,
        link_layer_ethernet: a.link_layer == LINK_LAYER_ETHERNET,
    }
}

/// Contract capacities to `ibv_qp_cap`.
pub(crate) fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_qp_cap` to the contract's.
pub(crate) fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// A contract AH to `ibv_ah_attr`: always global (RoCE needs the GRH), from GID index
/// `sgid_index`. A UDP port other than 4791 exists only between emulators: EINVAL here.
pub(crate) fn ah_attr_to_c(a: &AhAttr) -> VerbsResult<ibv_ah_attr> {
    if let Some(port) = a.udp_dport.filter(|&p| p != 4791) {
        return Err(VerbsError::inval(format!(
            "UDP port {port}: a hardware device sends RoCEv2 to port 4791 only"
        )));
    }
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.dgid.0 },
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
    })
}

fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dgid: Gid(gid_bytes(&a.grh.dgid)),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        port_num: a.port_num,
        udp_dport: None,
    }
}

/// A contract modify to `ibv_qp_attr`; only the fields in `mask` matter to libibverbs.
pub(crate) fn qp_attr_to_c(a: &QpAttr, mask: QpAttrMask) -> VerbsResult<ibv_qp_attr> {
    let ah_attr = if mask.contains(QpAttrMask::AV) {
        ah_attr_to_c(&a.ah_attr)?
    } else {
        ah_attr_to_c(&AhAttr::default())?
    };
    Ok(ibv_qp_attr {
        qp_state: convert::qp_state_raw(a.qp_state),
        cur_qp_state: convert::qp_state_raw(a.cur_qp_state),
        path_mtu: a.path_mtu as u32,
        path_mig_state: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_to_c(&a.cap),
        ah_attr,
        alt_ah_attr: ah_attr_to_c(&AhAttr::default())?,
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: 0,
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
    })
}

/// A queried `ibv_qp_attr` to the contract's.
pub(crate) fn qp_attr_from_c(a: &ibv_qp_attr) -> QpAttr {
    QpAttr {
        qp_state: convert::qp_state(a.qp_state),
        cur_qp_state: convert::qp_state(a.cur_qp_state),
        path_mtu: convert::mtu(a.path_mtu),
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: AccessFlags(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: ah_attr_from_c(&a.ah_attr),
        qkey: a.qkey,
        pkey_index: a.pkey_index,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        sq_draining: a.sq_draining != 0,
    }
}

/// Contract SRQ attributes to `ibv_srq_attr`.
pub(crate) fn srq_attr_to_c(a: &SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// `ibv_srq_attr` to the contract's.
pub(crate) fn srq_attr_from_c(a: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}
