//! Service ID resolution for UD QPs (port space UDP): the requester sends a SIDR_REQ
//! (resent on timeout) and learns the server's QPN and Q_Key from the SIDR_REP; the server
//! sees a SIDR request event and answers. An answered request lingers so duplicates get
//! the same SIDR_REP instead of a second event.

use std::net::IpAddr;

use super::config::private_data_max;
use super::manager::CmManager;
use super::sidr_state::{Sidr, SidrState};
use super::timing::iba_time_ns;
use super::types::{CmError, CmEventKind, CmId};
use crate::wire::cm::{
    ip_service_id, parse_ip_service_id, sidr_status, CmMad, CmMessage, CmaHdr, PortSpace,
    SidrRepRepr, SidrReqRepr, CMA_HDR_LEN,
};

impl CmManager {
    /// Resolves a UD service on `peer` (rdma_resolve_route + rdma_connect on a UDP id):
    /// sends a SIDR_REQ. The outcome is one `SidrResolved` or `SidrFailed`.
    pub fn sidr_resolve(
        &mut self,
        now_ns: u64,
        peer: IpAddr,
        src_port: u16,
        dst_port: u16,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        if private_data.len() > private_data_max::SIDR_REQ {
            return Err(CmError::PrivateDataTooLong {
                got: private_data.len(),
                max: private_data_max::SIDR_REQ,
            });
        }
        if self.sidrs.len() >= self.cfg.max_sidr {
            return Err(CmError::TableFull("SIDR"));
        }
        let id = self.new_comm_id()?;
        let service_id = ip_service_id(PortSpace::Udp, dst_port);
        let mut req = SidrReqRepr {
            request_id: id,
            pkey: crate::wire::cm::mad::DEFAULT_PKEY,
            service_id,
            ..SidrReqRepr::default()
        };
        CmaHdr {
            src_port,
            src_addr: self.cfg.local_addr,
            dst_addr: peer,
        }
        .emit(&mut req.private_data)
        .map_err(|_| CmError::BadArgument("local and peer address families differ"))?;
        req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + private_data.len()]
            .copy_from_slice(private_data);
        let tid = self.form_tid(id);
        // rdma_cm: timeout 2^(CMA_CM_RESPONSE_TIMEOUT - 8) ms, CMA_MAX_CM_RETRIES resends.
        let timeout_ns = iba_time_ns(self.cfg.cm_response_timeout);
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::SidrReq(req)));
        self.sidrs.insert(
            id,
            Sidr {
                state: SidrState::ReqSent,
                peer,
                request_id: id,
                service_id,
                tid,
                timeout_ns,
                retries_left: self.cfg.max_cm_retries,
                deadline_ns: Some(now_ns.saturating_add(timeout_ns)),
                last_sent: Some(Box::new(bytes)),
                quiet: false,
            },
        );
        self.counters.sidr_created += 1;
        Ok(CmId(id))
    }

    /// Answers a SIDR request with the serving UD QP and its Q_Key.
    pub fn sidr_accept(
        &mut self,
        now_ns: u64,
        id: CmId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.sidr_answer(now_ns, id, sidr_status::SUCCESS, qpn, qkey, private_data)
    }

    /// Refuses a SIDR request (status "reject").
    pub fn sidr_reject(
        &mut self,
        now_ns: u64,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.sidr_answer(now_ns, id, sidr_status::REJECT, 0, 0, private_data)
    }

    fn sidr_answer(
        &mut self,
        now_ns: u64,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_data_max::SIDR_REP {
            return Err(CmError::PrivateDataTooLong {
                got: private_data.len(),
                max: private_data_max::SIDR_REP,
            });
        }
        let linger_ns = self.sidr_linger_ns();
        let s = self.sidrs.get(&id.0).ok_or(CmError::UnknownId(id))?;
        if s.state != SidrState::ReqRcvd {
            return Err(CmError::InvalidState("SIDR answered or not a request"));
        }
        let (peer, tid) = (s.peer, s.tid);
        let mut rep = SidrRepRepr {
            request_id: s.request_id,
            status,
            qpn,
            service_id: s.service_id,
            qkey,
            ..SidrRepRepr::default()
        };
        rep.private_data[..private_data.len()].copy_from_slice(private_data);
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::SidrRep(rep)));
        let s = self.sidrs.get_mut(&id.0).expect("checked above");
        s.state = SidrState::Answered;
        s.last_sent = Some(Box::new(bytes));
        s.deadline_ns = Some(now_ns.saturating_add(linger_ns));
        Ok(())
    }

    /// How long a server remembers an answer: as long as the requester may resend.
    fn sidr_linger_ns(&self) -> u64 {
        (u64::from(self.cfg.max_cm_retries) + 1) * iba_time_ns(self.cfg.cm_response_timeout)
    }

    pub(super) fn on_sidr_req(&mut self, now_ns: u64, from: IpAddr, tid: u64, req: &SidrReqRepr) {
        let known = self
            .sidrs
            .iter()
            .find(|(_, s)| {
                s.state != SidrState::ReqSent && s.peer == from && s.request_id == req.request_id
            })
            .map(|(&id, s)| (id, s.last_sent.clone()));
        if let Some((_, answer)) = known {
            self.counters.duplicate_reqs += 1;
            if let Some(answer) = answer {
                self.send_bytes(from, answer);
            }
            return;
        }
        let ud = parse_ip_service_id(req.service_id).is_none_or(|(ps, _)| ps == PortSpace::Udp);
        let cma = CmaHdr::parse(&req.private_data);
        let status = if !self.listeners.contains(&req.service_id) || !ud {
            Some(sidr_status::UNSUPPORTED)
        } else if cma.is_err() {
            self.counters.malformed += 1;
            Some(sidr_status::REJECT)
        } else if self.sidrs.len() >= self.cfg.max_sidr {
            Some(sidr_status::NO_QP)
        } else {
            None
        };
        let id = match (status, self.new_comm_id()) {
            (None, Ok(id)) => id,
            (status, _) => {
                let rep = SidrRepRepr {
                    request_id: req.request_id,
                    status: status.unwrap_or(sidr_status::NO_QP),
                    service_id: req.service_id,
                    ..SidrRepRepr::default()
                };
                self.send(from, &CmMad::send(tid, CmMessage::SidrRep(rep)));
                return;
            }
        };
        self.sidrs.insert(
            id,
            Sidr {
                state: SidrState::ReqRcvd,
                peer: from,
                request_id: req.request_id,
                service_id: req.service_id,
                tid,
                timeout_ns: 0,
                retries_left: 0,
                // Bounded even if the application never answers.
                deadline_ns: Some(now_ns.saturating_add(self.sidr_linger_ns())),
                last_sent: None,
                quiet: false,
            },
        );
        self.counters.sidr_created += 1;
        self.emit_event(
            id,
            CmEventKind::SidrRequest {
                service_id: req.service_id,
                cma: cma.expect("checked above"),
                private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
            },
        );
    }

    pub(super) fn on_sidr_rep(&mut self, from: IpAddr, rep: &SidrRepRepr) {
        let id = rep.request_id;
        let ok = self
            .sidrs
            .get(&id)
            .is_some_and(|s| s.state == SidrState::ReqSent && s.peer == from);
        if !ok {
            self.counters.unmatched += 1;
            return;
        }
        let kind = if rep.status == sidr_status::SUCCESS {
            CmEventKind::SidrResolved {
                qpn: rep.qpn,
                qkey: rep.qkey,
                private_data: rep.private_data.to_vec(),
            }
        } else {
            CmEventKind::SidrFailed {
                status: Some(rep.status),
            }
        };
        self.emit_event(id, kind);
        self.free_sidr(id);
    }

    pub(super) fn sidr_timeout(&mut self, now_ns: u64, id: u32) {
        let Some(s) = self.sidrs.get_mut(&id) else {
            return;
        };
        match s.state {
            SidrState::ReqSent if s.retries_left > 0 => {
                s.retries_left -= 1;
                s.deadline_ns = Some(now_ns.saturating_add(s.timeout_ns));
                let (peer, mad) = (s.peer, s.last_sent.clone());
                self.counters.retransmits += 1;
                if let Some(mad) = mad {
                    self.send_bytes(peer, mad);
                }
            }
            SidrState::ReqSent => {
                self.counters.retries_exhausted += 1;
                self.emit_event(id, CmEventKind::SidrFailed { status: None });
                self.free_sidr(id);
            }
            SidrState::ReqRcvd | SidrState::Answered => self.free_sidr(id),
        }
    }

    /// Destroys a SIDR handle: no more events; a server's pending request is dropped.
    pub fn sidr_destroy(&mut self, id: CmId) -> Result<(), CmError> {
        self.sidrs.get(&id.0).ok_or(CmError::UnknownId(id))?;
        self.free_sidr(id.0);
        Ok(())
    }

    fn free_sidr(&mut self, id: u32) {
        if self.sidrs.remove(&id).is_some() {
            self.counters.sidr_freed += 1;
        }
    }
}
