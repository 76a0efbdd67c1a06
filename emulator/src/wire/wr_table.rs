//! The send WR table, the other half of the opcode table (`opcode`): for every
//! `ibv_wr_opcode`, the QP types that may post it (the table of ibv_post_send(3)), whether
//! it is local work that sends nothing, whether the emulator executes it, and the BTH
//! opcodes its message goes out with on each transport, by place in the message. The
//! requester and the post-time checks read it; nothing else says what a QP type may post.

use softverbs_api::{QpType, WrOpcode};

use super::opcode::{Opcode, Position};

/// The BTH opcodes of one WR opcode's message on one transport: FIRST, MIDDLE, LAST, ONLY
/// (`None` where the transport has no such packet).
pub type Packets = [Option<Opcode>; 4];

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrRule {
    /// The WR opcode.
    pub opcode: WrOpcode,
    /// ibv_post_send(3) lists it for RC, UC, UD QPs.
    pub posted_on: [bool; 3],
    /// Local work (LOCAL_INV, BIND_MW): executed at the requester, nothing on the wire.
    pub local: bool,
    /// The emulator executes it (the rest is refused with EOPNOTSUPP).
    pub implemented: bool,
    /// Its packets on RC, UC, UD.
    pub packets: [Packets; 3],
}

const NONE: Packets = [None; 4];

const fn only(op: Opcode) -> Packets {
    [None, None, None, Some(op)]
}

const fn message(first: Opcode, middle: Opcode, last: Opcode, only: Opcode) -> Packets {
    [Some(first), Some(middle), Some(last), Some(only)]
}

const fn row(
    opcode: WrOpcode,
    posted_on: [bool; 3],
    local: bool,
    implemented: bool,
    packets: [Packets; 3],
) -> WrRule {
    WrRule {
        opcode,
        posted_on,
        local,
        implemented,
        packets,
    }
}

const RC_UC_UD: [bool; 3] = [true, true, true];
const RC_UC: [bool; 3] = [true, true, false];
const RC: [bool; 3] = [true, false, false];
const NOWHERE: [bool; 3] = [false, false, false];

/// The table, one row per `ibv_wr_opcode`.
pub const WR_TABLE: [WrRule; 13] = {
    use Opcode as O;
    use WrOpcode as W;
    [
        row(
            W::Send,
            RC_UC_UD,
            false,
            true,
            [
                message(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST,
                    O::RC_SEND_ONLY,
                ),
                message(
                    O::UC_SEND_FIRST,
                    O::UC_SEND_MIDDLE,
                    O::UC_SEND_LAST,
                    O::UC_SEND_ONLY,
                ),
                only(O::UD_SEND_ONLY),
            ],
        ),
        row(
            W::SendWithImm,
            RC_UC_UD,
            false,
            true,
            [
                message(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST_WITH_IMMEDIATE,
                    O::RC_SEND_ONLY_WITH_IMMEDIATE,
                ),
                message(
                    O::UC_SEND_FIRST,
                    O::UC_SEND_MIDDLE,
                    O::UC_SEND_LAST_WITH_IMMEDIATE,
                    O::UC_SEND_ONLY_WITH_IMMEDIATE,
                ),
                only(O::UD_SEND_ONLY_WITH_IMMEDIATE),
            ],
        ),
        // ibv_post_send(3) lists it for UC, but the IBTA defines no UC opcode for it.
        row(
            W::SendWithInv,
            RC_UC,
            false,
            true,
            [
                message(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST_WITH_INVALIDATE,
                    O::RC_SEND_ONLY_WITH_INVALIDATE,
                ),
                NONE,
                NONE,
            ],
        ),
        row(
            W::RdmaWrite,
            RC_UC,
            false,
            true,
            [
                message(
                    O::RC_RDMA_WRITE_FIRST,
                    O::RC_RDMA_WRITE_MIDDLE,
                    O::RC_RDMA_WRITE_LAST,
                    O::RC_RDMA_WRITE_ONLY,
                ),
                message(
                    O::UC_RDMA_WRITE_FIRST,
                    O::UC_RDMA_WRITE_MIDDLE,
                    O::UC_RDMA_WRITE_LAST,
                    O::UC_RDMA_WRITE_ONLY,
                ),
                NONE,
            ],
        ),
        row(
            W::RdmaWriteWithImm,
            RC_UC,
            false,
            true,
            [
                message(
                    O::RC_RDMA_WRITE_FIRST,
                    O::RC_RDMA_WRITE_MIDDLE,
                    O::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ),
                message(
                    O::UC_RDMA_WRITE_FIRST,
                    O::UC_RDMA_WRITE_MIDDLE,
                    O::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    O::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ),
                NONE,
            ],
        ),
        row(
            W::RdmaRead,
            RC,
            false,
            true,
            [only(O::RC_RDMA_READ_REQUEST), NONE, NONE],
        ),
        row(
            W::AtomicCmpAndSwp,
            RC,
            false,
            true,
            [only(O::RC_COMPARE_SWAP), NONE, NONE],
        ),
        row(
            W::AtomicFetchAndAdd,
            RC,
            false,
            true,
            [only(O::RC_FETCH_ADD), NONE, NONE],
        ),
        row(
            W::AtomicWrite,
            RC,
            false,
            true,
            [only(O::RC_ATOMIC_WRITE), NONE, NONE],
        ),
        row(W::Flush, RC, false, true, [only(O::RC_FLUSH), NONE, NONE]),
        row(W::LocalInv, RC_UC, true, true, [NONE; 3]),
        row(W::BindMw, RC_UC, true, true, [NONE; 3]),
        row(W::Tso, NOWHERE, false, false, [NONE; 3]),
    ]
};

/// The column of `qp_type` in [`WrRule::posted_on`] and [`WrRule::packets`].
fn column(qp_type: QpType) -> usize {
    match qp_type {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    }
}

/// The row of `opcode`.
pub fn wr_rule(opcode: WrOpcode) -> &'static WrRule {
    WR_TABLE
        .iter()
        .find(|r| r.opcode == opcode)
        .expect("every WrOpcode has a row (checked by a test)")
}

impl WrRule {
    /// ibv_post_send(3) lets a `qp_type` QP post it.
    pub fn posted_on(&self, qp_type: QpType) -> bool {
        self.posted_on[column(qp_type)]
    }

    /// It may be posted on `qp_type` but has no packets there: a local operation is not
    /// that; a message that no wire opcode can carry (SEND_WITH_INV on UC) is.
    pub fn lacks_wire_opcode(&self, qp_type: QpType) -> bool {
        !self.local && self.packets[column(qp_type)] == NONE
    }

    /// The BTH opcode of the packet at `position` of its message on a `qp_type` QP.
    pub fn wire_opcode(&self, qp_type: QpType, position: Position) -> Option<Opcode> {
        let at = match position {
            Position::First => 0,
            Position::Middle => 1,
            Position::Last => 2,
            Position::Only => 3,
        };
        self.packets[column(qp_type)][at]
    }
}

/// The BTH opcode of packet `position` of a message of `op` on a `qp_type` QP.
pub fn request_opcode(qp_type: QpType, op: WrOpcode, position: Position) -> Option<Opcode> {
    wr_rule(op).wire_opcode(qp_type, position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Transport;

    const ALL_WR: [WrOpcode; 13] = [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::LocalInv,
        WrOpcode::BindMw,
        WrOpcode::SendWithInv,
        WrOpcode::Tso,
        WrOpcode::AtomicWrite,
        WrOpcode::Flush,
    ];

    #[test]
    fn every_wr_opcode_has_one_row() {
        for op in ALL_WR {
            assert_eq!(WR_TABLE.iter().filter(|r| r.opcode == op).count(), 1);
        }
    }

    #[test]
    fn every_wire_opcode_belongs_to_its_column_and_is_a_request_at_its_position() {
        let types = [QpType::Rc, QpType::Uc, QpType::Ud];
        let transports = [Transport::Rc, Transport::Uc, Transport::Ud];
        let positions = [
            Position::First,
            Position::Middle,
            Position::Last,
            Position::Only,
        ];
        for rule in &WR_TABLE {
            for (qp_type, transport) in types.into_iter().zip(transports) {
                for position in positions {
                    let Some(op) = rule.wire_opcode(qp_type, position) else {
                        continue;
                    };
                    let info = op.info().unwrap();
                    assert_eq!(info.transport, transport, "{op:?}");
                    assert_eq!(info.position, position, "{op:?}");
                    assert!(info.is_request, "{op:?}");
                    assert!(rule.posted_on(qp_type), "{:?} on {qp_type:?}", rule.opcode);
                }
            }
        }
    }

    #[test]
    fn the_table_is_the_one_of_ibv_post_send() {
        use WrOpcode::*;
        let on = |t, op| wr_rule(op).posted_on(t);
        assert!(on(QpType::Ud, Send) && on(QpType::Ud, SendWithImm));
        assert!(!on(QpType::Ud, RdmaWrite) && !on(QpType::Ud, LocalInv));
        assert!(on(QpType::Uc, RdmaWriteWithImm) && on(QpType::Uc, SendWithInv));
        assert!(!on(QpType::Uc, RdmaRead) && !on(QpType::Uc, AtomicFetchAndAdd));
        assert!(on(QpType::Rc, AtomicCmpAndSwp) && !on(QpType::Rc, Tso));
        assert!(wr_rule(SendWithInv).lacks_wire_opcode(QpType::Uc));
        assert!(!wr_rule(LocalInv).lacks_wire_opcode(QpType::Uc));
        assert_eq!(
            request_opcode(QpType::Uc, RdmaWrite, Position::Middle),
            Some(Opcode::UC_RDMA_WRITE_MIDDLE)
        );
        assert_eq!(request_opcode(QpType::Ud, Send, Position::First), None);
    }
}
