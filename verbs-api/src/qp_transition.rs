//! The QP state machine of ibv_modify_qp(3): which transitions exist and which attributes each
//! requires and allows, per QP type, plus the range checks on the attribute values.
//!
//! The transition table follows the kernel's `qp_state_table` (drivers/infiniband/core/verbs.c),
//! which is what rxe applies through `ib_modify_qp_is_ok`; the value checks follow rxe's
//! `rxe_qp_chk_attr` and the core's RoCE rules. Where this module is stricter or looser than the
//! kernel, the item's doc says so.

use crate::device::DeviceAttr;
use crate::error::{VerbsError, VerbsResult};
use crate::flags::AccessFlags;
use crate::qp::{QpAttr, QpAttrMask, QpState, QpType};
use QpState::{
    Err as ERR, Init as INIT, Reset as RESET, Rtr as RTR, Rts as RTS, Sqd as SQD, Sqe as SQE,
};

/// Device limits a modify is checked against (from `ibv_query_device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModifyLimits {
    /// Bound of `max_dest_rd_atomic` (outstanding READ/atomic as responder).
    pub max_qp_rd_atom: u32,
    /// Bound of `max_rd_atomic` (outstanding READ/atomic as initiator).
    pub max_qp_init_rd_atom: u32,
}

impl Default for ModifyLimits {
    /// rxe's limits (`RXE_MAX_QP_RD_ATOM` = `RXE_MAX_QP_INIT_RD_ATOM` = 128).
    fn default() -> Self {
        ModifyLimits {
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
        }
    }
}

impl ModifyLimits {
    /// The limits a device reports.
    pub fn from_device_attr(attr: &DeviceAttr) -> Self {
        ModifyLimits {
            max_qp_rd_atom: attr.max_qp_rd_atom,
            max_qp_init_rd_atom: attr.max_qp_init_rd_atom,
        }
    }
}

/// Required and optional attribute bits of one transition for one QP type.
#[derive(Clone, Copy)]
struct Params {
    req: u32,
    opt: u32,
}

/// One existing transition: its parameters for RC, UC and UD.
struct Transition {
    from: QpState,
    to: QpState,
    rc: Params,
    uc: Params,
    ud: Params,
}

// Short names so that the table below reads like the kernel's.
const STATE: u32 = QpAttrMask::STATE.0;
const CUR: u32 = QpAttrMask::CUR_STATE.0;
const SQD_NOTIFY: u32 = QpAttrMask::EN_SQD_ASYNC_NOTIFY.0;
const ACCESS: u32 = QpAttrMask::ACCESS_FLAGS.0;
const PKEY: u32 = QpAttrMask::PKEY_INDEX.0;
const PORT: u32 = QpAttrMask::PORT.0;
const QKEY: u32 = QpAttrMask::QKEY.0;
const AV: u32 = QpAttrMask::AV.0;
const MTU: u32 = QpAttrMask::PATH_MTU.0;
const TIMEOUT: u32 = QpAttrMask::TIMEOUT.0;
const RETRY: u32 = QpAttrMask::RETRY_CNT.0;
const RNR_RETRY: u32 = QpAttrMask::RNR_RETRY.0;
const RQ_PSN: u32 = QpAttrMask::RQ_PSN.0;
const RD_ATOMIC: u32 = QpAttrMask::MAX_QP_RD_ATOMIC.0;
const ALT: u32 = QpAttrMask::ALT_PATH.0;
const RNR_TIMER: u32 = QpAttrMask::MIN_RNR_TIMER.0;
const SQ_PSN: u32 = QpAttrMask::SQ_PSN.0;
const DEST_RD_ATOMIC: u32 = QpAttrMask::MAX_DEST_RD_ATOMIC.0;
const MIG: u32 = QpAttrMask::PATH_MIG_STATE.0;
const DEST_QPN: u32 = QpAttrMask::DEST_QPN.0;

const NONE: Params = Params { req: 0, opt: 0 };

const fn req(req: u32) -> Params {
    Params { req, opt: 0 }
}
const fn opt(opt: u32) -> Params {
    Params { req: 0, opt }
}
const fn req_opt(req: u32, opt: u32) -> Params {
    Params { req, opt }
}

/// A transition with the same parameters for every QP type (to RESET / ERR).
const fn plain(from: QpState, to: QpState) -> Transition {
    Transition {
        from,
        to,
        rc: NONE,
        uc: NONE,
        ud: NONE,
    }
}

/// Every transition that exists; a (from, to) pair not listed is illegal. STATE itself is
/// implied and never listed. Mirrors the kernel's `qp_state_table` for RC, UC and UD.
static TRANSITIONS: &[Transition] = &[
    plain(RESET, RESET),
    Transition {
        from: RESET,
        to: INIT,
        rc: req(PKEY | PORT | ACCESS),
        uc: req(PKEY | PORT | ACCESS),
        ud: req(PKEY | PORT | QKEY),
    },
    // Mainline kernels dropped RESET -> ERR from the table; older ones (and the IB spec's "any
    // state to Error") allow it, and so do we.
    plain(RESET, ERR),
    plain(INIT, RESET),
    plain(INIT, ERR),
    Transition {
        from: INIT,
        to: INIT,
        rc: opt(PKEY | PORT | ACCESS),
        uc: opt(PKEY | PORT | ACCESS),
        ud: opt(PKEY | PORT | QKEY),
    },
    Transition {
        from: INIT,
        to: RTR,
        rc: req_opt(
            AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | RNR_TIMER,
            ALT | ACCESS | PKEY,
        ),
        uc: req_opt(AV | MTU | DEST_QPN | RQ_PSN, ALT | ACCESS | PKEY),
        ud: opt(PKEY | QKEY),
    },
    plain(RTR, RESET),
    plain(RTR, ERR),
    Transition {
        from: RTR,
        to: RTS,
        rc: req_opt(
            TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC,
            CUR | ALT | ACCESS | RNR_TIMER | MIG,
        ),
        uc: req_opt(SQ_PSN, CUR | ALT | ACCESS | MIG),
        ud: req_opt(SQ_PSN, CUR | QKEY),
    },
    plain(RTS, RESET),
    plain(RTS, ERR),
    Transition {
        from: RTS,
        to: RTS,
        rc: opt(CUR | ACCESS | ALT | MIG | RNR_TIMER),
        uc: opt(CUR | ACCESS | ALT | MIG),
        ud: opt(CUR | QKEY),
    },
    Transition {
        from: RTS,
        to: SQD,
        rc: opt(SQD_NOTIFY),
        uc: opt(SQD_NOTIFY),
        ud: opt(SQD_NOTIFY),
    },
    plain(SQD, RESET),
    plain(SQD, ERR),
    Transition {
        from: SQD,
        to: RTS,
        rc: opt(CUR | ALT | ACCESS | RNR_TIMER | MIG),
        uc: opt(CUR | ALT | ACCESS | MIG),
        ud: opt(CUR | QKEY),
    },
    Transition {
        from: SQD,
        to: SQD,
        rc: opt(PORT
            | AV
            | TIMEOUT
            | RETRY
            | RNR_RETRY
            | RD_ATOMIC
            | DEST_RD_ATOMIC
            | ALT
            | ACCESS
            | PKEY
            | RNR_TIMER
            | MIG),
        uc: opt(AV | ALT | ACCESS | PKEY | MIG),
        ud: opt(PKEY | QKEY),
    },
    plain(SQE, RESET),
    plain(SQE, ERR),
    // An RC QP never enters SQE (send errors take it to ERR); the kernel still lists the pair as
    // valid with no parameters for RC, and so do we.
    Transition {
        from: SQE,
        to: RTS,
        rc: NONE,
        uc: opt(CUR | ACCESS),
        ud: opt(CUR | QKEY),
    },
    plain(ERR, RESET),
    plain(ERR, ERR),
];

/// Names of the mask bits, for error messages.
const MASK_NAMES: &[(u32, &str)] = &[
    (STATE, "STATE"),
    (CUR, "CUR_STATE"),
    (SQD_NOTIFY, "EN_SQD_ASYNC_NOTIFY"),
    (ACCESS, "ACCESS_FLAGS"),
    (PKEY, "PKEY_INDEX"),
    (PORT, "PORT"),
    (QKEY, "QKEY"),
    (AV, "AV"),
    (MTU, "PATH_MTU"),
    (TIMEOUT, "TIMEOUT"),
    (RETRY, "RETRY_CNT"),
    (RNR_RETRY, "RNR_RETRY"),
    (RQ_PSN, "RQ_PSN"),
    (RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
    (ALT, "ALT_PATH"),
    (RNR_TIMER, "MIN_RNR_TIMER"),
    (SQ_PSN, "SQ_PSN"),
    (DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
    (MIG, "PATH_MIG_STATE"),
    (QpAttrMask::CAP.0, "CAP"),
    (DEST_QPN, "DEST_QPN"),
    (QpAttrMask::RATE_LIMIT.0, "RATE_LIMIT"),
];

/// "AV | PATH_MTU | 0x200000" for a set of mask bits.
fn mask_names(bits: u32) -> String {
    let mut parts: Vec<String> = MASK_NAMES
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| (*name).to_string())
        .collect();
    let known = MASK_NAMES.iter().fold(0, |acc, (bit, _)| acc | bit);
    if bits & !known != 0 {
        parts.push(format!("{:#x}", bits & !known));
    }
    parts.join(" | ")
}

fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Err => "ERR",
    }
}

fn type_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// PSNs and QP numbers are 24-bit fields on the wire.
const MAX_24BIT: u32 = (1 << 24) - 1;

/// QP access flags that mean something on a QP. LOCAL_WRITE means nothing here but is accepted
/// (and ignored) because many programs pass it and both rxe and hardware drivers accept it.
const QP_ACCESS_ALLOWED: u32 = AccessFlags::LOCAL_WRITE.0
    | AccessFlags::REMOTE_WRITE.0
    | AccessFlags::REMOTE_READ.0
    | AccessFlags::REMOTE_ATOMIC.0
    | AccessFlags::MW_BIND.0
    | AccessFlags::FLUSH_GLOBAL.0
    | AccessFlags::FLUSH_PERSISTENT.0;

/// Checks an `ibv_modify_qp` call against the QP's type and current state and returns the state
/// the QP is in afterwards. Every failure is [`VerbsError::InvalidArgument`] (EINVAL).
///
/// - Without `STATE` in `mask` the QP stays in `current`, and only the optional attributes of the
///   `current -> current` transition may be set (so e.g. no attribute may change in RTR).
/// - `CUR_STATE` is only accepted where the table allows it (into RTS) and then
///   `attr.cur_qp_state` must equal `current`: a consumer whose view of the state is stale is
///   told so rather than acting on it.
/// - Every required attribute of the transition must be in `mask`; any bit that is neither
///   required nor optional (including unknown bits, `CAP` and `RATE_LIMIT`) is rejected.
/// - Values: `port_num` and `ah_attr.port_num` must be 1, `pkey_index` 0 (one port, a P_Key
///   table of one entry); `timeout` and `min_rnr_timer` at most 31; `retry_cnt` and `rnr_retry`
///   at most 7; `rq_psn`, `sq_psn` and `dest_qp_num` below 2^24 (the kernel silently masks
///   PSNs to 24 bits; we reject them); `max_rd_atomic` at most `limits.max_qp_init_rd_atom` and
///   `max_dest_rd_atomic` at most `limits.max_qp_rd_atom`; `qp_access_flags` only remote
///   access, MW_BIND and FLUSH flags (LOCAL_WRITE is tolerated); for RC and UC the
///   `ah_attr.dgid` must be non-zero (RoCE has no LID routing); `ALT_PATH` is refused as the
///   kernel refuses alternate paths on RoCE.
pub fn validate_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &ModifyLimits,
) -> VerbsResult<QpState> {
    let next = if mask.contains(QpAttrMask::STATE) {
        attr.qp_state
    } else {
        current
    };
    let what = || {
        format!(
            "modify_qp {} {} -> {}",
            type_name(qp_type),
            state_name(current),
            state_name(next)
        )
    };

    let transition = TRANSITIONS
        .iter()
        .find(|t| t.from == current && t.to == next)
        .ok_or_else(|| VerbsError::inval(format!("{}: transition not allowed", what())))?;
    let params = match qp_type {
        QpType::Rc => transition.rc,
        QpType::Uc => transition.uc,
        QpType::Ud => transition.ud,
    };

    let missing = params.req & !mask.0;
    if missing != 0 {
        return Err(VerbsError::inval(format!(
            "{}: missing required attributes {}",
            what(),
            mask_names(missing)
        )));
    }
    let extra = mask.0 & !(params.req | params.opt | STATE);
    if extra != 0 {
        return Err(VerbsError::inval(format!(
            "{}: attributes not allowed here: {}",
            what(),
            mask_names(extra)
        )));
    }

    check_values(qp_type, current, attr, mask.0, limits)
        .map_err(|msg| VerbsError::inval(format!("{}: {}", what(), msg)))?;
    Ok(next)
}

/// Range checks of the attributes selected by `mask`; the message names the attribute.
fn check_values(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: u32,
    limits: &ModifyLimits,
) -> Result<(), String> {
    let set = |bit: u32| mask & bit != 0;
    if set(CUR) && attr.cur_qp_state != current {
        return Err(format!(
            "cur_qp_state {} does not match the current state",
            state_name(attr.cur_qp_state)
        ));
    }
    if set(PORT) && attr.port_num != 1 {
        return Err(format!("port_num {} (only port 1 exists)", attr.port_num));
    }
    if set(PKEY) && attr.pkey_index != 0 {
        return Err(format!(
            "pkey_index {} (the P_Key table has one entry)",
            attr.pkey_index
        ));
    }
    if set(ACCESS) && attr.qp_access_flags.0 & !QP_ACCESS_ALLOWED != 0 {
        return Err(format!(
            "qp_access_flags {:?}: only remote access, MW_BIND and FLUSH flags apply to a QP",
            attr.qp_access_flags
        ));
    }
    if set(AV) {
        if attr.ah_attr.port_num != 1 {
            return Err(format!(
                "ah_attr.port_num {} (only port 1 exists)",
                attr.ah_attr.port_num
            ));
        }
        if matches!(qp_type, QpType::Rc | QpType::Uc) && attr.ah_attr.dgid.is_zero() {
            return Err("ah_attr.dgid is zero (RoCE needs a destination GID)".into());
        }
    }
    if set(ALT) {
        return Err("ALT_PATH: alternate paths are not supported on RoCE".into());
    }
    let at_most = |bit: u32, name: &str, value: u32, max: u32| -> Result<(), String> {
        if set(bit) && value > max {
            Err(format!("{} {} exceeds {}", name, value, max))
        } else {
            Ok(())
        }
    };
    at_most(TIMEOUT, "timeout", attr.timeout.into(), 31)?;
    at_most(RNR_TIMER, "min_rnr_timer", attr.min_rnr_timer.into(), 31)?;
    at_most(RETRY, "retry_cnt", attr.retry_cnt.into(), 7)?;
    at_most(RNR_RETRY, "rnr_retry", attr.rnr_retry.into(), 7)?;
    at_most(RQ_PSN, "rq_psn", attr.rq_psn, MAX_24BIT)?;
    at_most(SQ_PSN, "sq_psn", attr.sq_psn, MAX_24BIT)?;
    at_most(DEST_QPN, "dest_qp_num", attr.dest_qp_num, MAX_24BIT)?;
    at_most(
        RD_ATOMIC,
        "max_rd_atomic",
        attr.max_rd_atomic.into(),
        limits.max_qp_init_rd_atom,
    )?;
    at_most(
        DEST_RD_ATOMIC,
        "max_dest_rd_atomic",
        attr.max_dest_rd_atomic.into(),
        limits.max_qp_rd_atom,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Gid, Mtu};
    use std::net::Ipv4Addr;

    const ALL_TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];
    const ALL_STATES: [QpState; 7] = [RESET, INIT, RTR, RTS, SQD, SQE, ERR];

    /// Attributes valid for every step of the happy path.
    fn good_attr() -> QpAttr {
        let mut a = QpAttr {
            port_num: 1,
            pkey_index: 0,
            qkey: 0x1111_1111,
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 0x12,
            rq_psn: 0x00ab_cdef,
            sq_psn: 0x0012_3456,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..QpAttr::default()
        };
        a.ah_attr.dgid = Gid::from(Ipv4Addr::new(127, 0, 0, 2));
        a.ah_attr.port_num = 1;
        a
    }

    fn m(bits: u32) -> QpAttrMask {
        QpAttrMask(bits)
    }

    /// The required masks of the happy path, as ibv_modify_qp(3) and the kernel give them.
    fn init_mask(t: QpType) -> u32 {
        match t {
            QpType::Rc | QpType::Uc => STATE | PKEY | PORT | ACCESS,
            QpType::Ud => STATE | PKEY | PORT | QKEY,
        }
    }
    fn rtr_mask(t: QpType) -> u32 {
        match t {
            QpType::Rc => STATE | AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | RNR_TIMER,
            QpType::Uc => STATE | AV | MTU | DEST_QPN | RQ_PSN,
            QpType::Ud => STATE,
        }
    }
    fn rts_mask(t: QpType) -> u32 {
        match t {
            QpType::Rc => STATE | SQ_PSN | TIMEOUT | RETRY | RNR_RETRY | RD_ATOMIC,
            QpType::Uc | QpType::Ud => STATE | SQ_PSN,
        }
    }

    fn modify(
        t: QpType,
        cur: QpState,
        to: QpState,
        attr: &QpAttr,
        mask: u32,
    ) -> VerbsResult<QpState> {
        let a = QpAttr {
            qp_state: to,
            ..*attr
        };
        validate_modify(t, cur, &a, m(mask), &ModifyLimits::default())
    }

    fn assert_einval(r: VerbsResult<QpState>, needle: &str) {
        match r {
            Err(e) => {
                assert_eq!(e.errno(), 22, "{e}");
                assert!(
                    e.to_string().contains(needle),
                    "{e:?} should mention {needle}"
                );
            }
            Ok(s) => panic!("expected EINVAL mentioning {needle}, got Ok({s:?})"),
        }
    }

    #[test]
    fn happy_path_every_type() {
        let a = good_attr();
        for t in ALL_TYPES {
            assert_eq!(modify(t, RESET, INIT, &a, init_mask(t)), Ok(INIT), "{t:?}");
            assert_eq!(modify(t, INIT, RTR, &a, rtr_mask(t)), Ok(RTR), "{t:?}");
            assert_eq!(modify(t, RTR, RTS, &a, rts_mask(t)), Ok(RTS), "{t:?}");
        }
    }

    #[test]
    fn each_missing_required_attribute_is_einval() {
        let a = good_attr();
        for t in ALL_TYPES {
            for (from, to, mask) in [
                (RESET, INIT, init_mask(t)),
                (INIT, RTR, rtr_mask(t)),
                (RTR, RTS, rts_mask(t)),
            ] {
                let required = mask & !STATE;
                for bit in (0..32).map(|i| 1u32 << i).filter(|b| required & b != 0) {
                    let name = mask_names(bit);
                    assert_einval(
                        modify(t, from, to, &a, mask & !bit),
                        &format!("missing required attributes {name}"),
                    );
                }
            }
        }
    }

    #[test]
    fn extra_attribute_is_einval() {
        let a = good_attr();
        // QKEY is not an RC attribute; ACCESS_FLAGS not a UD one; MAX_DEST_RD_ATOMIC not at RTS.
        assert_einval(
            modify(QpType::Rc, RESET, INIT, &a, init_mask(QpType::Rc) | QKEY),
            "QKEY",
        );
        assert_einval(
            modify(QpType::Ud, RESET, INIT, &a, init_mask(QpType::Ud) | ACCESS),
            "ACCESS_FLAGS",
        );
        assert_einval(
            modify(
                QpType::Rc,
                RTR,
                RTS,
                &a,
                rts_mask(QpType::Rc) | DEST_RD_ATOMIC,
            ),
            "MAX_DEST_RD_ATOMIC",
        );
        assert_einval(
            modify(QpType::Uc, RTR, RTS, &a, rts_mask(QpType::Uc) | TIMEOUT),
            "TIMEOUT",
        );
        assert_einval(
            modify(QpType::Rc, RTS, RTS, &a, STATE | QpAttrMask::CAP.0),
            "CAP",
        );
        assert_einval(
            modify(QpType::Rc, RTS, RTS, &a, STATE | (1 << 28)),
            "0x10000000",
        );
        // RESET and ERR targets take no attributes at all.
        assert_einval(modify(QpType::Rc, RTS, ERR, &a, STATE | TIMEOUT), "TIMEOUT");
        assert_einval(modify(QpType::Rc, RTS, RESET, &a, STATE | PORT), "PORT");
    }

    #[test]
    fn optional_attributes_are_accepted() {
        let a = good_attr();
        assert_eq!(
            modify(
                QpType::Rc,
                INIT,
                RTR,
                &a,
                rtr_mask(QpType::Rc) | PKEY | ACCESS
            ),
            Ok(RTR)
        );
        assert_eq!(
            modify(QpType::Ud, INIT, RTR, &a, STATE | QKEY | PKEY),
            Ok(RTR)
        );
        assert_eq!(
            modify(
                QpType::Rc,
                RTR,
                RTS,
                &a,
                rts_mask(QpType::Rc) | RNR_TIMER | ACCESS
            ),
            Ok(RTS)
        );
        assert_eq!(
            modify(QpType::Rc, RTS, SQD, &a, STATE | SQD_NOTIFY),
            Ok(SQD)
        );
        assert_eq!(
            modify(QpType::Rc, SQD, SQD, &a, STATE | TIMEOUT | RETRY | AV),
            Ok(SQD)
        );
        assert_eq!(modify(QpType::Rc, SQD, RTS, &a, STATE), Ok(RTS));
    }

    #[test]
    fn illegal_transitions_are_einval() {
        let a = good_attr();
        for t in ALL_TYPES {
            assert_einval(
                modify(t, RESET, RTS, &a, rts_mask(t)),
                "RESET -> RTS: transition not allowed",
            );
            assert_einval(
                modify(t, INIT, RTS, &a, rts_mask(t)),
                "INIT -> RTS: transition not allowed",
            );
            assert_einval(
                modify(t, RTS, RTR, &a, rtr_mask(t)),
                "RTS -> RTR: transition not allowed",
            );
            assert_einval(modify(t, RESET, RTR, &a, rtr_mask(t)), "not allowed");
            assert_einval(modify(t, ERR, RTS, &a, rts_mask(t)), "not allowed");
            assert_einval(modify(t, RESET, SQE, &a, STATE), "not allowed");
        }
    }

    #[test]
    fn any_state_to_reset_or_err_is_allowed() {
        let a = good_attr();
        for t in ALL_TYPES {
            for from in ALL_STATES {
                assert_eq!(
                    modify(t, from, RESET, &a, STATE),
                    Ok(RESET),
                    "{t:?} {from:?}"
                );
                assert_eq!(modify(t, from, ERR, &a, STATE), Ok(ERR), "{t:?} {from:?}");
            }
        }
    }

    #[test]
    fn without_state_only_same_state_optionals() {
        let a = good_attr();
        // RTS -> RTS allows MIN_RNR_TIMER and ACCESS_FLAGS for RC.
        assert_eq!(
            modify(QpType::Rc, RTS, RESET, &a, RNR_TIMER | ACCESS),
            Ok(RTS)
        );
        assert_eq!(modify(QpType::Ud, RTS, RESET, &a, QKEY), Ok(RTS));
        assert_eq!(modify(QpType::Rc, INIT, RESET, &a, PORT), Ok(INIT));
        assert_eq!(modify(QpType::Rc, RESET, RESET, &a, 0), Ok(RESET));
        // ... but not the attributes only a state change takes.
        assert_einval(modify(QpType::Rc, RTS, RESET, &a, TIMEOUT), "TIMEOUT");
        // RTR -> RTR does not exist: nothing may change in RTR.
        assert_einval(modify(QpType::Rc, RTR, RESET, &a, ACCESS), "RTR -> RTR");
    }

    #[test]
    fn cur_state_must_match() {
        let mut a = good_attr();
        a.cur_qp_state = RTS;
        assert_eq!(modify(QpType::Rc, RTS, RTS, &a, STATE | CUR), Ok(RTS));
        a.cur_qp_state = SQD;
        assert_einval(
            modify(QpType::Rc, RTS, RTS, &a, STATE | CUR),
            "cur_qp_state SQD",
        );
        // Not an optional attribute outside the transitions into RTS.
        a.cur_qp_state = INIT;
        assert_einval(modify(QpType::Rc, INIT, INIT, &a, STATE | CUR), "CUR_STATE");
    }

    #[test]
    fn value_ranges() {
        let t = QpType::Rc;
        let bad = |f: &dyn Fn(&mut QpAttr)| {
            let mut a = good_attr();
            f(&mut a);
            a
        };
        let rts = rts_mask(t);
        let rtr = rtr_mask(t);
        let init = init_mask(t);
        assert_einval(
            modify(t, RTR, RTS, &bad(&|a| a.retry_cnt = 8), rts),
            "retry_cnt 8",
        );
        assert_einval(
            modify(t, RTR, RTS, &bad(&|a| a.rnr_retry = 8), rts),
            "rnr_retry 8",
        );
        assert_einval(
            modify(t, RTR, RTS, &bad(&|a| a.timeout = 32), rts),
            "timeout 32",
        );
        assert_einval(
            modify(t, RTR, RTS, &bad(&|a| a.sq_psn = 1 << 24), rts),
            "sq_psn",
        );
        assert_einval(
            modify(t, RTR, RTS, &bad(&|a| a.max_rd_atomic = 129), rts),
            "max_rd_atomic 129",
        );
        assert_einval(
            modify(t, INIT, RTR, &bad(&|a| a.min_rnr_timer = 32), rtr),
            "min_rnr_timer 32",
        );
        assert_einval(
            modify(t, INIT, RTR, &bad(&|a| a.rq_psn = 1 << 24), rtr),
            "rq_psn",
        );
        assert_einval(
            modify(t, INIT, RTR, &bad(&|a| a.dest_qp_num = 1 << 24), rtr),
            "dest_qp_num",
        );
        assert_einval(
            modify(t, INIT, RTR, &bad(&|a| a.max_dest_rd_atomic = 200), rtr),
            "max_dest_rd_atomic",
        );
        assert_einval(
            modify(
                t,
                INIT,
                RTR,
                &bad(&|a| a.ah_attr.dgid = Gid::default()),
                rtr,
            ),
            "dgid",
        );
        assert_einval(
            modify(t, INIT, RTR, &bad(&|a| a.ah_attr.port_num = 0), rtr),
            "ah_attr.port_num",
        );
        assert_einval(
            modify(t, RESET, INIT, &bad(&|a| a.port_num = 2), init),
            "port_num 2",
        );
        assert_einval(
            modify(t, RESET, INIT, &bad(&|a| a.pkey_index = 1), init),
            "pkey_index 1",
        );
        assert_einval(
            modify(
                t,
                RESET,
                INIT,
                &bad(&|a| a.qp_access_flags = AccessFlags::ZERO_BASED),
                init,
            ),
            "qp_access_flags",
        );
        assert_einval(
            modify(
                t,
                RESET,
                INIT,
                &bad(&|a| a.qp_access_flags = AccessFlags(1 << 12)),
                init,
            ),
            "qp_access_flags",
        );
        // Boundaries are accepted.
        let edge = bad(&|a| {
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.timeout = 31;
            a.sq_psn = (1 << 24) - 1;
            a.max_rd_atomic = 128;
        });
        assert_eq!(modify(t, RTR, RTS, &edge, rts), Ok(RTS));
        // LOCAL_WRITE and FLUSH on a QP are tolerated.
        let lw = bad(&|a| a.qp_access_flags = AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_GLOBAL);
        assert_eq!(modify(t, RESET, INIT, &lw, init), Ok(INIT));
        // A UD QP has no destination in its state: a zero dgid is not checked (no AV allowed).
        assert_eq!(
            modify(
                QpType::Ud,
                INIT,
                RTR,
                &bad(&|a| a.ah_attr.dgid = Gid::default()),
                STATE
            ),
            Ok(RTR)
        );
        // Limits come from the caller.
        let tight = ModifyLimits {
            max_qp_rd_atom: 4,
            max_qp_init_rd_atom: 2,
        };
        let a = QpAttr {
            qp_state: RTS,
            max_rd_atomic: 3,
            ..good_attr()
        };
        assert_einval(
            validate_modify(t, RTR, &a, m(rts), &tight),
            "max_rd_atomic 3 exceeds 2",
        );
    }

    #[test]
    fn alt_path_is_refused_on_roce() {
        let a = good_attr();
        assert_einval(
            modify(QpType::Rc, INIT, RTR, &a, rtr_mask(QpType::Rc) | ALT),
            "ALT_PATH",
        );
    }

    #[test]
    fn table_has_no_duplicate_pairs() {
        for (i, x) in TRANSITIONS.iter().enumerate() {
            for y in &TRANSITIONS[i + 1..] {
                assert!(
                    !(x.from == y.from && x.to == y.to),
                    "{:?} -> {:?} twice",
                    x.from,
                    x.to
                );
            }
            for p in [x.rc, x.uc, x.ud] {
                assert_eq!(p.req & p.opt, 0, "a bit both required and optional");
                assert_eq!((p.req | p.opt) & STATE, 0, "STATE is implied");
            }
        }
    }

    #[test]
    fn default_limits_are_rxe_limits() {
        assert_eq!(
            ModifyLimits::default(),
            ModifyLimits {
                max_qp_rd_atom: 128,
                max_qp_init_rd_atom: 128
            }
        );
    }
}
