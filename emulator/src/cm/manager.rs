//! The connection manager of one device: tables, the output queue, MAD dispatch and
//! timers. The per-message handlers live in `active.rs`, `passive.rs`, `teardown.rs` and
//! `sidr.rs`, each an `impl CmManager` block.
//!
//! Sans-I/O: inputs are API calls, received MADs with their source address and `now_ns`;
//! outputs are queued [`CmOutput`]s (MADs to send, QP changes, events) and
//! [`CmManager::next_deadline_ns`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;

use super::config::CmConfig;
use super::conn::{Conn, ConnInfo, ConnState};
use super::counters::CmCounters;
use super::ids::IdGen;
use super::sidr_state::Sidr;
use super::types::{
    CmError, CmEvent, CmEventKind, CmId, CmOutput, HeldReq, QpRequest, RtrAttrs, RtsAttrs,
};
use crate::wire::cm::mad::method;
use crate::wire::cm::{CmMad, CmMessage, MadError, PortSpace};

/// The CM of one device.
#[derive(Debug)]
pub struct CmManager {
    pub(super) cfg: CmConfig,
    pub(super) ids: IdGen,
    pub(super) conns: BTreeMap<u32, Conn>,
    pub(super) listeners: BTreeSet<u64>,
    pub(super) sidrs: BTreeMap<u32, Sidr>,
    pub(super) held_reqs: Vec<HeldReq>,
    out: VecDeque<CmOutput>,
    queued_sends: usize,
    pub(super) counters: CmCounters,
}

impl CmManager {
    /// A CM with no connections.
    pub fn new(cfg: CmConfig) -> CmManager {
        CmManager {
            ids: IdGen::new(cfg.seed),
            cfg,
            conns: BTreeMap::new(),
            listeners: BTreeSet::new(),
            sidrs: BTreeMap::new(),
            held_reqs: Vec::new(),
            out: VecDeque::new(),
            queued_sends: 0,
            counters: CmCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// Connections held (any state, time-wait included).
    pub fn live_connections(&self) -> usize {
        self.conns.len()
    }

    /// SIDR requests held (either side).
    pub fn live_sidr(&self) -> usize {
        self.sidrs.len()
    }

    /// A snapshot of connection `id`, if it exists.
    pub fn info(&self, id: CmId) -> Option<ConnInfo> {
        self.conns.get(&id.0).map(|c| ConnInfo {
            state: c.state,
            role: c.role,
            peer: c.peer,
            service_id: c.service_id,
            local_qpn: c.local_qpn,
            remote_qpn: c.remote_qpn,
            sq_psn: c.sq_psn,
            rq_psn: c.rq_psn,
        })
    }

    /// The RTR and RTS attributes connection `id`'s QP gets (what the CM asks the engine
    /// for, or what rdma_init_qp_attr gives an application that moves its own QP); None
    /// before the peer's QP is known.
    pub fn qp_attrs(&self, id: CmId) -> Option<(RtrAttrs, RtsAttrs)> {
        self.conns
            .get(&id.0)
            .filter(|c| c.remote_qpn != 0)
            .map(|c| (c.rtr_attrs(), c.rts_attrs()))
    }

    /// Accepts REQs (or SIDR_REQs for the UDP port space) for `port` in `space`.
    pub fn listen(&mut self, space: PortSpace, port: u16) -> Result<u64, CmError> {
        let sid = crate::wire::cm::ip_service_id(space, port);
        if self.listeners.contains(&sid) {
            return Err(CmError::AddressInUse(sid));
        }
        if self.listeners.len() >= self.cfg.max_listeners {
            return Err(CmError::TableFull("listener"));
        }
        self.listeners.insert(sid);
        self.release_held_reqs(sid);
        Ok(sid)
    }

    /// Stops listening on `service_id`; connections already made are not affected.
    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listeners.remove(&service_id) {
            Ok(())
        } else {
            Err(CmError::BadArgument("service ID not listened on"))
        }
    }

    /// Takes the next output; call after every input until it returns `None`.
    pub fn poll_output(&mut self) -> Option<CmOutput> {
        let o = self.out.pop_front()?;
        if matches!(o, CmOutput::SendMad { .. }) {
            self.queued_sends -= 1;
        }
        Some(o)
    }

    /// The earliest time [`CmManager::handle_timeout`] has work; call it then (or later).
    pub fn next_deadline_ns(&self) -> Option<u64> {
        let conns = self.conns.values().filter_map(|c| c.deadline_ns);
        let sidrs = self.sidrs.values().filter_map(|s| s.deadline_ns);
        conns.chain(sidrs).chain(self.held_reqs_deadline()).min()
    }

    /// Handles one received MAD (the payload of a UD SEND to QP1) from `from`. A MAD that
    /// does not parse is counted, dropped and its error returned; nothing else happens.
    pub fn handle_mad(&mut self, now_ns: u64, from: IpAddr, mad: &[u8]) -> Result<(), MadError> {
        self.counters.mads_received += 1;
        if let Some(answer) = unsupported_get_response(mad) {
            self.counters.gets_answered += 1;
            self.send_bytes(from, answer);
            return Ok(());
        }
        let mad_bytes = mad;
        let mad = CmMad::parse(mad).inspect_err(|_| self.counters.malformed += 1)?;
        let tid = mad.header.transaction_id;
        match mad.message {
            CmMessage::Req(r) => self.on_req(Some((now_ns, mad_bytes)), from, tid, &r),
            CmMessage::Rep(r) => self.on_rep(from, tid, &r),
            CmMessage::Rtu(r) => self.on_rtu(from, &r),
            CmMessage::Mra(r) => self.on_mra(now_ns, from, &r),
            CmMessage::Rej(r) => self.on_rej(from, &r),
            CmMessage::Dreq(r) => self.on_dreq(now_ns, from, tid, &r),
            CmMessage::Drep(r) => self.on_drep(now_ns, from, &r),
            CmMessage::SidrReq(r) => self.on_sidr_req(now_ns, from, tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, &r),
            CmMessage::ClassPortInfo(_) if mad.header.method == method::GET_RESP => {
                self.counters.get_responses_received += 1
            }
            CmMessage::ClassPortInfo(_) => self.counters.out_of_state += 1,
        }
        Ok(())
    }

    /// Resends what timed out, gives up after the last retry, ends time-waits. Call at
    /// [`CmManager::next_deadline_ns`].
    pub fn handle_timeout(&mut self, now_ns: u64) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline_ns.is_some_and(|d| d <= now_ns))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.conn_timeout(now_ns, id);
        }
        let due: Vec<u32> = self
            .sidrs
            .iter()
            .filter(|(_, s)| s.deadline_ns.is_some_and(|d| d <= now_ns))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.sidr_timeout(now_ns, id);
        }
        self.expire_held_reqs(now_ns);
    }

    fn conn_timeout(&mut self, now_ns: u64, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.state == ConnState::TimeWait {
            self.emit_event(id, CmEventKind::TimewaitExit);
            self.free_conn(id);
            return;
        }
        if c.retries_left > 0 {
            c.retries_left -= 1;
            c.deadline_ns = Some(now_ns.saturating_add(c.timeout_ns));
            let (peer, mad) = (c.peer, c.last_sent.clone());
            self.counters.retransmits += 1;
            if let Some(mad) = mad {
                self.send_bytes(peer, mad);
            }
            return;
        }
        self.counters.retries_exhausted += 1;
        match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd | ConnState::RepSent => {
                let qpn = c.local_qpn;
                self.modify_qp(id, QpRequest::Err { qpn });
                self.emit_event(id, CmEventKind::Unreachable);
                self.free_conn(id);
            }
            // DREQ unanswered: the kernel reports DREQ_ERROR, rdma_cm DISCONNECTED.
            ConnState::DreqSent => {
                self.emit_event(id, CmEventKind::Disconnected);
                self.enter_timewait(now_ns, id);
            }
            ConnState::ReqRcvd
            | ConnState::RepRcvd
            | ConnState::Established
            | ConnState::TimeWait => {
                c.deadline_ns = None;
            }
        }
    }

    /// The connection `id` if `from` is its peer and `remote_id` (when the message names
    /// one) is the peer's communication ID; counts a mismatch.
    pub(super) fn matching_conn(&mut self, from: IpAddr, local_id: u32, remote_id: u32) -> bool {
        let ok = self.conns.get(&local_id).is_some_and(|c| {
            c.peer == from && (c.remote_id == 0 || remote_id == 0 || c.remote_id == remote_id)
        });
        if !ok {
            self.counters.unmatched += 1;
        }
        ok
    }

    /// A fresh communication ID unused by connections and SIDR requests.
    pub(super) fn new_comm_id(&mut self) -> Result<u32, CmError> {
        let (conns, sidrs) = (&self.conns, &self.sidrs);
        self.ids
            .comm_id(self.cfg.comm_id_prefix, |id| {
                conns.contains_key(&id) || sidrs.contains_key(&id)
            })
            .ok_or(CmError::TableFull("communication ID"))
    }

    /// The kernel's transaction ID for requests of `local_id` (cm_form_tid: the MAD agent's
    /// high word, the ID's bytes in host order as the low word).
    pub(super) fn form_tid(&self, local_id: u32) -> u64 {
        (u64::from(self.cfg.tid_hi) << 32) | u64::from(local_id.swap_bytes())
    }

    /// Queues `mad` for `to`, returning its bytes.
    pub(super) fn send(&mut self, to: IpAddr, mad: &CmMad) -> [u8; crate::wire::cm::MAD_LEN] {
        let bytes = mad.to_bytes();
        self.send_bytes(to, Box::new(bytes));
        bytes
    }

    pub(super) fn send_bytes(&mut self, to: IpAddr, mad: Box<[u8; crate::wire::cm::MAD_LEN]>) {
        if self.queued_sends >= self.cfg.max_queued_sends {
            self.counters.sends_dropped += 1;
            return;
        }
        self.queued_sends += 1;
        self.counters.mads_sent += 1;
        self.out.push_back(CmOutput::SendMad { to, mad });
    }

    /// Queues an event for connection or SIDR `id` unless its handle was destroyed.
    pub(super) fn emit_event(&mut self, id: u32, kind: CmEventKind) {
        let quiet = self.conns.get(&id).is_some_and(|c| c.quiet)
            || self.sidrs.get(&id).is_some_and(|s| s.quiet);
        if !quiet {
            self.out
                .push_back(CmOutput::Event(CmEvent { id: CmId(id), kind }));
        }
    }

    /// Queues a QP change for connection `id` unless its handle was destroyed.
    pub(super) fn modify_qp(&mut self, id: u32, req: QpRequest) {
        // A QP the application moves itself is never touched (librdmacm leaves an
        // external QP alone, also on errors and disconnects).
        if !self.conns.get(&id).is_some_and(|c| c.quiet || c.manual_qp) {
            self.out.push_back(CmOutput::ModifyQp(req));
        }
    }

    pub(super) fn free_conn(&mut self, id: u32) {
        if self.conns.remove(&id).is_some() {
            self.counters.connections_freed += 1;
        }
    }

    pub(super) fn insert_conn(&mut self, conn: Conn) -> Result<(), CmError> {
        if self.conns.len() >= self.cfg.max_connections {
            return Err(CmError::TableFull("connection"));
        }
        self.counters.connections_created += 1;
        self.conns.insert(conn.local_id, conn);
        Ok(())
    }

    /// The connection `id` for an API call, or `UnknownId`.
    pub(super) fn conn_mut(&mut self, id: CmId) -> Result<&mut Conn, CmError> {
        self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id))
    }
}

/// The kernel's CM agent takes only Send; a Get or Set of the CM class (ClassPortInfo or
/// any attribute) reaches no agent, and the MAD layer (`generate_unmatched_resp`) answers
/// it with the request itself, method GetResp and status "unsupported method/attribute"
/// (0x000c). `None` for anything else (or a MAD of the wrong size, left to the parser).
fn unsupported_get_response(mad: &[u8]) -> Option<Box<[u8; crate::wire::cm::MAD_LEN]>> {
    use crate::wire::cm::mad::{MAD_BASE_VERSION, MGMT_CLASS_CM};
    /// IBA 13.4.7: the method/attribute combination is not supported.
    const UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;
    let bytes: [u8; crate::wire::cm::MAD_LEN] = mad.try_into().ok()?;
    let (version, class, m) = (bytes[0], bytes[1], bytes[3]);
    if version != MAD_BASE_VERSION
        || class != MGMT_CLASS_CM
        || !matches!(m, method::GET | method::SET)
    {
        return None;
    }
    let mut answer = Box::new(bytes);
    answer[3] = method::GET_RESP;
    answer[4..6].copy_from_slice(&UNSUPPORTED_METHOD_ATTRIB.to_be_bytes());
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::mad::MGMT_CLASS_CM;

    fn manager() -> CmManager {
        CmManager::new(CmConfig::new("127.31.0.1".parse().unwrap(), 1, 7))
    }

    fn get(method: u8, attr: u16) -> [u8; crate::wire::cm::MAD_LEN] {
        let mut mad = [0u8; crate::wire::cm::MAD_LEN];
        (mad[0], mad[1], mad[2], mad[3]) = (1, MGMT_CLASS_CM, 2, method);
        mad[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        mad[40] = 0xab;
        mad
    }

    #[test]
    fn a_get_is_answered_as_the_kernels_mad_layer_does_and_a_get_resp_is_not() {
        let mut m = manager();
        let peer: IpAddr = "127.31.0.2".parse().unwrap();
        for (mth, attr) in [(method::GET, 0x0001u16), (method::SET, 0x0010)] {
            let req = get(mth, attr);
            m.handle_mad(0, peer, &req).unwrap();
            let Some(CmOutput::SendMad { to, mad }) = m.poll_output() else {
                panic!("no answer to method {mth:#x}");
            };
            assert_eq!(to, peer);
            let mut want = req;
            want[3] = method::GET_RESP;
            (want[4], want[5]) = (0x00, 0x0c);
            assert_eq!(
                mad[..],
                want[..],
                "the request echoed, GetResp, status 0x000c"
            );
        }
        assert_eq!(m.counters().gets_answered, 2);
        // A GetResp (or a Get of another class) gets no answer.
        m.handle_mad(0, peer, &get(method::GET_RESP, 0x0001))
            .unwrap();
        let mut other = get(method::GET, 0x0001);
        other[1] = 0x03;
        assert!(m.handle_mad(0, peer, &other).is_err());
        assert!(m.poll_output().is_none());
        assert_eq!(m.counters().gets_answered, 2);
        assert_eq!(m.counters().get_responses_received, 1);
    }
}
