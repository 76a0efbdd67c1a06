//! The active side: rdma_connect sends a REQ; a REP moves the QP to RTR and RTS, sends the
//! RTU and reports ESTABLISHED; an MRA stretches the wait; a REJ reports REJECTED. Also
//! the REJ handling of both sides.

use std::net::IpAddr;

use super::config::private_data_max;
use super::conn::{Conn, ConnState, PathParams};
use super::manager::CmManager;
use super::timing::{ack_timeout, mra_timeout_ns, req_timeout_ns};
use super::types::{CmError, CmEventKind, CmId, QpRequest, Rejection, Role};
use crate::wire::cm::{
    ip_service_id, ip_to_gid, msg_code, rej_reason, roce_flow_label, CmMad, CmMessage, CmaHdr,
    MraRepr, PortSpace, RejRepr, RepRepr, ReqRepr, RtuRepr, CMA_HDR_LEN,
};

/// What rdma_connect needs (rdma_conn_param plus the addresses route resolution found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The passive side's address.
    pub peer: IpAddr,
    /// Port space of the service (TCP for RC).
    pub port_space: PortSpace,
    /// The service port connected to.
    pub dst_port: u16,
    /// This side's (ephemeral) port, sent in rdma_cm's header.
    pub src_port: u16,
    /// The local QP, in INIT.
    pub qpn: u32,
    /// Incoming RDMA READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests this side issues in parallel.
    pub initiator_depth: u8,
    /// Transport retry count (0..=7).
    pub retry_count: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU (IBV_MTU_* enum, 1..=5).
    pub path_mtu: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// User private data, at most 56 bytes.
    pub private_data: Vec<u8>,
    /// The QP's local ACK timeout at RTS (RDMA_OPTION_ID_ACK_TIMEOUT, 0..=31); None:
    /// the path's, as rdma_cm computes it. The REQ carries the path's either way.
    pub qp_ack_timeout: Option<u8>,
    /// The application moves its QP itself (an id without a QP, librdmacm's
    /// CONNECT_RESPONSE and rdma_establish): no QP moves are asked for.
    pub manual_qp: bool,
}

impl CmManager {
    /// Starts a connection: sends a REQ. The outcome arrives as exactly one of
    /// `Established`, `Rejected` or `Unreachable` on the returned handle.
    pub fn connect(&mut self, now_ns: u64, p: &ConnectParams) -> Result<CmId, CmError> {
        if p.private_data.len() > private_data_max::CONNECT {
            return Err(CmError::PrivateDataTooLong {
                got: p.private_data.len(),
                max: private_data_max::CONNECT,
            });
        }
        if p.port_space == PortSpace::Udp {
            return Err(CmError::BadArgument("UDP port space resolves with SIDR"));
        }
        if p.retry_count > 7
            || p.rnr_retry_count > 7
            || !(1..=5).contains(&p.path_mtu)
            || p.qp_ack_timeout.is_some_and(|t| t > 31)
        {
            return Err(CmError::BadArgument("retry counts 0..=7, path MTU 1..=5"));
        }
        if p.qpn == 0 || p.qpn > 0x00ff_ffff {
            return Err(CmError::BadArgument("QP number"));
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(CmError::TableFull("connection"));
        }
        let local_id = self.new_comm_id()?;
        let rq_psn = self.ids.psn();
        let cfg = &self.cfg;
        let path = PathParams {
            remote_gid: ip_to_gid(p.peer),
            flow_label: roce_flow_label(p.src_port, p.dst_port),
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
            path_mtu: p.path_mtu,
            ack_timeout: ack_timeout(cfg.ca_ack_delay, cfg.packet_life_time),
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
        };
        let mut req = ReqRepr {
            local_comm_id: local_id,
            service_id: ip_service_id(p.port_space, p.dst_port),
            local_ca_guid: cfg.ca_guid,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            starting_psn: rq_psn,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: p.retry_count,
            pkey: crate::wire::cm::mad::DEFAULT_PKEY,
            path_mtu: p.path_mtu,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: cfg.max_cm_retries,
            srq: u8::from(p.srq),
            primary_local_lid: 0xffff,
            primary_remote_lid: 0xffff,
            primary_local_gid: ip_to_gid(cfg.local_addr),
            primary_remote_gid: path.remote_gid,
            primary_flow_label: path.flow_label,
            primary_hop_limit: path.hop_limit,
            primary_local_ack_timeout: path.ack_timeout,
            ..ReqRepr::default()
        };
        CmaHdr {
            src_port: p.src_port,
            src_addr: cfg.local_addr,
            dst_addr: p.peer,
        }
        .emit(&mut req.private_data)
        .map_err(|_| CmError::BadArgument("local and peer address families differ"))?;
        req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + p.private_data.len()]
            .copy_from_slice(&p.private_data);
        let timeout_ns = req_timeout_ns(cfg.packet_life_time, cfg.cm_response_timeout);
        let tid = self.form_tid(local_id);
        let mut conn = Conn {
            state: ConnState::ReqSent,
            role: Role::Active,
            peer: p.peer,
            service_id: req.service_id,
            local_id,
            remote_id: 0,
            local_qpn: p.qpn,
            remote_qpn: 0,
            tid,
            sq_psn: 0,
            rq_psn,
            path,
            qp_ack_timeout: p.qp_ack_timeout,
            manual_qp: p.manual_qp,
            srq: p.srq,
            timeout_ns,
            retries_left: 0,
            max_retries: cfg.max_cm_retries,
            deadline_ns: None,
            last_sent: None,
            quiet: false,
        };
        let bytes = self.send(p.peer, &CmMad::send(tid, CmMessage::Req(req)));
        conn.arm(now_ns, timeout_ns, bytes);
        self.insert_conn(conn)?;
        Ok(CmId(local_id))
    }

    pub(super) fn on_rep(&mut self, from: IpAddr, tid: u64, rep: &RepRepr) {
        let id = rep.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| c.peer == from) else {
            // The kernel answers a REP for no connection with REJ "invalid comm ID".
            self.counters.unmatched += 1;
            self.send_rej(
                from,
                tid,
                (0, rep.local_comm_id),
                msg_code::REP,
                rej_reason::INVALID_COMM_ID,
                &[],
            );
            return;
        };
        match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd => {}
            // The application is still moving its QP: the RTU follows its establish.
            ConnState::RepRcvd if c.remote_id == rep.local_comm_id => {
                self.counters.duplicate_reps += 1;
                return;
            }
            ConnState::Established if c.remote_id == rep.local_comm_id => {
                // Our RTU was lost: send it again.
                self.counters.duplicate_reps += 1;
                let (peer, rtu) = (c.peer, c.last_sent.clone());
                if let Some(rtu) = rtu {
                    self.send_bytes(peer, rtu);
                }
                return;
            }
            _ => {
                self.counters.out_of_state += 1;
                return;
            }
        }
        let c = self.conns.get_mut(&id).expect("checked above");
        c.remote_id = rep.local_comm_id;
        c.remote_qpn = rep.local_qpn;
        c.sq_psn = rep.starting_psn;
        c.path.initiator_depth = c.path.initiator_depth.min(rep.responder_resources);
        c.path.responder_resources = c.path.responder_resources.min(rep.initiator_depth);
        c.path.ack_timeout =
            ack_timeout(rep.target_ack_delay, c.path.ack_timeout.saturating_sub(1));
        c.path.rnr_retry_count = rep.rnr_retry_count;
        c.deadline_ns = None;
        if c.manual_qp {
            c.state = ConnState::RepRcvd;
            self.emit_event(
                id,
                CmEventKind::ConnectResponse {
                    remote_qpn: rep.local_qpn,
                    private_data: rep.private_data.to_vec(),
                },
            );
            return;
        }
        c.state = ConnState::Established;
        let (qpn, rtr, rts, peer, tid) = (c.local_qpn, c.rtr_attrs(), c.rts_attrs(), c.peer, c.tid);
        let rtu = RtuRepr {
            local_comm_id: id,
            remote_comm_id: rep.local_comm_id,
            ..RtuRepr::default()
        };
        self.modify_qp(id, QpRequest::Rtr { qpn, attrs: rtr });
        self.modify_qp(id, QpRequest::Rts { qpn, attrs: rts });
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::Rtu(rtu)));
        let c = self.conns.get_mut(&id).expect("checked above");
        c.last_sent = Some(Box::new(bytes));
        self.counters.established += 1;
        self.emit_event(
            id,
            CmEventKind::Established {
                remote_qpn: rep.local_qpn,
                private_data: rep.private_data.to_vec(),
            },
        );
    }

    /// rdma_establish: the application moved its QP after CONNECT_RESPONSE; sends the
    /// RTU. The connection is established (no event: the application knows).
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        if c.state != ConnState::RepRcvd {
            return Err(CmError::InvalidState(c.state.name()));
        }
        c.state = ConnState::Established;
        let (peer, tid, remote_id) = (c.peer, c.tid, c.remote_id);
        let rtu = RtuRepr {
            local_comm_id: id.0,
            remote_comm_id: remote_id,
            ..RtuRepr::default()
        };
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::Rtu(rtu)));
        let c = self.conn_mut(id)?;
        c.last_sent = Some(Box::new(bytes));
        self.counters.established += 1;
        Ok(())
    }

    pub(super) fn on_mra(&mut self, now_ns: u64, from: IpAddr, mra: &MraRepr) {
        let id = mra.remote_comm_id;
        if !self.matching_conn(from, id, mra.local_comm_id) {
            return;
        }
        let c = self.conns.get_mut(&id).expect("matched");
        let fits = match (c.state, mra.message_mraed) {
            (ConnState::ReqSent, msg_code::REQ) => {
                c.state = ConnState::MraReqRcvd;
                true
            }
            (ConnState::RepSent, msg_code::REP) => true,
            _ => false,
        };
        if !fits {
            self.counters.out_of_state += 1;
            return;
        }
        c.timeout_ns = mra_timeout_ns(mra.service_timeout, c.path.ack_timeout);
        c.deadline_ns = Some(now_ns.saturating_add(c.timeout_ns));
    }

    pub(super) fn on_rej(&mut self, from: IpAddr, rej: &RejRepr) {
        self.counters.rejects_received += 1;
        let id = rej.remote_comm_id;
        if !self.matching_conn(from, id, rej.local_comm_id) {
            return;
        }
        let c = &self.conns[&id];
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::ReqRcvd
            | ConnState::RepSent => {
                let (qpn, accepted) = (c.local_qpn, c.state != ConnState::ReqRcvd);
                if accepted {
                    self.modify_qp(id, QpRequest::Err { qpn });
                }
                self.emit_event(
                    id,
                    CmEventKind::Rejected(Rejection {
                        reason: rej.reason,
                        private_data: rej.private_data.to_vec(),
                    }),
                );
                self.free_conn(id);
            }
            _ => self.counters.out_of_state += 1,
        }
    }

    /// Sends a REJ that answers message `what` (msg_code) with `reason`; `ids` are the
    /// sender's and the receiver's communication IDs; `private_data` is at most 148 bytes
    /// (checked by callers).
    pub(super) fn send_rej(
        &mut self,
        to: IpAddr,
        tid: u64,
        (local_id, remote_id): (u32, u32),
        what: u8,
        reason: u16,
        private_data: &[u8],
    ) {
        let mut rej = RejRepr {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: what,
            reason,
            ..RejRepr::default()
        };
        rej.private_data[..private_data.len()].copy_from_slice(private_data);
        self.counters.rejects_sent += 1;
        self.send(to, &CmMad::send(tid, CmMessage::Rej(rej)));
    }
}
