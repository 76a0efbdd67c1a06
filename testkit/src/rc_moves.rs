//! The three `ibv_modify_qp` calls that take an RC QP from RESET to RTS, with exactly the
//! attributes ibv_modify_qp(3) requires for each move (the kernel's `qp_state_table`).

use softverbs_api::qp::AhAttr;
use softverbs_api::{AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState};

use QpAttrMask as M;

/// RESET -> INIT of an RC or UC QP: the required P_Key index, port and access flags.
pub const INIT_MASK: QpAttrMask = all_of(&[M::STATE, M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]);

/// INIT -> RTR of an RC QP: the required path (AV, MTU), peer QPN, receive PSN and the
/// responder's READ / atomic resources and RNR timer.
pub const RC_RTR_MASK: QpAttrMask = all_of(&[
    M::STATE,
    M::AV,
    M::PATH_MTU,
    M::DEST_QPN,
    M::RQ_PSN,
    M::MAX_DEST_RD_ATOMIC,
    M::MIN_RNR_TIMER,
]);

/// RTR -> RTS of an RC QP: the required send PSN, ACK timeout, retry counts and the
/// requester's outstanding READ / atomic limit.
pub const RC_RTS_MASK: QpAttrMask = all_of(&[
    M::STATE,
    M::SQ_PSN,
    M::TIMEOUT,
    M::RETRY_CNT,
    M::RNR_RETRY,
    M::MAX_QP_RD_ATOMIC,
]);

/// The union of `masks` (`|` is not `const`).
const fn all_of(masks: &[QpAttrMask]) -> QpAttrMask {
    let mut bits = 0;
    let mut i = 0;
    while i < masks.len() {
        bits |= masks[i].0;
        i += 1;
    }
    QpAttrMask(bits)
}

/// RESET -> INIT on port 1, P_Key index 0, with `access` (RC or UC).
pub fn init_attr(access: AccessFlags) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    (attr, INIT_MASK)
}

/// The address vector to `dgid` through port 1 (source GID index 0, hop limit 0: set
/// the fields a test needs on top of it).
pub fn ah_to(dgid: Gid) -> AhAttr {
    AhAttr {
        dgid,
        port_num: 1,
        ..AhAttr::default()
    }
}

/// What an RC connection's three moves set. Start from `RcMoves::default()` and set what
/// the test is about; [`RcMoves::init`], [`RcMoves::rtr`] and [`RcMoves::rts`] give each
/// move's attributes with its required mask ([`RcMoves::all`] the three in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcMoves {
    /// INIT: what the peer may do to this QP's memory.
    pub access: AccessFlags,
    /// RTR: path MTU.
    pub path_mtu: Mtu,
    /// RTR: the peer's QP number.
    pub dest_qp_num: u32,
    /// RTR: the first PSN expected from the peer.
    pub rq_psn: u32,
    /// RTR: READ / atomic requests the responder keeps.
    pub max_dest_rd_atomic: u8,
    /// RTR: the RNR NAK timer code sent to the peer.
    pub min_rnr_timer: u8,
    /// RTR: the path to the peer.
    pub ah_attr: AhAttr,
    /// RTS: the first PSN sent.
    pub sq_psn: u32,
    /// RTS: the ACK timeout code.
    pub timeout: u8,
    /// RTS: transport retries (7: infinite).
    pub retry_cnt: u8,
    /// RTS: RNR retries (7: infinite).
    pub rnr_retry: u8,
    /// RTS: outstanding READ / atomic requests as requester.
    pub max_rd_atomic: u8,
}

impl Default for RcMoves {
    /// Remote READ / WRITE allowed, MTU 1024, PSNs 0, 4 READ / atomic resources each way,
    /// RNR timer code 1, ACK timeout code 14, infinite retries; the peer's QPN and path
    /// unset (0 and the default address vector).
    fn default() -> Self {
        RcMoves {
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 0,
            rq_psn: 0,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ah_attr: AhAttr::default(),
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
        }
    }
}

impl RcMoves {
    /// RESET -> INIT on port 1, P_Key index 0.
    pub fn init(&self) -> (QpAttr, QpAttrMask) {
        init_attr(self.access)
    }

    /// INIT -> RTR.
    pub fn rtr(&self) -> (QpAttr, QpAttrMask) {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            ah_attr: self.ah_attr,
            ..QpAttr::default()
        };
        (attr, RC_RTR_MASK)
    }

    /// RTR -> RTS.
    pub fn rts(&self) -> (QpAttr, QpAttrMask) {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..QpAttr::default()
        };
        (attr, RC_RTS_MASK)
    }

    /// The three moves, RESET -> INIT -> RTR -> RTS, in order.
    pub fn all(&self) -> [(QpAttr, QpAttrMask); 3] {
        [self.init(), self.rtr(), self.rts()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_api::qp_transition::{validate_modify, ModifyLimits};
    use softverbs_api::QpType;

    /// Each mask is exactly what the move requires: it passes the verbs-api state machine
    /// (the kernel's table), and without any one of its bits the move is EINVAL.
    #[test]
    fn masks_are_the_required_attributes() {
        let moves = RcMoves {
            dest_qp_num: 0x12,
            ah_attr: ah_to(Gid::from_ip([127, 33, 0, 1].into())),
            ..RcMoves::default()
        };
        let limits = ModifyLimits::default();
        let mut state = QpState::Reset;
        for (attr, mask) in moves.all() {
            validate_modify(QpType::Rc, state, &attr, mask, &limits)
                .unwrap_or_else(|e| panic!("{state:?} -> {:?}: {e}", attr.qp_state));
            for bit in (0..32).map(|b| 1u32 << b).filter(|b| mask.0 & b != 0) {
                if bit == QpAttrMask::STATE.0 {
                    continue;
                }
                let less = QpAttrMask(mask.0 & !bit);
                assert!(
                    validate_modify(QpType::Rc, state, &attr, less, &limits).is_err(),
                    "{state:?} -> {:?} without {bit:#x} passed",
                    attr.qp_state
                );
            }
            state = attr.qp_state;
        }
    }
}
