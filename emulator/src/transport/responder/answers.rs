//! The responder's answers: ACKs, NAKs (and the failure they report), RNR NAKs, atomic
//! ACKs and empty READ responses, the lazy ACK it owes, and the receive completions and
//! message count of what it executed.

use softverbs_api::{
    AsyncElement, AsyncEvent, AsyncEventKind, QpState, QpType, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

use crate::net::OutPacket;
use crate::transport::env::Env;
use crate::transport::outputs::{Completion, CompletionTarget, Outputs};
use crate::transport::qp::TransportQp;
use crate::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, NakCode, Opcode, OpcodeInfo, Psn, RoceRepr,
};

/// The answer to ATOMIC WRITE and FLUSH: a READ RESPONSE ONLY without payload.
pub(super) fn send_empty_read_response(qp: &mut TransportQp, psn: Psn, out: &mut Outputs) {
    let opcode = Opcode::RC_RDMA_READ_RESPONSE_ONLY;
    let mut repr = RoceRepr::new(BthRepr::new(opcode, qp.attr.dest_qp_num, psn), &[]);
    repr.aeth = Some(AethRepr::ack(qp.resp.msn));
    emit(qp, &repr, out);
}

/// The request at `pkt`'s PSN was executed: move on, and acknowledge if asked to.
pub(super) fn accept(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    qp.resp.epsn = psn.next();
    if qp.qp_type != QpType::Rc {
        return;
    }
    if pkt.bth.ack_req {
        send_ack(qp, psn, AethRepr::ack(qp.resp.msn), out);
    } else if info.is_last() {
        // The requester coalesces: this ACK is owed, but nobody waits for it. Only a
        // message's end is owed one, as rxe acknowledges: an unasked ACK of a FIRST or
        // MIDDLE packet can cover all a kernel rxe requester has sent while it waits for
        // a wakeup it missed, leaving it no timer to recover with (docs/rxe-lab.md).
        out.owes_lazy_ack |= qp.resp.lazy_ack.is_none();
        qp.resp.lazy_ack = Some((psn, qp.resp.msn));
    }
}

/// Sends the ACK owed for requests accepted without an ACK request, if any is owed still:
/// the driver calls it for the QPs that [`Outputs::owes_lazy_ack`] named, once the traffic
/// pauses. Without it, such a requester's last unsignaled messages would wait for its
/// retransmission timer.
pub fn send_lazy_ack(qp: &mut TransportQp, out: &mut Outputs) {
    let Some((psn, msn)) = qp.resp.lazy_ack.take() else {
        return;
    };
    if matches!(
        qp.state(),
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    ) {
        send_ack(qp, psn, AethRepr::ack(msn), out);
    }
}

/// Completes a receive WQE (a SEND, or a WRITE with immediate) and counts the message.
pub(super) fn complete_recv(
    qp: &mut TransportQp,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
    out: &mut Outputs,
) {
    let mut wc = WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        qp_num: qp.qpn,
        src_qp: qp.attr.dest_qp_num,
        ..WorkCompletion::default()
    };
    if let Some(imm) = imm {
        wc.imm_data = imm;
        wc.wc_flags = WcFlags::WITH_IMM;
    }
    out.completions.push(Completion {
        target: CompletionTarget::Recv,
        wc,
    });
    count_message(qp);
}

/// One more request message completed at the responder: the MSN that ACKs and responses
/// carry counts them, modulo 2^24.
pub(super) fn count_message(qp: &mut TransportQp) {
    qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
}

/// Tells the requester to wait `min_rnr_timer` and send the request again.
pub(super) fn send_rnr_nak(qp: &mut TransportQp, psn: Psn, out: &mut Outputs) {
    qp.counters.rnr_naks_sent += 1;
    let nak = AethRepr::rnr_nak(qp.attr.min_rnr_timer, qp.resp.msn);
    send_ack(qp, psn, nak, out);
}

/// Answers `psn` with a NAK, completes the receive WQE in progress (if any) with the given
/// status, and moves the QP to ERR.
pub(super) fn nak_and_fail(
    qp: &mut TransportQp,
    psn: Psn,
    code: NakCode,
    failed_recv: Option<(u64, WcStatus)>,
    out: &mut Outputs,
) {
    if qp.qp_type == QpType::Rc {
        send_ack(qp, psn, AethRepr::nak(code, qp.resp.msn), out);
    }
    if qp.state() != QpState::Err {
        out.events.push(AsyncEvent {
            kind: error_event(code),
            element: AsyncElement::Qp(qp.qpn),
        });
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

/// The async event of a responder that fails a request with NAK `code` (IB spec 11.6.3, as
/// hardware reports them; rxe raises none): an access violation is the requester's
/// QP_ACCESS_ERR, an invalid request its QP_REQ_ERR, and a local failure of this side (a
/// receive buffer it cannot write) is QP_FATAL.
fn error_event(code: NakCode) -> AsyncEventKind {
    match code {
        NakCode::RemoteAccessError => AsyncEventKind::QpAccessErr,
        NakCode::InvalidRequest => AsyncEventKind::QpReqErr,
        _ => AsyncEventKind::QpFatal,
    }
}

/// Sends an ACKNOWLEDGE packet carrying `aeth` for `psn`.
pub(super) fn send_ack(qp: &mut TransportQp, psn: Psn, aeth: AethRepr, out: &mut Outputs) {
    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, qp.attr.dest_qp_num, psn),
        &[],
    );
    repr.aeth = Some(aeth);
    emit(qp, &repr, out);
}

/// Sends an ATOMIC ACKNOWLEDGE carrying the original value.
pub(super) fn send_atomic_ack(qp: &mut TransportQp, psn: Psn, orig: u64, out: &mut Outputs) {
    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, qp.attr.dest_qp_num, psn),
        &[],
    );
    repr.aeth = Some(AethRepr::ack(qp.resp.msn));
    repr.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
    emit(qp, &repr, out);
}

/// Like [`emit`], with the payload at `part` of registered memory (`None`: `repr`'s own):
/// left there for a driver that reads it at send time, copied in otherwise. A part whose
/// region went since it was checked sends nothing: the requester retries and meets the
/// check again.
pub(super) fn emit_from_memory(
    qp: &mut TransportQp,
    repr: &RoceRepr<'_>,
    part: Option<crate::memory::LocalSlice>,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let (Some(part), Some(path)) = (part, qp.path) else {
        return emit(qp, repr, out);
    };
    let packet = if env.payload_by_reference {
        OutPacket::build_by_reference(&path, repr, part)
    } else {
        OutPacket::build_filled(&path, repr, |buf| env.mem.read_slice(&part, buf))
            .ok()
            .flatten()
    };
    push_response(qp, repr, packet, out);
}

pub(super) fn emit(qp: &mut TransportQp, repr: &RoceRepr<'_>, out: &mut Outputs) {
    let Some(path) = qp.path else { return };
    push_response(qp, repr, OutPacket::build(&path, repr), out);
}

fn push_response(
    qp: &mut TransportQp,
    repr: &RoceRepr<'_>,
    packet: Option<OutPacket>,
    out: &mut Outputs,
) {
    if repr.aeth.is_some() {
        // Every ACK, NAK and response with an AETH acknowledges all requests before it.
        qp.resp.lazy_ack = None;
    }
    if let Some(packet) = packet {
        qp.counters.sent_responses += 1;
        out.packets.push(packet);
    }
}
