//! Attribute structs of the hardware backend: device, port, QP, SRQ and address-handle
//! attributes between the contract types and their `verbs.h` forms. The QP, AH and SRQ
//! structures convert through softverbs-api's C layouts, which the drop-in libibverbs.so.1
//! uses too (`ffi::layout` turns them into rdma-sys's types).

use rdma_sys::{
    ibv_ah_attr, ibv_device_attr, ibv_port_attr, ibv_qp_attr, ibv_qp_cap, ibv_srq_attr,
};
use softverbs_api::{
    AhAttr, DeviceAttr, PortAttr, QpAttr, QpAttrMask, QpCap, SrqAttr, VerbsError, VerbsResult,
};

use super::convert;
use super::ffi::layout;

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
        max_mcast_grp: nonneg(a.max_mcast_grp),
        max_mcast_qp_attach: nonneg(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: nonneg(a.max_total_mcast_qp_attach),
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
    layout::qp_cap_to_sys(c.into())
}

/// `ibv_qp_cap` to the contract's.
pub(crate) fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    (&layout::qp_cap_from_sys(*c)).into()
}

/// A UDP port other than 4791 exists only between emulators: EINVAL here.
fn check_udp_port(a: &AhAttr) -> VerbsResult<()> {
    match a.udp_dport.filter(|&p| p != 4791) {
        Some(port) => Err(VerbsError::inval(format!(
            "UDP port {port}: a hardware device sends RoCEv2 to port 4791 only"
        ))),
        None => Ok(()),
    }
}

/// A contract AH to `ibv_ah_attr`: always global (RoCE needs the GRH).
pub(crate) fn ah_attr_to_c(a: &AhAttr) -> VerbsResult<ibv_ah_attr> {
    check_udp_port(a)?;
    Ok(layout::ah_attr_to_sys(a.into()))
}

/// A contract modify to `ibv_qp_attr`; only the fields in `mask` matter to libibverbs.
pub(crate) fn qp_attr_to_c(a: &QpAttr, mask: QpAttrMask) -> VerbsResult<ibv_qp_attr> {
    if mask.contains(QpAttrMask::AV) {
        check_udp_port(&a.ah_attr)?;
    }
    Ok(layout::qp_attr_to_sys(a.into()))
}

/// A queried `ibv_qp_attr` (every attribute of [`QUERY_MASK`]) to the contract's.
pub(crate) fn qp_attr_from_c(a: ibv_qp_attr) -> VerbsResult<QpAttr> {
    layout::qp_attr_from_sys(a)
        .to_contract(QpAttrMask(QUERY_MASK as u32))
        .ok_or_else(|| VerbsError::Io {
            errno: libc::EIO,
            message: "ibv_query_qp returned a state or MTU verbs.h does not define".into(),
        })
}

/// Contract SRQ attributes to `ibv_srq_attr`.
pub(crate) fn srq_attr_to_c(a: &SrqAttr) -> ibv_srq_attr {
    layout::srq_attr_to_sys(a.into())
}

/// `ibv_srq_attr` to the contract's.
pub(crate) fn srq_attr_from_c(a: &ibv_srq_attr) -> SrqAttr {
    (&layout::srq_attr_from_sys(*a)).into()
}
