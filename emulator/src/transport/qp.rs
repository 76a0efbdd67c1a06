//! One QP's transport state and the calls that drive it: post, modify, packet in, timer.

use softverbs_api::{
    backend::PostError, AsyncElement, AsyncEvent, AsyncEventKind, Mtu, QpAttr, QpAttrMask, QpCap,
    QpState, QpType, RecvWr, SendFlags, SendWr, VerbsError, VerbsResult, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};

use super::completer::CompleterState;
use super::counters::Counters;
use super::env::Env;
use super::outputs::{Completion, CompletionTarget, Outputs};
use super::requester::RequesterState;
use super::responder::ResponderState;
use super::timers::QpTimers;
use super::validate::{check_recv_wr, check_send_wr};
use super::wqe::{RecvWqe, SendWqe, SgeList, UdTarget, WorkQueue};
use super::{completer, requester, responder};
pub use crate::net::packet::PathInfo;
use crate::wire::{rc_udp_src_port, ud_udp_src_port, Psn, RoceRepr};

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
            self.comp.retries_left = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            self.comp.rnr_retries_left = attr.rnr_retry;
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
                _ => self.attr.qp_state = next,
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
        self.req.rewind_to_front(self.comp.una);
        if let Some(recv) = self.resp.current.take() {
            out.completions.push(recv_flush(qpn, recv.wqe.wr_id));
        }
        for wqe in self.rq.drain() {
            out.completions.push(recv_flush(qpn, wqe.wr_id));
        }
    }

    /// `ibv_post_send`: checks and queues each WR, then lets the requester send what it can.
    pub fn post_send(
        &mut self,
        wrs: &[SendWr],
        env: &Env<'_>,
        out: &mut Outputs,
    ) -> Result<(), PostError> {
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.queue_send(wr, env) {
                result = Err(PostError { index, error });
                break;
            }
        }
        if self.state() == QpState::Err {
            self.flush(out);
        } else {
            requester::run(self, env, out);
        }
        result
    }

    fn queue_send(&mut self, wr: &SendWr, env: &Env<'_>) -> VerbsResult<()> {
        check_send_wr(self.qp_type, self.state(), &self.cap, wr)?;
        let is_rd_atomic = matches!(
            wr.opcode,
            softverbs_api::WrOpcode::RdmaRead
                | softverbs_api::WrOpcode::AtomicCmpAndSwp
                | softverbs_api::WrOpcode::AtomicFetchAndAdd
                | softverbs_api::WrOpcode::AtomicWrite
        );
        if is_rd_atomic && self.attr.max_rd_atomic == 0 && self.state() != QpState::Err {
            // It could never be issued: refuse it rather than let it wait forever.
            return Err(VerbsError::inval(
                "RDMA READ / atomic on a QP whose max_rd_atomic is 0",
            ));
        }
        if self.sq.is_full() {
            return Err(VerbsError::nomem(format!(
                "send queue full ({} WRs)",
                self.cap.max_send_wr
            )));
        }
        let ud = if self.qp_type == QpType::Ud {
            Some(self.ud_target(wr, env)?)
        } else {
            None
        };
        let inline = wr.send_flags.contains(SendFlags::INLINE);
        let data = if inline {
            // Inline data is read now, so the caller may reuse the buffer on return. The
            // emulator reads process memory only through the MR table, so (stricter than
            // ibv_post_send(3)) the lkey of an inline SGE must be valid too.
            let mut data = Vec::with_capacity(wr.total_length() as usize);
            env.mem
                .gather(self.pd, &wr.sg_list, &mut data)
                .map_err(|e| VerbsError::inval(format!("inline data not readable: {e}")))?;
            Some(data)
        } else {
            None
        };
        let wqe = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled: self.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
            solicited: wr.send_flags.contains(SendFlags::SOLICITED),
            imm_data: wr.imm_data,
            invalidate_rkey: wr.invalidate_rkey,
            remote: wr.remote,
            sges: if inline {
                SgeList::new()
            } else {
                SgeList::from_slice(&wr.sg_list)
            },
            data,
            length: wr.total_length(),
            first_psn: Psn::default(),
            packet_count: 0,
            psn_count: 0,
            resp_packets: 0,
            swap_add: if wr.opcode == softverbs_api::WrOpcode::AtomicCmpAndSwp {
                wr.swap
            } else {
                wr.compare_add
            },
            compare: wr.compare_add,
            fenced: wr.send_flags.contains(SendFlags::FENCE),
            flush: wr.flush,
            ud,
            bind: wr.bind_mw,
            status: None,
        };
        self.sq
            .push(wqe)
            .map_err(|_| VerbsError::nomem("send queue full"))
    }

    /// Where a UD send goes: its address handle, the remote QPN and the Q_Key (a Q_Key with
    /// the high bit set means the QP's own, as the IB spec says). The message must fit in one
    /// packet of the port's MTU.
    fn ud_target(&self, wr: &SendWr, env: &Env<'_>) -> VerbsResult<UdTarget> {
        let dest = wr
            .ud
            .ok_or_else(|| VerbsError::inval("a UD send needs a destination (address handle)"))?;
        let av = env
            .ahs
            .and_then(|ahs| ahs.get(dest.ah))
            .ok_or_else(|| VerbsError::inval(format!("no address handle {}", dest.ah)))?;
        if av.pd != self.pd {
            return Err(VerbsError::inval(format!(
                "address handle {} belongs to PD {}, the QP to PD {}",
                dest.ah, av.pd, self.pd
            )));
        }
        let length = wr.total_length();
        let mtu = u64::from(self.port_mtu.bytes());
        if length > mtu {
            return Err(VerbsError::inval(format!(
                "UD message of {length} bytes exceeds the MTU {mtu}"
            )));
        }
        if dest.remote_qpn > Psn::MASK {
            return Err(VerbsError::inval(format!(
                "remote QPN {:#x} is beyond 24 bits",
                dest.remote_qpn
            )));
        }
        let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
            self.attr.qkey
        } else {
            dest.remote_qkey
        };
        Ok(UdTarget {
            path: PathInfo {
                dst_ip: av.dst_ip,
                udp_dst_port: av.udp_dst_port,
                udp_src_port: ud_udp_src_port(self.qpn),
            },
            dest_qpn: dest.remote_qpn,
            qkey,
        })
    }

    /// `ibv_post_recv`: checks and queues each WR.
    pub fn post_recv(&mut self, wrs: &[RecvWr], out: &mut Outputs) -> Result<(), PostError> {
        if self.srq.is_some() {
            return Err(PostError {
                index: 0,
                error: VerbsError::inval(
                    "this QP takes its receive WRs from an SRQ: post them with post_srq_recv",
                ),
            });
        }
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            let checked = check_recv_wr(self.state(), &self.cap, wr).and_then(|()| {
                self.rq.push(RecvWqe::from_wr(wr)).map_err(|_| {
                    VerbsError::nomem(format!("receive queue full ({} WRs)", self.cap.max_recv_wr))
                })
            });
            if let Err(error) = checked {
                result = Err(PostError { index, error });
                break;
            }
        }
        if self.state() == QpState::Err {
            self.flush(out);
        }
        result
    }

    /// A parsed packet addressed to this QP (its ICRC already verified by the caller).
    pub fn on_packet(&mut self, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
        self.counters.received_packets += 1;
        let Some(info) = pkt.bth.opcode.info() else {
            self.counters.dropped_packets += 1;
            return;
        };
        if info.is_request {
            if self.state() == QpState::Rtr && !self.comm_est_raised {
                // The first request to reach a QP in RTR: communication is established (IB
                // spec 11.6.3; what lets a passive side whose RTU got lost move on to RTS).
                self.comm_est_raised = true;
                out.events.push(AsyncEvent {
                    kind: AsyncEventKind::CommEst,
                    element: AsyncElement::Qp(self.qpn),
                });
            }
            // The engine marks the receive completion of this packet solicited (it is the
            // last packet of its message when the requester set SE).
            out.solicited = pkt.bth.solicited;
            responder::on_request(self, pkt, env, out);
        } else {
            completer::on_response(self, pkt, env, out);
            requester::run(self, env, out);
        }
    }

    /// Fires whatever deadline has passed at `env.now_ns()`.
    pub fn on_timer(&mut self, env: &Env<'_>, out: &mut Outputs) {
        completer::on_timer(self, env, out);
        requester::run(self, env, out);
    }

    /// Sends the ACK the responder owes for requests that asked for none, if it still owes
    /// one (see [`Outputs::owes_lazy_ack`]).
    pub fn send_lazy_ack(&mut self, out: &mut Outputs) {
        super::responder::send_lazy_ack(self, out);
    }

    /// The earliest armed deadline; call [`TransportQp::on_timer`] once it has passed.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.timers.next_deadline_ns()
    }

    /// When the local ACK timer, started at `now_ns`, expires; `None` for a timeout of 0
    /// (no timer).
    pub(crate) fn ack_deadline_ns(&self, now_ns: u64) -> Option<u64> {
        super::syndrome::ack_timeout_ns(self.attr.timeout).map(|t| now_ns + t)
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
