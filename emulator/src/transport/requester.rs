//! The requester: segments queued send WRs into request packets within the PSN window.

use softverbs_api::{QpState, QpType, WcStatus, WrOpcode};

use super::completer;
use super::output::{Env, OutPacket, Outputs};
use super::qp::TransportQp;
use super::syndrome::ack_timeout_ns;
use crate::wire::{BthRepr, Opcode, Position, Psn, RoceRepr};

/// Most PSNs in flight without an ACK (rxe's RXE_MAX_UNACKED_PSNS).
pub const MAX_UNACKED_PSNS: i32 = 128;
/// A multi-packet message asks for an ACK at least this often (rxe's RXE_MAX_PKT_PER_ACK).
pub const MAX_PACKETS_PER_ACK: u32 = 64;

/// Where the requester is in the send queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequesterState {
    /// PSN of the next packet to send.
    pub next_psn: Psn,
    /// The first PSN never sent before (anything earlier that goes out is a retransmission).
    pub high_psn: Psn,
    /// Send-queue index of the WQE being segmented.
    pub wqe_index: usize,
    /// Next packet within that WQE.
    pub packet_index: u32,
    /// Packets sent since the last one that asked for an ACK.
    pub packets_since_ack_req: u32,
}

impl RequesterState {
    /// Starts over at `psn` (modify with SQ_PSN).
    pub fn reset(&mut self, psn: Psn) {
        *self = RequesterState {
            next_psn: psn,
            high_psn: psn,
            ..RequesterState::default()
        };
    }

    /// Forgets progress on queued WQEs: the next packet is the first of the queue's front,
    /// at `psn`.
    pub fn rewind_to_front(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.wqe_index = 0;
        self.packet_index = 0;
    }
}

/// Sends as many request packets as the window and the queue allow. Call after posting, after
/// the window opens (an ACK) and after a timer fires.
pub fn run(qp: &mut TransportQp, env: &Env<'_>, out: &mut Outputs) {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd) || qp.timers.rnr_retry_at_ns.is_some() {
        return;
    }
    let Some(path) = qp.path else { return };
    let mtu = qp.attr.path_mtu.bytes() as u64;
    loop {
        if qp.req.next_psn.diff(qp.comp.una) >= MAX_UNACKED_PSNS {
            break;
        }
        let index = qp.req.wqe_index;
        let pd = qp.pd;
        let next_psn = qp.req.next_psn;
        let Some(wqe) = qp.sq.get_mut(index) else {
            break;
        };
        if wqe.status.is_some() {
            // A WQE that failed locally: it completes in order, once all before it did.
            if index == 0 {
                completer::fail_front(qp, None, out);
            }
            break;
        }
        if wqe.packet_count == 0 {
            if wqe.data.is_none() {
                let mut data = Vec::with_capacity(wqe.length as usize);
                if env.mem.gather(pd, &wqe.sges, &mut data).is_err() {
                    wqe.status = Some(WcStatus::LocProtErr);
                    continue;
                }
                wqe.data = Some(data);
            }
            wqe.first_psn = next_psn;
            wqe.packet_count = wqe.length.div_ceil(mtu).max(1) as u32;
        }
        let packet_index = qp.req.packet_index;
        let offset = packet_index as u64 * mtu;
        let len = (wqe.length - offset.min(wqe.length)).min(mtu) as usize;
        let is_first = packet_index == 0;
        let is_last = packet_index + 1 == wqe.packet_count;
        let position = match (is_first, is_last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        };
        let Some(opcode) = request_opcode(qp.qp_type, wqe.opcode, position) else {
            wqe.status = Some(WcStatus::LocQpOpErr);
            continue;
        };
        let ack_req = qp.qp_type == QpType::Rc
            && (is_last || qp.req.packets_since_ack_req + 1 >= MAX_PACKETS_PER_ACK);
        let data = wqe.data.as_deref().unwrap_or(&[]);
        let payload = &data[offset as usize..offset as usize + len];
        let mut repr = RoceRepr::new(
            BthRepr {
                solicited: wqe.solicited && is_last,
                ack_req,
                ..BthRepr::new(opcode, qp.attr.dest_qp_num, next_psn)
            },
            payload,
        );
        repr.immdt = (is_last && wqe.opcode.has_imm()).then_some(wqe.imm_data);
        let Some(packet) = OutPacket::build(&path, &repr) else {
            wqe.status = Some(WcStatus::LocQpOpErr);
            continue;
        };
        out.packets.push(packet);
        qp.counters.sent_requests += 1;
        if next_psn.diff(qp.req.high_psn) < 0 {
            qp.counters.retransmitted_packets += 1;
        } else {
            qp.req.high_psn = next_psn.next();
        }
        qp.req.packets_since_ack_req = if ack_req {
            0
        } else {
            qp.req.packets_since_ack_req + 1
        };
        qp.req.next_psn = next_psn.next();
        if is_last {
            qp.req.wqe_index += 1;
            qp.req.packet_index = 0;
        } else {
            qp.req.packet_index += 1;
        }
        if qp.qp_type == QpType::Rc && qp.timers.retransmit_at_ns.is_none() {
            qp.timers.retransmit_at_ns = ack_timeout_ns(qp.attr.timeout).map(|t| env.now_ns + t);
        }
    }
}

/// The BTH opcode of packet `position` of a message of `op` on a `qp_type` QP.
pub fn request_opcode(qp_type: QpType, op: WrOpcode, position: Position) -> Option<Opcode> {
    use Position::*;
    let rc = match (op, position) {
        (WrOpcode::Send | WrOpcode::SendWithImm, First) => Opcode::RC_SEND_FIRST,
        (WrOpcode::Send | WrOpcode::SendWithImm, Middle) => Opcode::RC_SEND_MIDDLE,
        (WrOpcode::Send, Last) => Opcode::RC_SEND_LAST,
        (WrOpcode::SendWithImm, Last) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (WrOpcode::Send, Only) => Opcode::RC_SEND_ONLY,
        (WrOpcode::SendWithImm, Only) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        _ => return None,
    };
    match qp_type {
        QpType::Rc => Some(rc),
        // UC opcodes are the RC ones with transport bits 001 (0x20 + the same low bits).
        QpType::Uc => Some(Opcode(0x20 | rc.0)),
        QpType::Ud => match (op, position) {
            (WrOpcode::Send, Only) => Some(Opcode::UD_SEND_ONLY),
            (WrOpcode::SendWithImm, Only) => Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE),
            _ => None,
        },
    }
}
