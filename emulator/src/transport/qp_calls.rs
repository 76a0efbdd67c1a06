//! The calls that drive one QP, each running the engines in order: a post (the
//! requester sends what it can), a packet in (responder, or completer then requester), a
//! timer (completer then requester), an owed ACK.

use softverbs_api::{
    backend::PostError, AsyncElement, AsyncEvent, AsyncEventKind, QpState, QpType, RecvWr,
    SendFlags, SendWr, VerbsError, VerbsResult,
};

use super::env::Env;
use super::outputs::Outputs;
use super::qp::{PathInfo, TransportQp};
use super::validate::{check_recv_wr, check_send_wr};
use super::wqe::{RecvWqe, SendWqe, SgeList, UdTarget};
use super::{completer, requester, responder};
use crate::wire::{ud_udp_src_port, Psn, RoceRepr};

impl TransportQp {
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
            let expected = self.resp.epsn();
            responder::on_request(self, pkt, env, out);
            // Accepted (not a duplicate, a gap or refused): the expected PSN moved on.
            if self.awaiting_first_request && self.resp.epsn() != expected {
                self.awaiting_first_request = false;
                out.first_request_accepted = true;
            }
        } else {
            completer::on_response(self, pkt, env, out);
            requester::run(self, env, out);
        }
    }

    /// True while the responder has READ responses left to send. A call makes at most a
    /// burst of them ([`responder::READ_RESPONSE_BURST`]), so that memory per READ is
    /// bounded whatever its length: the driver sends what the call produced, then calls
    /// [`TransportQp::continue_responses`] while this holds, before it hands the QP its
    /// next packet (a request that comes earlier is dropped).
    pub fn responses_pending(&self) -> bool {
        self.resp.responses_pending()
    }

    /// Makes the next burst of READ responses (see [`TransportQp::responses_pending`]).
    pub fn continue_responses(&mut self, env: &Env<'_>, out: &mut Outputs) {
        responder::continue_read(self, env, out);
    }

    /// Fires whatever deadline has passed at `env.now_ns()`.
    pub fn on_timer(&mut self, env: &Env<'_>, out: &mut Outputs) {
        completer::on_timer(self, env, out);
        requester::run(self, env, out);
    }

    /// Sends the ACK the responder owes for requests that asked for none, if it still owes
    /// one (see [`Outputs::owes_lazy_ack`]).
    pub fn send_lazy_ack(&mut self, out: &mut Outputs) {
        responder::send_lazy_ack(self, out);
    }
}
