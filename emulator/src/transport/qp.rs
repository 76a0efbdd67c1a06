//! One QP's transport state and the calls that drive it: post, modify, packet in, timer.

use softverbs_api::{
    AsyncElement, AsyncEvent, AsyncEventKind, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType,
    WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

use super::completer::CompleterState;
use super::counters::Counters;
use super::outputs::{Completion, CompletionTarget, Outputs};
use super::requester::RequesterState;
use super::responder::ResponderState;
use super::timers::QpTimers;
use super::wqe::{RecvWqe, SendWqe, WorkQueue};
pub use crate::net::packet::PathInfo;
use crate::wire::{rc_udp_src_port, ud_udp_src_port, Psn};

/// UDP port of RoCEv2.
pub const ROCE_UDP_PORT: u16 = 4791;

/// The transport state of one QP.
#[derive(Debug)]
pub struct TransportQp {
    /// QP number.
    pub qpn: u32,
    /// Transport type.
    pub qp_type: QpType,
    /// Protection domain: every memory access of this QP is checked against it.
    pub pd: u32,
    /// Every send WR completes (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Granted capacities.
    pub cap: QpCap,
    /// Current attributes (what `query_qp` returns).
    pub attr: QpAttr,
    /// Path to the peer, set at RTR (RC/UC).
    pub path: Option<PathInfo>,
    /// Send queue.
    pub sq: WorkQueue<SendWqe>,
    /// Receive queue (unused when the QP has an SRQ).
    pub rq: WorkQueue<RecvWqe>,
    /// The SRQ the QP takes receive WQEs from instead of `rq`.
    pub srq: Option<u32>,
    /// The port's active MTU: the largest UD message.
    pub port_mtu: Mtu,
    /// Requester progress.
    pub req: RequesterState,
    /// Responder progress.
    pub resp: ResponderState,
    /// Completer progress.
    pub comp: CompleterState,
    /// Armed deadlines.
    pub timers: QpTimers,
    /// Counters.
    pub counters: Counters,
    /// IBV_EVENT_COMM_EST was raised (once per connection: cleared only by RESET).
    pub comm_est_raised: bool,
    /// Set by the move to RTR of an RC / UC QP, cleared by the first request its responder
    /// accepts (see [`Outputs::first_request_accepted`]).
    pub awaiting_first_request: bool,
    /// The requester may leave messages nobody waits for without an ACK request (see
    /// `requester::asks_for_ack`); off, every message asks, as rxe's requester does.
    pub coalesce_acks: bool,
}

impl TransportQp {
    /// A QP in RESET.
    pub fn new(qpn: u32, qp_type: QpType, pd: u32, sq_sig_all: bool, cap: QpCap) -> Self {
        TransportQp {
            qpn,
            qp_type,
            pd,
            sq_sig_all,
            cap,
            attr: QpAttr {
                cap,
                port_num: 1,
                ..QpAttr::default()
            },
            path: None,
            sq: WorkQueue::new(cap.max_send_wr as usize),
            rq: WorkQueue::new(cap.max_recv_wr as usize),
            srq: None,
            port_mtu: Mtu::Mtu1024,
            req: RequesterState::default(),
            resp: ResponderState::default(),
            comp: CompleterState::default(),
            timers: QpTimers::default(),
            counters: Counters::default(),
            comm_est_raised: false,
            awaiting_first_request: false,
            coalesce_acks: true,
        }
    }

    /// The same QP taking its receive WQEs from SRQ `srq`.
    pub fn with_srq(mut self, srq: Option<u32>) -> Self {
        self.srq = srq;
        self
    }

    /// The same QP on a port whose active MTU is `mtu` (bounds UD messages).
    pub fn with_port_mtu(mut self, mtu: Mtu) -> Self {
        self.port_mtu = mtu;
        self
    }

    /// Whether the requester coalesces ACKs (on by default; see [`TransportQp::coalesce_acks`]).
    pub fn with_ack_coalescing(mut self, on: bool) -> Self {
        self.coalesce_acks = on;
        self
    }

    /// True for the transports without acknowledgements (UC, UD): a send completes once its
    /// packets are out.
    pub fn is_unreliable(&self) -> bool {
        self.qp_type != QpType::Rc
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Applies an already validated modify (see `softverbs_api::qp_transition`).
    pub fn apply_modify(&mut self, attr: &QpAttr, mask: QpAttrMask, out: &mut Outputs) {
        let a = &mut self.attr;
        macro_rules! set {
            ($bit:ident, $field:ident) => {
                if mask.contains(QpAttrMask::$bit) {
                    a.$field = attr.$field;
                }
            };
        }
        set!(ACCESS_FLAGS, qp_access_flags);
        set!(PKEY_INDEX, pkey_index);
        set!(PORT, port_num);
        set!(QKEY, qkey);
        set!(AV, ah_attr);
        set!(PATH_MTU, path_mtu);
        set!(TIMEOUT, timeout);
        set!(RETRY_CNT, retry_cnt);
        set!(RNR_RETRY, rnr_retry);
        set!(MAX_QP_RD_ATOMIC, max_rd_atomic);
        set!(MIN_RNR_TIMER, min_rnr_timer);
        set!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        set!(DEST_QPN, dest_qp_num);
        if mask.contains(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn & Psn::MASK;
            self.resp.reset(Psn::new(attr.rq_psn));
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn & Psn::MASK;
            self.req.reset(Psn::new(attr.sq_psn));
            self.comp.reset(Psn::new(attr.sq_psn));
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            self.comp.set_retries(attr.retry_cnt);
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            self.comp.set_rnr_retries(attr.rnr_retry);
        }
        if mask.contains(QpAttrMask::AV) || mask.contains(QpAttrMask::DEST_QPN) {
            self.path = Some(PathInfo {
                dst_ip: self.attr.ah_attr.dgid.to_ip(),
                udp_dst_port: self.attr.ah_attr.udp_dport.unwrap_or(ROCE_UDP_PORT),
                udp_src_port: if self.qp_type == QpType::Ud {
                    ud_udp_src_port(self.qpn)
                } else {
                    rc_udp_src_port(self.qpn, self.attr.dest_qp_num)
                },
            });
        }
        if mask.contains(QpAttrMask::STATE) {
            let next = attr.qp_state;
            match next {
                QpState::Reset => self.reset(),
                QpState::Err => self.enter_error(out),
                _ => {
                    if next == QpState::Rtr && self.qp_type != QpType::Ud {
                        self.awaiting_first_request = true;
                    }
                    self.attr.qp_state = next;
                }
            }
        }
    }

    /// Back to RESET: queues emptied without completions, as ibv_modify_qp(3) says.
    fn reset(&mut self) {
        let cap = self.cap;
        *self = TransportQp::new(self.qpn, self.qp_type, self.pd, self.sq_sig_all, cap)
            .with_srq(self.srq)
            .with_port_mtu(self.port_mtu)
            .with_ack_coalescing(self.coalesce_acks);
    }

    /// Moves the QP to ERR and flushes every outstanding WR with WR_FLUSH_ERR, in order.
    pub fn enter_error(&mut self, out: &mut Outputs) {
        if self.attr.qp_state != QpState::Err {
            self.attr.qp_state = QpState::Err;
            out.entered_error = true;
            if self.srq.is_some() {
                // Nothing more of the SRQ will be consumed by this QP (IB spec 11.6.3.3).
                out.events.push(AsyncEvent {
                    kind: AsyncEventKind::QpLastWqeReached,
                    element: AsyncElement::Qp(self.qpn),
                });
            }
        }
        self.timers = QpTimers::default();
        self.flush(out);
    }

    /// Completes every queued WR with WR_FLUSH_ERR (error completions are always generated,
    /// signaled or not).
    pub fn flush(&mut self, out: &mut Outputs) {
        let qpn = self.qpn;
        for wqe in self.sq.drain() {
            out.completions.push(Completion {
                target: CompletionTarget::Send,
                wc: WorkCompletion {
                    wr_id: wqe.wr_id,
                    status: wqe.status.unwrap_or(WcStatus::WrFlushErr),
                    opcode: send_wc_opcode(wqe.opcode),
                    qp_num: qpn,
                    ..WorkCompletion::default()
                },
            });
        }
        self.req.rewind_to_front(self.comp.una());
        if let Some(wqe) = self.resp.take_current_recv() {
            out.completions.push(recv_flush(qpn, wqe.wr_id));
        }
        for wqe in self.rq.drain() {
            out.completions.push(recv_flush(qpn, wqe.wr_id));
        }
    }

    /// Pops the oldest WQE and completes it (if signaled, or always on error).
    pub fn retire_front(&mut self, status: WcStatus, out: &mut Outputs) {
        let Some(wqe) = self.sq.pop() else { return };
        self.req.front_retired();
        if status == WcStatus::Success {
            self.counters.completed_sends += 1;
        }
        if wqe.signaled || status != WcStatus::Success {
            let byte_len = wqe.completion_bytes();
            out.completions.push(Completion {
                target: CompletionTarget::Send,
                wc: WorkCompletion {
                    wr_id: wqe.wr_id,
                    status,
                    opcode: send_wc_opcode(wqe.opcode),
                    byte_len,
                    qp_num: self.qpn,
                    ..WorkCompletion::default()
                },
            });
        }
    }

    /// The oldest WQE was local work (LOCAL_INV) that finished with `status`: complete it; a
    /// failure moves the QP to ERR.
    pub fn complete_local(&mut self, status: WcStatus, out: &mut Outputs) {
        if status == WcStatus::Success {
            self.retire_front(status, out);
        } else {
            self.fail_front(Some(status), out);
        }
    }

    /// Completes the oldest WQE with `status` (or the status it failed with locally), then moves
    /// the QP to ERR, which flushes the rest.
    pub fn fail_front(&mut self, status: Option<WcStatus>, out: &mut Outputs) {
        if let Some(front) = self.sq.front() {
            let status = status.or(front.status).unwrap_or(WcStatus::GeneralErr);
            self.retire_front(status, out);
        }
        self.enter_error(out);
    }

    /// The earliest armed deadline; call [`TransportQp::on_timer`] once it has passed.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.timers.next_deadline_ns()
    }

    /// When the local ACK timer, started at `now_ns`, expires; `None` for a timeout of 0
    /// (no timer).
    pub(crate) fn ack_deadline_ns(&self, now_ns: u64) -> Option<u64> {
        super::timers::ack_timeout_ns(self.attr.timeout).map(|t| now_ns + t)
    }
}

/// The completion opcode of a send WR opcode.
pub fn send_wc_opcode(op: softverbs_api::WrOpcode) -> WcOpcode {
    use softverbs_api::WrOpcode::*;
    match op {
        Send | SendWithImm | SendWithInv => WcOpcode::Send,
        RdmaWrite | RdmaWriteWithImm => WcOpcode::RdmaWrite,
        RdmaRead => WcOpcode::RdmaRead,
        AtomicCmpAndSwp => WcOpcode::CompSwap,
        AtomicFetchAndAdd => WcOpcode::FetchAdd,
        LocalInv => WcOpcode::LocalInv,
        BindMw => WcOpcode::BindMw,
        Tso => WcOpcode::Tso,
        AtomicWrite => WcOpcode::AtomicWrite,
        Flush => WcOpcode::Flush,
    }
}

fn recv_flush(qpn: u32, wr_id: u64) -> Completion {
    Completion {
        target: CompletionTarget::Recv,
        wc: WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode: WcOpcode::Recv,
            qp_num: qpn,
            wc_flags: WcFlags::empty(),
            ..WorkCompletion::default()
        },
    }
}
