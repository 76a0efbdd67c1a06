//! The completer: consumes ACKs and NAKs, retires acknowledged WQEs as completions, and
//! decides on retransmission (go-back-N) and retry exhaustion.

use softverbs_api::{QpState, WcStatus, WorkCompletion};

use super::output::{Completion, CompletionTarget, Env, Outputs};
use super::qp::{send_wc_opcode, TransportQp};
use super::syndrome::{ack_timeout_ns, nak_status, rnr_timer_ns};
use super::timers::expired;
use crate::wire::{AethKind, NakCode, OpKind, Psn, RoceRepr};

/// A retry count of 7 never runs out (as in rxe, for both `retry_cnt` and `rnr_retry`).
pub const INFINITE_RETRIES: u8 = 7;

/// What the completer tracks.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompleterState {
    /// Oldest unacknowledged PSN.
    pub una: Psn,
    /// Transport retries left before RETRY_EXC_ERR.
    pub retries_left: u8,
    /// RNR retries left before RNR_RETRY_EXC_ERR.
    pub rnr_retries_left: u8,
    /// A go-back-N retry is under way and no ACK has advanced since: further sequence NAKs
    /// for it neither cost a retry nor rewind again (rxe's `started_retry`).
    pub retry_started: bool,
}

impl CompleterState {
    /// Starts over at `psn` (modify with SQ_PSN); retry counters are kept.
    pub fn reset(&mut self, psn: Psn) {
        self.una = psn;
    }
}

/// A response packet (ACK / NAK; later read responses and atomic ACKs) for this QP.
pub fn on_response(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd | QpState::Sqe) {
        qp.counters.dropped_packets += 1;
        return;
    }
    let psn = pkt.bth.psn;
    // A response must name a PSN we have sent and not yet seen acknowledged.
    let in_window = psn.diff(qp.comp.una) >= 0 && psn.diff(qp.req.next_psn) < 0;
    let (Some(aeth), Some(info)) = (pkt.aeth, pkt.bth.opcode.info()) else {
        qp.counters.dropped_packets += 1;
        return;
    };
    if info.kind != OpKind::Ack || !in_window {
        qp.counters.dropped_packets += 1;
        return;
    }
    match aeth.kind() {
        AethKind::Ack => {
            ack_through(qp, psn, env, out);
        }
        AethKind::RnrNak { timer } => {
            ack_through(qp, psn.add(Psn::MASK), env, out);
            qp.counters.rnr_naks_received += 1;
            if qp.comp.rnr_retries_left == 0 {
                fail_front(qp, Some(WcStatus::RnrRetryExcErr), out);
                return;
            }
            if qp.comp.rnr_retries_left != INFINITE_RETRIES {
                qp.comp.rnr_retries_left -= 1;
            }
            rewind(qp, psn);
            qp.timers.retransmit_at_ns = None;
            qp.timers.rnr_retry_at_ns = Some(env.now_ns + rnr_timer_ns(timer));
        }
        AethKind::Nak(NakCode::PsnSequenceError) => {
            ack_through(qp, psn.add(Psn::MASK), env, out);
            qp.counters.seq_err_naks_received += 1;
            // The responder NAKs once per gap; a NAK that arrives while a retry for that gap
            // (or an RNR wait) is already under way is a consequence of it, not a new loss.
            if qp.comp.retry_started || qp.timers.rnr_retry_at_ns.is_some() {
                return;
            }
            if !use_retry(qp, out) {
                return;
            }
            qp.comp.retry_started = true;
            rewind(qp, psn);
        }
        AethKind::Nak(code) => {
            ack_through(qp, psn.add(Psn::MASK), env, out);
            fail_front(qp, Some(nak_status(code)), out);
        }
        AethKind::Reserved(_) => {
            qp.counters.dropped_packets += 1;
        }
    }
}

/// Fires expired deadlines: the RNR wait ends, or the local ACK timeout retransmits.
pub fn on_timer(qp: &mut TransportQp, env: &Env<'_>, out: &mut Outputs) {
    if expired(qp.timers.rnr_retry_at_ns, env.now_ns) {
        qp.timers.rnr_retry_at_ns = None;
    }
    if expired(qp.timers.retransmit_at_ns, env.now_ns) {
        qp.timers.retransmit_at_ns = None;
        if qp.comp.una == qp.req.next_psn {
            return;
        }
        qp.counters.ack_timeouts += 1;
        // A timeout always retries, even if a NAK-triggered retry was under way.
        if use_retry(qp, out) {
            qp.comp.retry_started = true;
            let una = qp.comp.una;
            rewind(qp, una);
        }
    }
}

/// Takes one transport retry; on exhaustion fails the oldest WQE with RETRY_EXC_ERR.
fn use_retry(qp: &mut TransportQp, out: &mut Outputs) -> bool {
    if qp.comp.retries_left == 0 {
        fail_front(qp, Some(WcStatus::RetryExcErr), out);
        return false;
    }
    if qp.comp.retries_left != INFINITE_RETRIES {
        qp.comp.retries_left -= 1;
    }
    true
}

/// Retires every WQE whose last packet is at or before `psn`.
fn ack_through(qp: &mut TransportQp, psn: Psn, env: &Env<'_>, out: &mut Outputs) {
    let mut progressed = false;
    while let Some(front) = qp.sq.front() {
        let sent_whole = qp.req.wqe_index > 0;
        if front.packet_count == 0 || !sent_whole || front.last_psn().diff(psn) > 0 {
            break;
        }
        let Some(wqe) = qp.sq.pop() else { break };
        qp.req.wqe_index -= 1;
        progressed = true;
        if wqe.signaled {
            out.completions.push(Completion {
                target: CompletionTarget::Send,
                wc: WorkCompletion {
                    wr_id: wqe.wr_id,
                    status: WcStatus::Success,
                    opcode: send_wc_opcode(wqe.opcode),
                    byte_len: wqe.length as u32,
                    qp_num: qp.qpn,
                    ..WorkCompletion::default()
                },
            });
        }
    }
    if psn.next().diff(qp.comp.una) > 0 {
        qp.comp.una = psn.next();
        progressed = true;
    }
    // Forward progress (any newly acknowledged PSN) refills the retry budgets.
    if progressed {
        qp.comp.retry_started = false;
        qp.comp.retries_left = qp.attr.retry_cnt;
        qp.comp.rnr_retries_left = qp.attr.rnr_retry;
    }
    qp.timers.retransmit_at_ns = if qp.comp.una == qp.req.next_psn {
        None
    } else {
        ack_timeout_ns(qp.attr.timeout).map(|t| env.now_ns + t)
    };
}

/// Points the requester back at `psn` (go-back-N); the next `requester::run` resends from there.
fn rewind(qp: &mut TransportQp, psn: Psn) {
    for i in 0..(qp.req.wqe_index + 1).min(qp.sq.len()) {
        let Some(wqe) = qp.sq.get(i) else { break };
        if wqe.packet_count == 0 {
            break;
        }
        let into = psn.diff(wqe.first_psn);
        if into >= 0 && (into as u32) < wqe.packet_count {
            qp.req.wqe_index = i;
            qp.req.packet_index = into as u32;
            qp.req.next_psn = psn;
            return;
        }
    }
}

/// Completes the oldest WQE with `status` (or the status it failed with locally), then moves
/// the QP to ERR, which flushes the rest.
pub fn fail_front(qp: &mut TransportQp, status: Option<WcStatus>, out: &mut Outputs) {
    if let Some(wqe) = qp.sq.pop() {
        let status = status.or(wqe.status).unwrap_or(WcStatus::GeneralErr);
        out.completions.push(Completion {
            target: CompletionTarget::Send,
            wc: WorkCompletion {
                wr_id: wqe.wr_id,
                status,
                opcode: send_wc_opcode(wqe.opcode),
                qp_num: qp.qpn,
                ..WorkCompletion::default()
            },
        });
        qp.req.wqe_index = qp.req.wqe_index.saturating_sub(1);
    }
    qp.enter_error(out);
}
