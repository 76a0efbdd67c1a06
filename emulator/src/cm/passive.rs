//! The passive side: a REQ for a listened service becomes CONNECT_REQUEST; rdma_accept
//! moves the QP to RTR and RTS and sends the REP; the RTU (or the first data packet)
//! makes it ESTABLISHED; rdma_reject sends a REJ. Duplicate REQs get the REP again (or an
//! MRA while the application decides); a REQ for a connection still held gets a REJ
//! "stale connection"; a REQ nobody listens for gets a REJ "invalid service ID".

use std::net::IpAddr;

use super::config::private_data_max;
use super::conn::{Conn, ConnState, PathParams};
use super::manager::CmManager;
use super::timing::{iba_time_ns, CMA_CM_MRA_SETTING};
use super::types::{CmError, CmEventKind, CmId, QpRequest, Role};
use crate::wire::cm::{
    msg_code, parse_ip_service_id, rej_reason, CmMad, CmMessage, CmaHdr, MraRepr, PortSpace,
    RepRepr, ReqRepr, RtuRepr, CMA_HDR_LEN,
};

/// What rdma_accept needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local QP, in INIT.
    pub qpn: u32,
    /// Incoming RDMA READ/atomic requests accepted (at most what the REQ asked for).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests issued (at most what the REQ offered).
    pub initiator_depth: u8,
    /// RNR retry count the requester should use (0..=7).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// User private data, at most 196 bytes.
    pub private_data: Vec<u8>,
    /// The QP's local ACK timeout at RTS (RDMA_OPTION_ID_ACK_TIMEOUT, 0..=31); None:
    /// the path's.
    pub qp_ack_timeout: Option<u8>,
    /// The application moves its QP itself (an id without a QP, librdmacm's
    /// CONNECT_RESPONSE and rdma_establish): no QP moves are asked for.
    pub manual_qp: bool,
}

impl CmManager {
    /// A REQ from `from`; `arrival` (the time and the MAD's bytes) when it just arrived, so
    /// that one for a service nobody listens on yet may be held (`held_reqs.rs`); `None`
    /// when a held one is released.
    pub(super) fn on_req(
        &mut self,
        arrival: Option<(u64, &[u8])>,
        from: IpAddr,
        tid: u64,
        req: &ReqRepr,
    ) {
        let dup = self
            .conns
            .values()
            .find(|c| c.role == Role::Passive && c.peer == from && c.remote_id == req.local_comm_id)
            .map(|c| (c.local_id, c.state));
        if let Some((id, state)) = dup {
            self.on_duplicate_req(id, state, from, tid, req);
            return;
        }
        if let Err(reason) = self.admit_req(from, tid, req) {
            if let Some((now_ns, mad)) = arrival {
                if reason == rej_reason::INVALID_SERVICE_ID
                    && self.hold_req(now_ns, from, tid, req, mad)
                {
                    return;
                }
            }
            let ids = (0, req.local_comm_id);
            self.send_rej(from, tid, ids, msg_code::REQ, reason, &[]);
        }
    }

    /// Creates the passive connection for a new REQ and reports CONNECT_REQUEST, or says
    /// with which REJ reason the kernel would refuse it.
    fn admit_req(&mut self, from: IpAddr, tid: u64, req: &ReqRepr) -> Result<(), u16> {
        let stale = self.conns.values().any(|c| {
            c.peer == from
                && c.remote_qpn == req.local_qpn
                && matches!(c.state, ConnState::Established | ConnState::TimeWait)
        });
        if stale {
            self.counters.duplicate_reqs += 1;
            return Err(rej_reason::STALE_CONNECTION);
        }
        let listened = self.listeners.contains(&req.service_id)
            && parse_ip_service_id(req.service_id).is_none_or(|(ps, _)| ps != PortSpace::Udp);
        if !listened {
            return Err(rej_reason::INVALID_SERVICE_ID);
        }
        if req.transport_service_type > 1 {
            return Err(rej_reason::INVALID_TRANSPORT_TYPE);
        }
        let Ok(cma) = CmaHdr::parse(&req.private_data) else {
            // rdma_cm refuses a REQ without its header as a consumer reject.
            self.counters.malformed += 1;
            return Err(rej_reason::CONSUMER_REJECT);
        };
        let local_id = self.new_comm_id().map_err(|_| rej_reason::NO_RESOURCES)?;
        let rq_psn = self.ids.psn();
        let conn = Conn {
            state: ConnState::ReqRcvd,
            role: Role::Passive,
            peer: from,
            service_id: req.service_id,
            local_id,
            remote_id: req.local_comm_id,
            local_qpn: 0,
            remote_qpn: req.local_qpn,
            tid,
            // The REQ's starting PSN is what this side sends from (kernel convention).
            sq_psn: req.starting_psn,
            rq_psn,
            path: PathParams {
                remote_gid: req.primary_local_gid,
                flow_label: req.primary_flow_label,
                hop_limit: req.primary_hop_limit,
                traffic_class: req.primary_traffic_class,
                sl: req.primary_sl,
                path_mtu: req.path_mtu,
                ack_timeout: req.primary_local_ack_timeout,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
            },
            qp_ack_timeout: None,
            manual_qp: false,
            srq: false,
            timeout_ns: iba_time_ns(req.local_cm_response_timeout),
            retries_left: 0,
            max_retries: req.max_cm_retries,
            deadline_ns: None,
            last_sent: None,
            quiet: false,
        };
        self.insert_conn(conn)
            .map_err(|_| rej_reason::NO_RESOURCES)?;
        self.emit_event(
            local_id,
            CmEventKind::ConnectRequest {
                service_id: req.service_id,
                cma,
                remote_qpn: req.local_qpn,
                responder_resources: req.responder_resources,
                initiator_depth: req.initiator_depth,
                private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
            },
        );
        Ok(())
    }

    fn on_duplicate_req(
        &mut self,
        id: u32,
        state: ConnState,
        from: IpAddr,
        tid: u64,
        req: &ReqRepr,
    ) {
        self.counters.duplicate_reqs += 1;
        match state {
            // Still deciding: tell the requester to wait longer (the kernel's delayed MRA).
            ConnState::ReqRcvd => {
                let mra = MraRepr {
                    local_comm_id: id,
                    remote_comm_id: req.local_comm_id,
                    message_mraed: msg_code::REQ,
                    service_timeout: CMA_CM_MRA_SETTING,
                    ..MraRepr::default()
                };
                self.send(from, &CmMad::send(tid, CmMessage::Mra(mra)));
            }
            ConnState::RepSent => {
                if let Some(rep) = self.conns[&id].last_sent.clone() {
                    self.send_bytes(from, rep);
                }
            }
            ConnState::TimeWait => {
                self.send_rej(
                    from,
                    tid,
                    (id, req.local_comm_id),
                    msg_code::REQ,
                    rej_reason::STALE_CONNECTION,
                    &[],
                );
            }
            _ => {}
        }
    }

    /// Accepts a CONNECT_REQUEST: asks for the QP moves to RTR and RTS, sends the REP.
    /// ESTABLISHED follows on the RTU (or [`CmManager::comm_established`]).
    pub fn accept(&mut self, now_ns: u64, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        if p.private_data.len() > private_data_max::ACCEPT {
            return Err(CmError::PrivateDataTooLong {
                got: p.private_data.len(),
                max: private_data_max::ACCEPT,
            });
        }
        if p.rnr_retry_count > 7
            || p.qpn == 0
            || p.qpn > 0x00ff_ffff
            || p.qp_ack_timeout.is_some_and(|t| t > 31)
        {
            return Err(CmError::BadArgument("RNR retry count 0..=7 or QP number"));
        }
        let ack_delay = self.cfg.ca_ack_delay;
        let guid = self.cfg.ca_guid;
        let c = self.conn_mut(id)?;
        if c.state != ConnState::ReqRcvd {
            return Err(CmError::InvalidState(c.state.name()));
        }
        c.local_qpn = p.qpn;
        c.srq = p.srq;
        c.qp_ack_timeout = p.qp_ack_timeout;
        c.manual_qp = p.manual_qp;
        c.path.responder_resources = c.path.responder_resources.min(p.responder_resources);
        c.path.initiator_depth = c.path.initiator_depth.min(p.initiator_depth);
        let mut rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            local_qpn: p.qpn,
            starting_psn: c.rq_psn,
            responder_resources: c.path.responder_resources,
            initiator_depth: c.path.initiator_depth,
            target_ack_delay: ack_delay,
            rnr_retry_count: p.rnr_retry_count,
            srq: u8::from(p.srq),
            local_ca_guid: guid,
            ..RepRepr::default()
        };
        rep.private_data[..p.private_data.len()].copy_from_slice(&p.private_data);
        c.state = ConnState::RepSent;
        let (qpn, rtr, rts, peer, tid, timeout) = (
            p.qpn,
            c.rtr_attrs(),
            c.rts_attrs(),
            c.peer,
            c.tid,
            c.timeout_ns,
        );
        // Nothing goes out for a QP the application moves itself (`modify_qp`).
        self.modify_qp(id.0, QpRequest::Rtr { qpn, attrs: rtr });
        self.modify_qp(id.0, QpRequest::Rts { qpn, attrs: rts });
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::Rep(rep)));
        self.conn_mut(id)?.arm(now_ns, timeout, bytes);
        Ok(())
    }

    /// Rejects a CONNECT_REQUEST with a consumer-reject REJ carrying `private_data`
    /// (at most 148 bytes); the handle is gone afterwards.
    pub fn reject(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > private_data_max::REJECT {
            return Err(CmError::PrivateDataTooLong {
                got: private_data.len(),
                max: private_data_max::REJECT,
            });
        }
        let c = self.conn_mut(id)?;
        if c.state != ConnState::ReqRcvd {
            return Err(CmError::InvalidState(c.state.name()));
        }
        let (peer, tid, remote) = (c.peer, c.tid, c.remote_id);
        self.send_rej(
            peer,
            tid,
            (id.0, remote),
            msg_code::REQ,
            rej_reason::CONSUMER_REJECT,
            private_data,
        );
        self.free_conn(id.0);
        Ok(())
    }

    pub(super) fn on_rtu(&mut self, from: IpAddr, rtu: &RtuRepr) {
        let id = rtu.remote_comm_id;
        if !self.matching_conn(from, id, rtu.local_comm_id) {
            return;
        }
        if self.conns[&id].state != ConnState::RepSent {
            self.counters.out_of_state += 1;
            return;
        }
        self.passive_established(id, rtu.private_data.to_vec());
    }

    /// The first packet arrived on a passive connection's QP before the RTU (the
    /// IB_EVENT_COMM_EST the engine sees): the connection is established.
    pub fn comm_established(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        if c.state == ConnState::RepSent {
            self.passive_established(id.0, Vec::new());
        }
        Ok(())
    }

    pub(super) fn passive_established(&mut self, id: u32, private_data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = ConnState::Established;
        c.deadline_ns = None;
        let remote_qpn = c.remote_qpn;
        self.counters.established += 1;
        self.emit_event(
            id,
            CmEventKind::Established {
                remote_qpn,
                private_data,
            },
        );
    }
}
