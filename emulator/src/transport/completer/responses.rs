//! The completer's work: consumes ACKs, NAKs, READ responses and atomic ACKs, retires WQEs as
//! completions, and decides on retransmission (go-back-N) and retry exhaustion.

use softverbs_api::{AccessFlags, QpState, WcStatus, WrOpcode};

use crate::transport::completer::CompleterPhase;
use crate::transport::env::Env;
use crate::transport::outputs::Outputs;
use crate::transport::qp::TransportQp;
use crate::transport::timers::{expired, rnr_timer_ns};
use crate::wire::{AethKind, NakCode, OpKind, Psn, RoceRepr};

/// A retry count of 7 never runs out (as in rxe, for both `retry_cnt` and `rnr_retry`).
pub const INFINITE_RETRIES: u8 = 7;

/// A response packet for this QP: ACK / NAK, READ response or atomic ACK.
pub fn on_response(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd | QpState::Sqe) {
        qp.counters.dropped_packets += 1;
        return;
    }
    let psn = pkt.bth.psn;
    // A response must name a PSN we have sent and not yet seen acknowledged.
    let in_window = psn.diff(qp.comp.una) >= 0 && psn.diff(qp.req.next_psn()) < 0;
    let Some(info) = pkt.bth.opcode.info() else {
        qp.counters.dropped_packets += 1;
        return;
    };
    if !in_window {
        qp.counters.dropped_packets += 1;
        return;
    }
    let aeth_kind = pkt.aeth.map(|a| a.kind());
    match (info.kind, aeth_kind) {
        (OpKind::ReadResponse, None | Some(AethKind::Ack)) => on_read_response(qp, pkt, env, out),
        (OpKind::AtomicAck, Some(AethKind::Ack)) => on_atomic_ack(qp, pkt, env, out),
        (OpKind::Ack, Some(AethKind::Ack)) => {
            if let Some(lost) = ack_through(qp, psn, env, out) {
                // The ACK covers a READ / atomic whose response never came: ask again.
                retry_from(qp, lost, out);
            }
        }
        (OpKind::Ack, Some(AethKind::RnrNak { timer })) => {
            let resume = ack_before(qp, psn, env, out).unwrap_or(psn);
            qp.counters.rnr_naks_received += 1;
            if qp.comp.rnr_retries_left == 0 {
                qp.fail_front(Some(WcStatus::RnrRetryExcErr), out);
                return;
            }
            if qp.comp.rnr_retries_left != INFINITE_RETRIES {
                qp.comp.rnr_retries_left -= 1;
            }
            qp.req.retransmit_from(resume, &qp.sq);
            qp.timers.retransmit_at_ns = None;
            qp.timers.rnr_retry_at_ns = Some(env.now_ns() + rnr_timer_ns(timer));
        }
        (OpKind::Ack, Some(AethKind::Nak(NakCode::PsnSequenceError))) => {
            let resume = ack_before(qp, psn, env, out).unwrap_or(psn);
            qp.counters.seq_err_naks_received += 1;
            // The responder NAKs once per gap; a NAK that arrives while a retry for that gap
            // (or an RNR wait) is already under way is a consequence of it, not a new loss.
            if qp.comp.retrying() || qp.timers.rnr_retry_at_ns.is_some() {
                return;
            }
            retry_from(qp, resume, out);
        }
        (OpKind::Ack, Some(AethKind::Nak(code))) => {
            let _ = ack_before(qp, psn, env, out);
            qp.fail_front(Some(nak_status(code)), out);
        }
        _ => qp.counters.dropped_packets += 1,
    }
}

/// A READ response at `pkt.bth.psn`: lands in the oldest WQE, which must be that READ.
fn on_read_response(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    let psn = pkt.bth.psn;
    if !opcode_in_sequence(qp, pkt) {
        // rxe's check_op_seq: an opcode out of place is no answer to anything (not even
        // an implicit ACK of what came before it); the real response, or the ACK timer,
        // moves on.
        qp.counters.dropped_packets += 1;
        qp.counters.out_of_sequence_responses += 1;
        return;
    }
    let earlier_unanswered = ack_before(qp, psn, env, out).filter(|first| *first != psn);
    let mtu = qp.attr.path_mtu.bytes() as u64;
    let pd = qp.pd;
    let Some(wqe) = qp.sq.get_mut(0) else { return };
    // ATOMIC WRITE and FLUSH are answered by one empty READ RESPONSE ONLY.
    if matches!(wqe.opcode, WrOpcode::AtomicWrite | WrOpcode::Flush) {
        if wqe.first_psn == psn && wqe.packet_count > 0 && pkt.payload.is_empty() {
            complete_front(qp, WcStatus::Success, psn, env, out);
        } else {
            qp.counters.dropped_packets += 1;
        }
        return;
    }
    let into = psn.diff(wqe.first_psn);
    if wqe.opcode != WrOpcode::RdmaRead || into < 0 || into as u32 >= wqe.psn_count {
        qp.counters.dropped_packets += 1;
        // An earlier READ / atomic was skipped over: its response was lost.
        if let (Some(first), false) = (earlier_unanswered, qp.comp.retrying()) {
            retry_from(qp, first, out);
        }
        return;
    }
    let into = into as u32;
    if into < wqe.resp_packets {
        qp.counters.dropped_packets += 1; // a duplicate of a response already placed
        responses_still_coming(qp, env);
        return;
    }
    if into > wqe.resp_packets {
        // A response went missing: ask for the whole READ again.
        let first = wqe.first_psn;
        if !qp.comp.retrying() {
            retry_from(qp, first, out);
        } else {
            responses_still_coming(qp, env);
        }
        return;
    }
    let offset = into as u64 * mtu;
    let expect_len = (wqe.length - offset.min(wqe.length)).min(mtu);
    let last = into + 1 == wqe.psn_count;
    // After a partial re-request the same PSN may come as FIRST (new request) or MIDDLE (the
    // old one, late) with the same bytes, so only the length is checked; a response of the
    // wrong length is dropped and the READ asked again.
    if pkt.payload.len() as u64 != expect_len {
        qp.counters.dropped_packets += 1;
        return;
    }
    if env.mem.scatter(pd, &wqe.sges, offset, pkt.payload).is_err() {
        qp.fail_front(Some(WcStatus::LocProtErr), out);
        return;
    }
    wqe.resp_packets += 1;
    if last {
        complete_front(qp, WcStatus::Success, psn, env, out);
    } else {
        // Each in-order response acknowledges its PSN (as rxe's comp.psn advances): the
        // window moves, the ACK timer restarts and the retry budget refills, so a READ of
        // any length streams on, and a re-request starts where the responses stopped.
        if psn.next().diff(qp.comp.una) > 0 {
            qp.comp.una = psn.next();
        }
        note_progress(qp, true, env);
    }
}

/// Whether a READ response's opcode is the one its place calls for, in the sent WR whose
/// PSNs it names: for a READ, FIRST at its first PSN and MIDDLE after it, LAST at its last
/// one, ONLY for a one-packet READ; for ATOMIC WRITE and FLUSH, ONLY. A READ re-asked from a
/// later PSN is answered from there with MIDDLE ... LAST, as rxe's responder replays it.
fn opcode_in_sequence(qp: &TransportQp, pkt: &RoceRepr<'_>) -> bool {
    let psn = pkt.bth.psn;
    let Some(info) = pkt.bth.opcode.info() else {
        return false;
    };
    let wqe = (0..qp.sq.len())
        .filter_map(|i| qp.sq.get(i))
        .take_while(|w| w.packet_count > 0)
        .find(|w| {
            let into = psn.diff(w.first_psn);
            into >= 0 && (into as u32) < w.psn_count
        });
    let Some(wqe) = wqe else {
        // Not a PSN of any request sent: the caller's window checks drop it.
        return true;
    };
    let into = psn.diff(wqe.first_psn) as u32;
    match wqe.opcode {
        WrOpcode::RdmaRead => {
            info.is_first() == (into == 0) && info.is_last() == (into + 1 == wqe.psn_count)
        }
        WrOpcode::AtomicWrite | WrOpcode::Flush => info.is_first() && info.is_last(),
        _ => false,
    }
}

/// An ATOMIC ACKNOWLEDGE: the original value goes to the atomic WR's local buffer.
fn on_atomic_ack(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    let psn = pkt.bth.psn;
    let earlier_unanswered = ack_before(qp, psn, env, out).filter(|first| *first != psn);
    let Some(orig) = pkt.atomic_ack_eth.map(|a| a.orig) else {
        return;
    };
    let pd = qp.pd;
    let Some(wqe) = qp.sq.get(0) else { return };
    let is_atomic = matches!(
        wqe.opcode,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    );
    if !is_atomic || wqe.first_psn != psn || wqe.packet_count == 0 {
        qp.counters.dropped_packets += 1;
        if let (Some(first), false) = (earlier_unanswered, qp.comp.retrying()) {
            retry_from(qp, first, out);
        }
        return;
    }
    let sges = wqe.sges.clone();
    let placed = env
        .mem
        .check_sges(pd, &sges, AccessFlags::LOCAL_WRITE)
        .and_then(|_| env.mem.scatter(pd, &sges, 0, &orig.to_ne_bytes()));
    if placed.is_err() {
        qp.fail_front(Some(WcStatus::LocProtErr), out);
        return;
    }
    complete_front(qp, WcStatus::Success, psn, env, out);
}

/// Fires expired deadlines: the RNR wait ends, or the local ACK timeout retransmits.
pub fn on_timer(qp: &mut TransportQp, env: &Env<'_>, out: &mut Outputs) {
    if expired(qp.timers.rnr_retry_at_ns, env.now_ns()) {
        qp.timers.rnr_retry_at_ns = None;
    }
    if expired(qp.timers.retransmit_at_ns, env.now_ns()) {
        qp.timers.retransmit_at_ns = None;
        if qp.comp.una == qp.req.next_psn() {
            return;
        }
        qp.counters.ack_timeouts += 1;
        // A timeout always retries, even if a NAK-triggered retry was under way.
        let una = qp.comp.una;
        retry_from(qp, una, out);
    }
}

/// Takes one transport retry and goes back to `psn`; on exhaustion fails the oldest WQE
/// with RETRY_EXC_ERR.
fn retry_from(qp: &mut TransportQp, psn: Psn, out: &mut Outputs) {
    if qp.comp.retries_left == 0 {
        qp.fail_front(Some(WcStatus::RetryExcErr), out);
        return;
    }
    if qp.comp.retries_left != INFINITE_RETRIES {
        qp.comp.retries_left -= 1;
    }
    qp.comp.phase = CompleterPhase::Retrying;
    qp.req.retransmit_from(psn, &qp.sq);
}

/// A NAK, READ response or atomic ACK at `psn` acknowledges every PSN before it (responses
/// come in PSN order). Returns the first PSN of an earlier READ / atomic left unanswered.
fn ack_before(qp: &mut TransportQp, psn: Psn, env: &Env<'_>, out: &mut Outputs) -> Option<Psn> {
    ack_through(qp, psn.add(Psn::MASK), env, out)
}

/// Retires every WQE whose last PSN is at or before `psn`, stopping at a READ / atomic that
/// has not had its response. Returns that WQE's first PSN if `psn` reaches into it (its
/// response was lost: the caller retries).
fn ack_through(qp: &mut TransportQp, psn: Psn, env: &Env<'_>, out: &mut Outputs) -> Option<Psn> {
    let mut progressed = false;
    let mut lost_response = None;
    while let Some(front) = qp.sq.front() {
        let sent_whole = qp.req.sent_front_whole();
        if front.packet_count == 0 || !sent_whole || front.last_psn().diff(psn) > 0 {
            if front.expects_response() && front.packet_count > 0 && front.first_psn.diff(psn) <= 0
            {
                lost_response = Some(front.first_psn);
            }
            break;
        }
        if front.expects_response() {
            lost_response = Some(front.first_psn);
            break;
        }
        qp.retire_front(WcStatus::Success, out);
        progressed = true;
    }
    let acked_to = match lost_response {
        Some(first) => first,
        None => psn.next(),
    };
    if acked_to.diff(qp.comp.una) > 0 {
        qp.comp.una = acked_to;
        progressed = true;
    }
    note_progress(qp, progressed, env);
    lost_response
}

/// The oldest WQE got its last response at `psn`: complete it and move `una` past it.
fn complete_front(
    qp: &mut TransportQp,
    status: WcStatus,
    psn: Psn,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    qp.retire_front(status, out);
    if psn.next().diff(qp.comp.una) > 0 {
        qp.comp.una = psn.next();
    }
    note_progress(qp, true, env);
}

/// Responses of the front READ that this side already holds (duplicates) or has already
/// asked for again (after a gap) are still arriving: the ACK timer counts from the last of
/// them, so that a timeout retry never
/// queues a new burst of responses behind an old one. A retry per timeout whose burst
/// takes longer than the timeout to drain never gets a response through: in the rxe lab a
/// 4 MiB READ at MTU 1024 (4,096 responses) was asked 122 times in 8 s without progress,
/// while the receiving side, busy writing its capture, drained each burst slower than the
/// next came. Neither the retry budget nor the window moves: only forward progress does
/// that.
fn responses_still_coming(qp: &mut TransportQp, env: &Env<'_>) {
    if qp.timers.retransmit_at_ns.is_some() {
        qp.timers.retransmit_at_ns = qp.ack_deadline_ns(env.now_ns());
    }
}

/// Forward progress refills the retry budgets and ends a retry; the ACK timer restarts
/// while anything is outstanding.
fn note_progress(qp: &mut TransportQp, progressed: bool, env: &Env<'_>) {
    if progressed {
        qp.comp.phase = CompleterPhase::Steady;
        qp.comp.retries_left = qp.attr.retry_cnt;
        qp.comp.rnr_retries_left = qp.attr.rnr_retry;
    }
    qp.timers.retransmit_at_ns = if qp.comp.una == qp.req.next_psn() {
        None
    } else if progressed || qp.timers.retransmit_at_ns.is_none() {
        qp.ack_deadline_ns(env.now_ns())
    } else {
        qp.timers.retransmit_at_ns
    };
}

/// The completion status a requester reports for a NAK of kind `code`.
fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::PsnSequenceError => WcStatus::RetryExcErr,
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
    }
}
