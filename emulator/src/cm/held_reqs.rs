//! REQs for a service nobody listens on yet, held a moment before the REJ "invalid service
//! ID": a server that is still starting up (its rdma_listen a few milliseconds behind its
//! client's rdma_connect, as perftest 4.5's `-R` client connects its test QP the moment the
//! exchange ends) gets the REQ when it listens, instead of its client getting a REJ it
//! does not retry (perftest 4.5 then hangs). The kernel rejects at once; holding is within
//! the protocol (the active side waits its CM response timeout, seconds, for an answer),
//! and the REJ still comes, after [`CmConfig::req_hold_ns`](super::CmConfig). Bounded:
//! at most `max_held_reqs`, each a copy of its MAD; beyond that the REJ is immediate.

use std::net::IpAddr;

use super::manager::CmManager;
use super::types::HeldReq;
use crate::wire::cm::{msg_code, rej_reason, CmMad, CmMessage, ReqRepr, MAD_LEN};

impl CmManager {
    /// Holds `req` (whose MAD is `mad`, transaction `tid`) from `from` until a listener for its service
    /// appears or the hold ends; false if it cannot be held (table full, or not a MAD of
    /// the expected size), and the caller rejects it now. A retransmission of a REQ held
    /// already is absorbed.
    pub(super) fn hold_req(
        &mut self,
        now_ns: u64,
        from: IpAddr,
        tid: u64,
        req: &ReqRepr,
        mad: &[u8],
    ) -> bool {
        if self
            .held_reqs
            .iter()
            .any(|h| h.from == from && h.remote_comm_id == req.local_comm_id)
        {
            return true;
        }
        let Ok(bytes) = <[u8; MAD_LEN]>::try_from(mad) else {
            return false;
        };
        if self.cfg.req_hold_ns == 0 || self.held_reqs.len() >= self.cfg.max_held_reqs {
            return false;
        }
        self.counters.reqs_held += 1;
        self.held_reqs.push(HeldReq {
            from,
            tid,
            service_id: req.service_id,
            remote_comm_id: req.local_comm_id,
            until_ns: now_ns.saturating_add(self.cfg.req_hold_ns),
            mad: Box::new(bytes),
        });
        true
    }

    /// The REQs held for `service_id`, now listened on, go through as if they had just
    /// arrived.
    pub(super) fn release_held_reqs(&mut self, service_id: u64) {
        let (due, kept): (Vec<HeldReq>, Vec<HeldReq>) = std::mem::take(&mut self.held_reqs)
            .into_iter()
            .partition(|h| h.service_id == service_id);
        self.held_reqs = kept;
        for h in due {
            if let Ok(CmMad {
                header,
                message: CmMessage::Req(req),
            }) = CmMad::parse(&h.mad[..])
            {
                self.on_req(None, h.from, header.transaction_id, &req);
            }
        }
    }

    /// Rejects the held REQs whose hold ended by `now_ns` ("invalid service ID", as the
    /// kernel would have at once).
    pub(super) fn expire_held_reqs(&mut self, now_ns: u64) {
        let (due, kept): (Vec<HeldReq>, Vec<HeldReq>) = std::mem::take(&mut self.held_reqs)
            .into_iter()
            .partition(|h| h.until_ns <= now_ns);
        self.held_reqs = kept;
        for h in due {
            let ids = (0, h.remote_comm_id);
            self.send_rej(
                h.from,
                h.tid,
                ids,
                msg_code::REQ,
                rej_reason::INVALID_SERVICE_ID,
                &[],
            );
        }
    }

    /// When the next held REQ's hold ends.
    pub(super) fn held_reqs_deadline(&self) -> Option<u64> {
        self.held_reqs.iter().map(|h| h.until_ns).min()
    }
}
