//! The attribute structures of verbs.h in their C layout (`#[repr(C)]`, our own definitions),
//! with their conversions to and from the contract types. Both C-facing layers use them: the
//! drop-in libibverbs.so.1 (softverbs-ibverbs) hands them to C programs, the hardware backend
//! (`softverbs` with `hw`) hands them to rdma-core. softverbs-ibverbs' C layout test proves
//! every size and offset against the system's `<infiniband/verbs.h>`.
//!
//! Plain data only: the enum fields are the raw verbs.h values (`u32`), decoded by the
//! conversions, which never follow a pointer.

use crate::{
    AhAttr, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, SrqAttr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

/// `union ibv_gid`: 16 bytes, aligned as the two `__be64` of its `global` view.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct IbvGid(pub [u8; 16]);

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvQpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
#[allow(missing_docs)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (big-endian) or `invalidated_rkey`, as `wc_flags` says.
    pub imm_data_or_invalidated_rkey: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

impl From<&WorkCompletion> for IbvWc {
    fn from(w: &WorkCompletion) -> Self {
        let with_inv = w.wc_flags.contains(WcFlags::WITH_INV);
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
}

/// A device's completion: an unknown status reads as GENERAL_ERR, an unknown opcode as SEND
/// (verbs.h leaves the opcode undefined on error completions), unknown flags are dropped.
impl From<&IbvWc> for WorkCompletion {
    fn from(w: &IbvWc) -> Self {
        let wc_flags = WcFlags(w.wc_flags & WcFlags::all().bits());
        let imm_or_inv = w.imm_data_or_invalidated_rkey;
        WorkCompletion {
            wr_id: w.wr_id,
            status: WcStatus::from_raw(w.status).unwrap_or(WcStatus::GeneralErr),
            opcode: WcOpcode::from_raw(w.opcode).unwrap_or(WcOpcode::Send),
            vendor_err: w.vendor_err,
            byte_len: w.byte_len,
            imm_data: if wc_flags.contains(WcFlags::WITH_IMM) {
                u32::from_be(imm_or_inv)
            } else {
                0
            },
            invalidated_rkey: if wc_flags.contains(WcFlags::WITH_INV) {
                imm_or_inv
            } else {
                0
            },
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            wc_flags,
            pkey_index: w.pkey_index,
            slid: w.slid,
            sl: w.sl,
            dlid_path_bits: w.dlid_path_bits,
        }
    }
}

impl From<&QpCap> for IbvQpCap {
    fn from(c: &QpCap) -> Self {
        IbvQpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

impl From<&IbvQpCap> for QpCap {
    fn from(c: &IbvQpCap) -> Self {
        QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

/// A contract AH is always global: on RoCE the GRH is what addresses the peer.
impl From<&AhAttr> for IbvAhAttr {
    fn from(a: &AhAttr) -> Self {
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
}

/// The GRH's fields (whether `is_global` is set is the caller's question: a C program's
/// AH without one addresses nothing on RoCE, a queried UD QP simply has none).
impl From<&IbvAhAttr> for AhAttr {
    fn from(a: &IbvAhAttr) -> Self {
        AhAttr {
            dgid: Gid(a.grh.dgid.0),
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            flow_label: a.grh.flow_label,
            sl: a.sl,
            port_num: a.port_num,
            udp_dport: None,
        }
    }
}

impl From<&SrqAttr> for IbvSrqAttr {
    fn from(a: &SrqAttr) -> Self {
        IbvSrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        }
    }
}

impl From<&IbvSrqAttr> for SrqAttr {
    fn from(a: &IbvSrqAttr) -> Self {
        SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        }
    }
}

/// Every field of the contract's attributes; no alternate path (IBV_MIG_MIGRATED), no
/// rate limit.
impl From<&QpAttr> for IbvQpAttr {
    fn from(a: &QpAttr) -> Self {
        IbvQpAttr {
            qp_state: a.qp_state.to_raw(),
            cur_qp_state: a.cur_qp_state.to_raw(),
            path_mtu: a.path_mtu as u32,
            path_mig_state: 0,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags.bits(),
            cap: (&a.cap).into(),
            ah_attr: (&a.ah_attr).into(),
            alt_ah_attr: IbvAhAttr::default(),
            pkey_index: a.pkey_index,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: u8::from(a.sq_draining),
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
}

impl IbvQpAttr {
    /// The contract's attributes. The enum fields are decoded only where `mask` selects
    /// them (a modify leaves the others as garbage): None if one of those holds a value
    /// verbs.h does not define. The plain fields are copied whatever the mask.
    pub fn to_contract(&self, mask: QpAttrMask) -> Option<QpAttr> {
        let mut out = QpAttr::default();
        if mask.contains(QpAttrMask::STATE) {
            out.qp_state = QpState::from_raw(self.qp_state)?;
        }
        if mask.contains(QpAttrMask::CUR_STATE) {
            out.cur_qp_state = QpState::from_raw(self.cur_qp_state)?;
        }
        if mask.contains(QpAttrMask::PATH_MTU) {
            out.path_mtu = Mtu::from_raw(self.path_mtu)?;
        }
        if mask.contains(QpAttrMask::AV) {
            out.ah_attr = (&self.ah_attr).into();
        }
        out.rq_psn = self.rq_psn;
        out.sq_psn = self.sq_psn;
        out.dest_qp_num = self.dest_qp_num;
        out.qp_access_flags = crate::AccessFlags(self.qp_access_flags);
        out.cap = (&self.cap).into();
        out.qkey = self.qkey;
        out.pkey_index = self.pkey_index;
        out.max_rd_atomic = self.max_rd_atomic;
        out.max_dest_rd_atomic = self.max_dest_rd_atomic;
        out.min_rnr_timer = self.min_rnr_timer;
        out.port_num = self.port_num;
        out.timeout = self.timeout;
        out.retry_cnt = self.retry_cnt;
        out.rnr_retry = self.rnr_retry;
        out.sq_draining = self.sq_draining != 0;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessFlags, QpState};

    #[test]
    fn qp_attr_round_trips_through_the_c_layout() {
        let a = QpAttr {
            qp_state: QpState::Rts,
            cur_qp_state: QpState::Rtr,
            path_mtu: Mtu::Mtu1024,
            rq_psn: 0x12_3456,
            sq_psn: 0x65_4321,
            dest_qp_num: 0x11,
            qp_access_flags: AccessFlags(0b111),
            qkey: 0x1111_2222,
            max_rd_atomic: 3,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            ah_attr: AhAttr {
                dgid: Gid([7; 16]),
                sgid_index: 1,
                hop_limit: 64,
                port_num: 1,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        let c = IbvQpAttr::from(&a);
        assert_eq!(c.ah_attr.is_global, 1);
        let all = QpAttrMask(u32::MAX);
        let back = c.to_contract(all).unwrap();
        assert_eq!(back, a);
        let mut bad = c;
        bad.path_mtu = 99;
        assert!(bad.to_contract(all).is_none());
        assert!(
            bad.to_contract(QpAttrMask::STATE).is_some(),
            "MTU not selected"
        );
    }

    #[test]
    fn a_completion_round_trips_and_unknown_values_read_safely() {
        let w = WorkCompletion {
            wr_id: 9,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 100,
            imm_data: 0x0102_0304,
            wc_flags: WcFlags::WITH_IMM,
            qp_num: 0x11,
            ..WorkCompletion::default()
        };
        let c = IbvWc::from(&w);
        assert_eq!(c.imm_data_or_invalidated_rkey, 0x0102_0304u32.to_be());
        assert_eq!((c.status, c.opcode), (10, 129));
        assert_eq!(WorkCompletion::from(&c), w);
        let odd = IbvWc {
            status: 99,
            opcode: 77,
            wc_flags: 1 << 30,
            ..c
        };
        let back = WorkCompletion::from(&odd);
        assert_eq!(back.status, WcStatus::GeneralErr);
        assert_eq!(back.opcode, WcOpcode::Send);
        assert_eq!(back.wc_flags, WcFlags(0));
        for raw in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 128, 129] {
            assert_eq!(WcOpcode::from_raw(raw).map(WcOpcode::to_raw), Some(raw));
        }
        assert_eq!(WcOpcode::from_raw(10), None);
    }
}
