//! Queue-pair types, states and attributes (`ibv_qp_init_attr`, `ibv_qp_attr`, attribute mask).

use crate::device::{Gid, Mtu};
use crate::flags::AccessFlags;

/// `enum ibv_qp_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    /// The numeric value of `enum ibv_qp_type` (RC 2, UC 3, UD 4).
    pub fn to_raw(self) -> u32 {
        match self {
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
        }
    }

    /// The type of an `enum ibv_qp_type` value (None for the types not emulated: XRC,
    /// raw packet, driver-specific).
    pub fn from_raw(raw: u32) -> Option<QpType> {
        [QpType::Rc, QpType::Uc, QpType::Ud]
            .into_iter()
            .find(|t| t.to_raw() == raw)
    }
}

/// `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    /// IBV_QPS_RESET
    #[default]
    Reset,
    /// IBV_QPS_INIT
    Init,
    /// IBV_QPS_RTR
    Rtr,
    /// IBV_QPS_RTS
    Rts,
    /// IBV_QPS_SQD
    Sqd,
    /// IBV_QPS_SQE
    Sqe,
    /// IBV_QPS_ERR
    Err,
}

impl QpState {
    /// Every state, in the order (and so with the values) of `enum ibv_qp_state`.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// The numeric value of `enum ibv_qp_state`.
    pub fn to_raw(self) -> u32 {
        self as u32
    }

    /// The state of an `enum ibv_qp_state` value.
    pub fn from_raw(raw: u32) -> Option<QpState> {
        QpState::ALL.get(raw as usize).copied()
    }
}

/// `struct ibv_qp_cap`: queue sizes and limits, requested at create and returned as granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Maximum outstanding send WRs.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs.
    pub max_recv_wr: u32,
    /// Maximum SGEs per send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Maximum bytes of inline data per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`, with CQs and SRQ named by backend id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport type.
    pub qp_type: QpType,
    /// CQ of send completions.
    pub send_cq: u32,
    /// CQ of receive completions.
    pub recv_cq: u32,
    /// Shared receive queue, if any.
    pub srq: Option<u32>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Every send WR generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// `enum ibv_qp_attr_mask`: which fields of [`QpAttr`] a modify call sets.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct QpAttrMask(pub u32);

impl QpAttrMask {
    /// IBV_QP_STATE
    pub const STATE: QpAttrMask = QpAttrMask(1);
    /// IBV_QP_CUR_STATE
    pub const CUR_STATE: QpAttrMask = QpAttrMask(1 << 1);
    /// IBV_QP_EN_SQD_ASYNC_NOTIFY
    pub const EN_SQD_ASYNC_NOTIFY: QpAttrMask = QpAttrMask(1 << 2);
    /// IBV_QP_ACCESS_FLAGS
    pub const ACCESS_FLAGS: QpAttrMask = QpAttrMask(1 << 3);
    /// IBV_QP_PKEY_INDEX
    pub const PKEY_INDEX: QpAttrMask = QpAttrMask(1 << 4);
    /// IBV_QP_PORT
    pub const PORT: QpAttrMask = QpAttrMask(1 << 5);
    /// IBV_QP_QKEY
    pub const QKEY: QpAttrMask = QpAttrMask(1 << 6);
    /// IBV_QP_AV
    pub const AV: QpAttrMask = QpAttrMask(1 << 7);
    /// IBV_QP_PATH_MTU
    pub const PATH_MTU: QpAttrMask = QpAttrMask(1 << 8);
    /// IBV_QP_TIMEOUT
    pub const TIMEOUT: QpAttrMask = QpAttrMask(1 << 9);
    /// IBV_QP_RETRY_CNT
    pub const RETRY_CNT: QpAttrMask = QpAttrMask(1 << 10);
    /// IBV_QP_RNR_RETRY
    pub const RNR_RETRY: QpAttrMask = QpAttrMask(1 << 11);
    /// IBV_QP_RQ_PSN
    pub const RQ_PSN: QpAttrMask = QpAttrMask(1 << 12);
    /// IBV_QP_MAX_QP_RD_ATOMIC
    pub const MAX_QP_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 13);
    /// IBV_QP_ALT_PATH
    pub const ALT_PATH: QpAttrMask = QpAttrMask(1 << 14);
    /// IBV_QP_MIN_RNR_TIMER
    pub const MIN_RNR_TIMER: QpAttrMask = QpAttrMask(1 << 15);
    /// IBV_QP_SQ_PSN
    pub const SQ_PSN: QpAttrMask = QpAttrMask(1 << 16);
    /// IBV_QP_MAX_DEST_RD_ATOMIC
    pub const MAX_DEST_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 17);
    /// IBV_QP_PATH_MIG_STATE
    pub const PATH_MIG_STATE: QpAttrMask = QpAttrMask(1 << 18);
    /// IBV_QP_CAP
    pub const CAP: QpAttrMask = QpAttrMask(1 << 19);
    /// IBV_QP_DEST_QPN
    pub const DEST_QPN: QpAttrMask = QpAttrMask(1 << 20);
    /// IBV_QP_RATE_LIMIT
    pub const RATE_LIMIT: QpAttrMask = QpAttrMask(1 << 25);

    /// The empty mask.
    pub const fn empty() -> Self {
        QpAttrMask(0)
    }
    /// True if every bit of `other` is set.
    pub const fn contains(self, other: QpAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
    /// Bits of `self` that are not in `other`.
    pub const fn difference(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & !other.0)
    }
    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for QpAttrMask {
    type Output = QpAttrMask;
    fn bitor(self, rhs: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | rhs.0)
    }
}

/// `struct ibv_ah_attr` for RoCE: the destination GID is what matters; the rest is kept
/// for query round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// Destination GID (an IPv4-mapped or IPv6 address on RoCEv2).
    pub dgid: Gid,
    /// Local GID index to send from.
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class (DSCP/ECN).
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
    /// Local port number (1).
    pub port_num: u8,
    /// UDP destination port; `None` means 4791. Only for emulator-to-emulator use.
    pub udp_dport: Option<u16>,
}

impl AhAttr {
    /// `ibv_init_ah_from_wc` for RoCEv2: the address to reply to the sender of a UD receive,
    /// from the 40-byte GRH area at the start of its buffer (for an IPv4 sender, 20 unused
    /// bytes then its IPv4 header; for IPv6, its IPv6 header). `None` if neither is there.
    pub fn from_grh(grh: &[u8], sgid_index: u8, port_num: u8) -> Option<AhAttr> {
        let grh = grh.get(..40)?;
        let (src, traffic_class, flow_label) = if grh[20] == 0x45 {
            let v4 = std::net::Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
            (std::net::IpAddr::V4(v4), grh[21], 0)
        } else if grh[0] >> 4 == 6 {
            let word = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(&grh[8..24]);
            let ip = std::net::IpAddr::V6(std::net::Ipv6Addr::from(v6));
            (ip, (word >> 20) as u8, word & 0xf_ffff)
        } else {
            return None;
        };
        Some(AhAttr {
            dgid: Gid::from_ip(src),
            sgid_index,
            // What rdma-core's ibv_init_ah_from_wc sets.
            hop_limit: 0xff,
            traffic_class,
            flow_label,
            sl: 0,
            port_num,
            udp_dport: None,
        })
    }
}

/// `struct ibv_qp_attr`: the fields a modify sets (selected by [`QpAttrMask`]) or a query returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// Next state.
    pub qp_state: QpState,
    /// Current state (for CUR_STATE).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Receive PSN (24 bits).
    pub rq_psn: u32,
    /// Send PSN (24 bits).
    pub sq_psn: u32,
    /// Destination QP number (24 bits).
    pub dest_qp_num: u32,
    /// Remote access allowed on this QP (REMOTE_WRITE / READ / ATOMIC).
    pub qp_access_flags: AccessFlags,
    /// Capacities (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Q_Key (UD).
    pub qkey: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Outstanding RDMA READ / atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ / atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// Port number (1).
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 means infinite.
    pub timeout: u8,
    /// Transport retries (0..=7; 7 means infinite, as in rxe).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 means infinite).
    pub rnr_retry: u8,
    /// Send queue drained (query only).
    pub sq_draining: bool,
}
