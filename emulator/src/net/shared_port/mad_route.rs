//! Which member of a shared device a QP1 datagram (a CM MAD) belongs to: a connection or
//! SIDR request to the member listening on its service ID; any other CM message to the
//! member whose slot is the top byte of the ID it answers (our local communication ID, or
//! our SIDR request ID), which each member draws from its own slot's range. Pure: reads
//! bytes, decides nothing else.

use crate::wire::cm::mad::{attr, MAD_HEADER_LEN, MGMT_CLASS_CM};

/// BTH (12) and DETH (8) before the MAD of a UD SEND ONLY to QP1.
const MAD_AT: usize = 20;
/// UD SEND ONLY: how MADs travel.
const UD_SEND_ONLY: u8 = 0x64;

/// Where a QP1 datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qp1Owner {
    /// A request: to the member listening on this service ID.
    Service(u64),
    /// An answer: to the member holding this slot.
    Slot(u8),
    /// Anything else (not a CM MAD we route, too short): the member that received it.
    Here,
}

/// The owner of QP1 datagram `payload` (UDP payload: BTH, DETH, MAD, ICRC).
pub fn qp1_owner(payload: &[u8]) -> Qp1Owner {
    let Some(mad) = payload.get(MAD_AT..) else {
        return Qp1Owner::Here;
    };
    if payload[0] != UD_SEND_ONLY || mad.len() < MAD_HEADER_LEN + 16 || mad[1] != MGMT_CLASS_CM {
        return Qp1Owner::Here;
    }
    let data = &mad[MAD_HEADER_LEN..];
    let be32 = |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let id_slot = |id: u32| match (id >> 24) as u8 {
        0 => Qp1Owner::Here,
        slot => Qp1Owner::Slot(slot),
    };
    match u16::from_be_bytes([mad[16], mad[17]]) {
        // Both carry the service ID at data offset 8.
        attr::REQ | attr::SIDR_REQ => {
            let mut sid = [0u8; 8];
            sid.copy_from_slice(&data[8..16]);
            Qp1Owner::Service(u64::from_be_bytes(sid))
        }
        // The request ID is the requester's (ours).
        attr::SIDR_REP => id_slot(be32(0)),
        // Local comm ID at 0 (the sender's), remote comm ID at 4 (ours).
        attr::MRA
        | attr::REJ
        | attr::REP
        | attr::RTU
        | attr::DREQ
        | attr::DREP
        | attr::LAP
        | attr::APR => id_slot(be32(4)),
        _ => Qp1Owner::Here,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(attribute: u16, data: &[(usize, &[u8])]) -> Vec<u8> {
        let mut p = vec![0u8; MAD_AT + 256 + 4];
        p[0] = UD_SEND_ONLY;
        p[MAD_AT + 1] = MGMT_CLASS_CM;
        p[MAD_AT + 16..MAD_AT + 18].copy_from_slice(&attribute.to_be_bytes());
        for (at, bytes) in data {
            let at = MAD_AT + MAD_HEADER_LEN + at;
            p[at..at + bytes.len()].copy_from_slice(bytes);
        }
        p
    }

    #[test]
    fn requests_go_by_service_and_answers_by_the_slot_of_our_id() {
        let sid = 0x0000_0001_0106_04d2_u64;
        for a in [attr::REQ, attr::SIDR_REQ] {
            let p = mad(a, &[(0, &[9, 9, 9, 9]), (8, &sid.to_be_bytes())]);
            assert_eq!(qp1_owner(&p), Qp1Owner::Service(sid));
        }
        for a in [
            attr::REP,
            attr::RTU,
            attr::REJ,
            attr::MRA,
            attr::DREQ,
            attr::DREP,
        ] {
            let p = mad(a, &[(0, &[0x07, 1, 2, 3]), (4, &[0x05, 0xaa, 0xbb, 0xcc])]);
            assert_eq!(qp1_owner(&p), Qp1Owner::Slot(5), "attribute {a:#x}");
        }
        let p = mad(attr::SIDR_REP, &[(0, &[0x2a, 0, 0, 1])]);
        assert_eq!(qp1_owner(&p), Qp1Owner::Slot(0x2a));
        // A REJ with no remote ID, another class, another opcode, too short: here.
        assert_eq!(qp1_owner(&mad(attr::REJ, &[])), Qp1Owner::Here);
        let mut other = mad(attr::REP, &[(4, &[5, 0, 0, 1])]);
        other[MAD_AT + 1] = 0x04;
        assert_eq!(qp1_owner(&other), Qp1Owner::Here);
        let mut imm = mad(attr::REP, &[(4, &[5, 0, 0, 1])]);
        imm[0] = 0x65;
        assert_eq!(qp1_owner(&imm), Qp1Owner::Here);
        assert_eq!(qp1_owner(&[0x64; 30]), Qp1Owner::Here);
        assert_eq!(qp1_owner(&[]), Qp1Owner::Here);
    }
}
