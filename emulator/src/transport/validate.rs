//! Post-time checks of ibv_post_send(3) / ibv_post_recv(3): what is rejected with an errno
//! (and reported as the failing WR) before anything is queued.

use softverbs_api::wr::FlushParams;
use softverbs_api::{
    QpCap, QpState, QpType, RecvWr, SendFlags, SendWr, VerbsError, VerbsResult, WrOpcode,
};

use crate::wire::wr_rule;

/// Largest message a WR may carry (2^31 bytes, the IB limit).
pub const MAX_MESSAGE_BYTES: u64 = 1 << 31;

/// Whether `opcode` may be posted on a QP of `qp_type` (the table of ibv_post_send(3), as
/// data in `wire::wr_table`).
pub fn opcode_allowed(qp_type: QpType, opcode: WrOpcode) -> bool {
    wr_rule(opcode).posted_on(qp_type)
}

/// Opcodes the emulator executes today; the rest of the table is refused with EOPNOTSUPP
/// rather than accepted and mishandled.
pub fn opcode_implemented(opcode: WrOpcode) -> bool {
    wr_rule(opcode).implemented
}

/// Checks one send WR against the QP; `Ok` means it may be queued.
pub fn check_send_wr(qp_type: QpType, state: QpState, cap: &QpCap, wr: &SendWr) -> VerbsResult<()> {
    // As in rxe: sends are refused before RTS, and accepted (then flushed) in ERR.
    if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
        return Err(VerbsError::inval(format!(
            "post_send on a QP in state {state:?} (needs RTS)"
        )));
    }
    if !opcode_allowed(qp_type, wr.opcode) {
        return Err(VerbsError::inval(format!(
            "opcode {:?} is not valid on a {qp_type:?} QP",
            wr.opcode
        )));
    }
    if wr_rule(wr.opcode).lacks_wire_opcode(qp_type) {
        // ibv_post_send(3) lists SEND_WITH_INV for UC, but the IBTA defines no UC wire
        // opcode for it.
        return Err(VerbsError::NotSupported(format!(
            "{:?} has no {qp_type:?} opcode on the wire (IBTA): use RC",
            wr.opcode
        )));
    }
    if !opcode_implemented(wr.opcode) {
        return Err(VerbsError::NotSupported(format!(
            "opcode {:?} is not implemented by the emulator yet",
            wr.opcode
        )));
    }
    if !wr.send_flags.is_known() {
        return Err(VerbsError::inval(format!(
            "unknown send flags {:#x}",
            wr.send_flags.bits()
        )));
    }
    if wr.send_flags.contains(SendFlags::IP_CSUM) {
        return Err(VerbsError::inval("IBV_SEND_IP_CSUM is not supported"));
    }
    if wr.send_flags.contains(SendFlags::FENCE) && qp_type != QpType::Rc {
        return Err(VerbsError::inval("IBV_SEND_FENCE is valid only on RC QPs"));
    }
    let inline = wr.send_flags.contains(SendFlags::INLINE);
    if !inline && wr.sg_list.len() > cap.max_send_sge as usize {
        return Err(VerbsError::inval(format!(
            "{} SGEs exceed max_send_sge {}",
            wr.sg_list.len(),
            cap.max_send_sge
        )));
    }
    let length = wr.total_length();
    if inline && length > cap.max_inline_data as u64 {
        return Err(VerbsError::inval(format!(
            "{length} bytes of inline data exceed max_inline_data {}",
            cap.max_inline_data
        )));
    }
    let is_atomic = matches!(
        wr.opcode,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    );
    if is_atomic && (length != 8 || inline) {
        return Err(VerbsError::inval(format!(
            "an atomic WR needs an 8-byte local buffer for the original value (got {length} bytes{})",
            if inline { ", inline" } else { "" }
        )));
    }
    if wr.opcode == WrOpcode::AtomicWrite && length != 8 {
        return Err(VerbsError::inval(format!(
            "an ATOMIC WRITE carries exactly 8 bytes (its gather list has {length})"
        )));
    }
    if wr.opcode == WrOpcode::Flush {
        let f = wr.flush;
        let placement_ok = matches!(
            f.placement_type,
            FlushParams::GLOBAL | FlushParams::PERSISTENT
        );
        let level_ok = matches!(
            f.selectivity_level,
            FlushParams::RANGE | FlushParams::WHOLE_REGION
        );
        if !placement_ok || !level_ok {
            return Err(VerbsError::inval(format!(
                "FLUSH placement type {} / selectivity level {} are not defined",
                f.placement_type, f.selectivity_level
            )));
        }
    }
    if wr.opcode == WrOpcode::BindMw && wr.bind_mw.is_none() {
        return Err(VerbsError::inval(
            "an IBV_WR_BIND_MW work request needs its bind_mw part",
        ));
    }
    if inline && wr.opcode == WrOpcode::RdmaRead {
        return Err(VerbsError::inval(
            "IBV_SEND_INLINE is not valid for RDMA READ",
        ));
    }
    if length > MAX_MESSAGE_BYTES {
        return Err(VerbsError::inval(format!(
            "message of {length} bytes exceeds the 2^31-byte limit"
        )));
    }
    Ok(())
}

/// Checks one receive WR against the QP.
pub fn check_recv_wr(state: QpState, cap: &QpCap, wr: &RecvWr) -> VerbsResult<()> {
    if state == QpState::Reset {
        return Err(VerbsError::inval("post_recv on a QP in RESET"));
    }
    if wr.sg_list.len() > cap.max_recv_sge as usize {
        return Err(VerbsError::inval(format!(
            "{} SGEs exceed max_recv_sge {}",
            wr.sg_list.len(),
            cap.max_recv_sge
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_api::Sge;

    fn cap() -> QpCap {
        QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        }
    }

    #[test]
    fn opcode_table_matches_the_man_page() {
        assert!(opcode_allowed(QpType::Ud, WrOpcode::Send));
        assert!(!opcode_allowed(QpType::Ud, WrOpcode::RdmaWrite));
        assert!(opcode_allowed(QpType::Uc, WrOpcode::RdmaWriteWithImm));
        assert!(!opcode_allowed(QpType::Uc, WrOpcode::RdmaRead));
        assert!(!opcode_allowed(QpType::Uc, WrOpcode::AtomicFetchAndAdd));
        assert!(opcode_allowed(QpType::Rc, WrOpcode::AtomicCmpAndSwp));
        assert!(!opcode_allowed(QpType::Rc, WrOpcode::Tso));
    }

    #[test]
    fn send_checks_give_einval() {
        let sge = Sge {
            addr: 0,
            length: 8,
            lkey: 1,
        };
        let wr = SendWr::send(1, vec![sge; 3]);
        let e = check_send_wr(QpType::Rc, QpState::Rts, &cap(), &wr).unwrap_err();
        assert_eq!(e.errno(), 22);
        let wr = SendWr::send(1, vec![sge]);
        assert_eq!(
            check_send_wr(QpType::Rc, QpState::Rtr, &cap(), &wr)
                .unwrap_err()
                .errno(),
            22
        );
        assert!(check_send_wr(QpType::Rc, QpState::Rts, &cap(), &wr).is_ok());
        let mut big_inline = SendWr::send(
            1,
            vec![Sge {
                addr: 0,
                length: 65,
                lkey: 0,
            }],
        );
        big_inline.send_flags |= SendFlags::INLINE;
        assert_eq!(
            check_send_wr(QpType::Rc, QpState::Rts, &cap(), &big_inline)
                .unwrap_err()
                .errno(),
            22
        );
        let mut fenced_uc = SendWr::send(1, vec![sge]);
        fenced_uc.send_flags |= SendFlags::FENCE;
        assert_eq!(
            check_send_wr(QpType::Uc, QpState::Rts, &cap(), &fenced_uc)
                .unwrap_err()
                .errno(),
            22
        );
    }

    #[test]
    fn recv_checks() {
        let wr = RecvWr {
            wr_id: 1,
            sg_list: vec![Sge::default(); 3],
        };
        assert_eq!(
            check_recv_wr(QpState::Init, &cap(), &wr)
                .unwrap_err()
                .errno(),
            22
        );
        let wr = RecvWr {
            wr_id: 1,
            sg_list: vec![Sge::default()],
        };
        assert_eq!(
            check_recv_wr(QpState::Reset, &cap(), &wr)
                .unwrap_err()
                .errno(),
            22
        );
        assert!(check_recv_wr(QpState::Init, &cap(), &wr).is_ok());
    }
}
