//! The responder: checks incoming requests against the expected PSN, executes them against
//! receive WQEs and memory, and answers with ACK / NAK as rxe does.

use softverbs_api::{QpState, QpType, WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::output::{Completion, CompletionTarget, Env, OutPacket, Outputs};
use super::qp::TransportQp;
use super::wqe::RecvWqe;
use crate::wire::{AethRepr, BthRepr, NakCode, OpKind, Opcode, Psn, RoceRepr, Transport};

/// A multi-packet message being received.
#[derive(Debug, Clone)]
pub struct RecvInProgress {
    /// The receive WQE it lands in.
    pub wqe: RecvWqe,
    /// Bytes placed so far.
    pub offset: u64,
}

/// What the responder tracks.
#[derive(Debug, Clone, Default)]
pub struct ResponderState {
    /// Expected PSN of the next request.
    pub epsn: Psn,
    /// Message sequence number: requests completed (24 bits).
    pub msn: u32,
    /// The SEND being received, between its FIRST and LAST packets.
    pub current: Option<RecvInProgress>,
    /// A PSN sequence error NAK was sent for `epsn` and not yet answered by a retransmission;
    /// rxe sends one per gap, not one per out-of-order packet.
    pub nak_sent: bool,
}

impl ResponderState {
    /// Starts over at `psn` (modify with RQ_PSN).
    pub fn reset(&mut self, psn: Psn) {
        *self = ResponderState {
            epsn: psn,
            ..ResponderState::default()
        };
    }
}

/// A request packet for this QP.
pub fn on_request(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    let Some(info) = pkt.bth.opcode.info() else {
        return;
    };
    let transport_ok = matches!(
        (qp.qp_type, info.transport),
        (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
    );
    if !transport_ok
        || !matches!(
            qp.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        qp.counters.dropped_packets += 1;
        return;
    }
    let psn = pkt.bth.psn;
    let distance = psn.diff(qp.resp.epsn);
    if distance > 0 {
        // A gap: ask once for a go-back-N from the PSN we expect.
        qp.counters.dropped_packets += 1;
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            qp.counters.seq_err_naks_sent += 1;
            let epsn = qp.resp.epsn;
            send_aeth(
                qp,
                epsn,
                AethRepr::nak(NakCode::PsnSequenceError, qp.resp.msn),
                out,
            );
        }
        return;
    }
    if distance < 0 {
        // A duplicate of a request already executed: SENDs and WRITEs are acknowledged again,
        // never executed twice (C9-105).
        qp.counters.duplicate_requests += 1;
        if pkt.bth.ack_req || info.is_last() {
            let prev = qp.resp.epsn.add(Psn::MASK);
            send_aeth(qp, prev, AethRepr::ack(qp.resp.msn), out);
        }
        return;
    }
    qp.resp.nak_sent = false;
    match info.kind {
        OpKind::Send => receive_send(qp, pkt, env, out),
        _ => nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out),
    }
}

fn receive_send(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    let Some(info) = pkt.bth.opcode.info() else {
        return;
    };
    let psn = pkt.bth.psn;
    if info.is_first() {
        if qp.resp.current.is_some() {
            // The previous message never got its LAST packet.
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
            return;
        }
        let Some(wqe) = qp.rq.pop() else {
            qp.counters.rnr_naks_sent += 1;
            let timer = qp.attr.min_rnr_timer;
            send_aeth(qp, psn, AethRepr::rnr_nak(timer, qp.resp.msn), out);
            return;
        };
        qp.resp.current = Some(RecvInProgress { wqe, offset: 0 });
    }
    let Some(mut current) = qp.resp.current.take() else {
        // MIDDLE or LAST without a FIRST.
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return;
    };
    let len = pkt.payload.len() as u64;
    if current.offset + len > current.wqe.length {
        nak_and_fail(
            qp,
            psn,
            NakCode::InvalidRequest,
            Some((current.wqe.wr_id, WcStatus::LocLenErr)),
            out,
        );
        return;
    }
    if !pkt.payload.is_empty()
        && env
            .mem
            .scatter(qp.pd, &current.wqe.sges, current.offset, pkt.payload)
            .is_err()
    {
        nak_and_fail(
            qp,
            psn,
            NakCode::RemoteOperationalError,
            Some((current.wqe.wr_id, WcStatus::LocProtErr)),
            out,
        );
        return;
    }
    current.offset += len;
    if info.is_last() {
        let mut wc = WorkCompletion {
            wr_id: current.wqe.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: current.offset as u32,
            qp_num: qp.qpn,
            src_qp: qp.attr.dest_qp_num,
            ..WorkCompletion::default()
        };
        if let Some(imm) = pkt.immdt {
            wc.imm_data = imm;
            wc.wc_flags = WcFlags::WITH_IMM;
        }
        out.completions.push(Completion {
            target: CompletionTarget::Recv,
            wc,
        });
        qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    } else {
        qp.resp.current = Some(current);
    }
    qp.resp.epsn = psn.next();
    if pkt.bth.ack_req && qp.qp_type == QpType::Rc {
        send_aeth(qp, psn, AethRepr::ack(qp.resp.msn), out);
    }
}

/// Answers `psn` with a NAK, completes the receive WQE in progress (if any) with the given
/// status, and moves the QP to ERR.
fn nak_and_fail(
    qp: &mut TransportQp,
    psn: Psn,
    code: NakCode,
    failed_recv: Option<(u64, WcStatus)>,
    out: &mut Outputs,
) {
    if qp.qp_type == QpType::Rc {
        send_aeth(qp, psn, AethRepr::nak(code, qp.resp.msn), out);
    }
    if let Some((wr_id, status)) = failed_recv {
        out.completions.push(Completion {
            target: CompletionTarget::Recv,
            wc: WorkCompletion {
                wr_id,
                status,
                opcode: WcOpcode::Recv,
                qp_num: qp.qpn,
                src_qp: qp.attr.dest_qp_num,
                ..WorkCompletion::default()
            },
        });
    }
    qp.enter_error(out);
}

/// Sends an ACKNOWLEDGE packet carrying `aeth` for `psn`.
fn send_aeth(qp: &mut TransportQp, psn: Psn, aeth: AethRepr, out: &mut Outputs) {
    let Some(path) = qp.path else { return };
    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, qp.attr.dest_qp_num, psn),
        &[],
    );
    repr.aeth = Some(aeth);
    if let Some(packet) = OutPacket::build(&path, &repr) {
        qp.counters.sent_responses += 1;
        out.packets.push(packet);
    }
}
