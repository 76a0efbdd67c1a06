//! Ending connections: rdma_disconnect sends a DREQ (resent on timeout), the peer answers
//! with a DREP; either way both sides report DISCONNECTED once, move the QP to ERR and wait
//! out time-wait (the path's ACK timeout, as the kernel does) before TIMEWAIT_EXIT frees
//! the IDs. Destroying a handle finishes the protocol quietly.

use std::net::IpAddr;

use super::conn::ConnState;
use super::manager::CmManager;
use super::timing::iba_time_ns;
use super::types::{CmError, CmEventKind, CmId, QpRequest, Role};
use crate::wire::cm::{msg_code, rej_reason, CmMad, CmMessage, DrepRepr, DreqRepr};

impl CmManager {
    /// Disconnects an established connection: QP to ERR, DREQ sent. DISCONNECTED follows on
    /// the DREP (or after the DREQ's last retry), then TIMEWAIT_EXIT.
    pub fn disconnect(&mut self, now_ns: u64, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        if c.state != ConnState::Established {
            return Err(CmError::InvalidState(c.state.name()));
        }
        let (qpn, peer, remote_id, remote_qpn, timeout) =
            (c.local_qpn, c.peer, c.remote_id, c.remote_qpn, c.timeout_ns);
        // The passive side's own requests carry its own transaction ID, not the REQ's.
        let tid = match c.role {
            Role::Active => c.tid,
            Role::Passive => self.form_tid(id.0),
        };
        let dreq = DreqRepr {
            local_comm_id: id.0,
            remote_comm_id: remote_id,
            remote_qpn_eecn: remote_qpn,
            ..DreqRepr::default()
        };
        self.modify_qp(id.0, QpRequest::Err { qpn });
        let bytes = self.send(peer, &CmMad::send(tid, CmMessage::Dreq(dreq)));
        let c = self.conn_mut(id)?;
        c.state = ConnState::DreqSent;
        c.arm(now_ns, timeout, bytes);
        Ok(())
    }

    /// Destroys a handle (rdma_destroy_id): no more events for it. A pending attempt is
    /// rejected (REJ timeout on the active side, consumer reject on the passive one), an
    /// established connection is disconnected; the IDs are freed after time-wait.
    pub fn destroy(&mut self, now_ns: u64, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        c.quiet = true;
        let (state, peer, tid, remote_id) = (c.state, c.peer, c.tid, c.remote_id);
        match state {
            ConnState::ReqSent | ConnState::MraReqRcvd => {
                self.send_rej(
                    peer,
                    tid,
                    (id.0, remote_id),
                    msg_code::REQ,
                    rej_reason::TIMEOUT,
                    &[],
                );
                self.free_conn(id.0);
            }
            ConnState::ReqRcvd | ConnState::RepSent | ConnState::RepRcvd => {
                let what = if state == ConnState::ReqRcvd {
                    msg_code::REQ
                } else {
                    msg_code::REP
                };
                self.send_rej(
                    peer,
                    tid,
                    (id.0, remote_id),
                    what,
                    rej_reason::CONSUMER_REJECT,
                    &[],
                );
                self.free_conn(id.0);
            }
            ConnState::Established => self.disconnect(now_ns, id)?,
            ConnState::DreqSent | ConnState::TimeWait => {}
        }
        Ok(())
    }

    /// The engine could not apply a QP move this connection asked for (rdma_cm's
    /// CONNECT_ERROR, which the engine reports itself): no more events for it. On the
    /// active side, after a REP, it is what the kernel's `cma_rep_recv` does: QP to ERR
    /// and REJ "consumer defined" (28) for the REP instead of the RTU, and the IDs are
    /// freed at once (the kernel's `cm_reset_to_idle`, no time-wait); otherwise as
    /// [`CmManager::destroy`].
    pub fn qp_move_failed(&mut self, now_ns: u64, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        c.quiet = true;
        if !(c.role == Role::Active && c.state == ConnState::Established) {
            return self.destroy(now_ns, id);
        }
        let (qpn, peer, tid, remote_id) = (c.local_qpn, c.peer, c.tid, c.remote_id);
        self.modify_qp(id.0, QpRequest::Err { qpn });
        self.send_rej(
            peer,
            tid,
            (id.0, remote_id),
            msg_code::REP,
            rej_reason::CONSUMER_REJECT,
            &[],
        );
        self.free_conn(id.0);
        Ok(())
    }

    pub(super) fn on_dreq(&mut self, now_ns: u64, from: IpAddr, tid: u64, dreq: &DreqRepr) {
        let id = dreq.remote_comm_id;
        if !self.matching_conn(from, id, dreq.local_comm_id) {
            // The kernel's cm_dreq_handler answers a DREQ for no connection with a DREP
            // (cm_issue_drep), so that a peer whose side is gone (its process exited, or
            // time-wait ended) stops resending and reports DISCONNECTED at once.
            self.counters.dreps_for_unknown += 1;
            let drep = DrepRepr {
                local_comm_id: id,
                remote_comm_id: dreq.local_comm_id,
                ..DrepRepr::default()
            };
            self.send(from, &CmMad::send(tid, CmMessage::Drep(drep)));
            return;
        }
        let c = &self.conns[&id];
        // The kernel drops a DREQ that names another QP.
        if dreq.remote_qpn_eecn != c.local_qpn {
            self.counters.unmatched += 1;
            return;
        }
        let drep = DrepRepr {
            local_comm_id: id,
            remote_comm_id: dreq.local_comm_id,
            ..DrepRepr::default()
        };
        let drep = CmMad::send(tid, CmMessage::Drep(drep));
        match c.state {
            ConnState::RepSent | ConnState::Established | ConnState::DreqSent => {
                let (state, qpn) = (c.state, c.local_qpn);
                if state == ConnState::RepSent {
                    // A DREQ proves the peer got our REP: the RTU was only lost.
                    self.passive_established(id, Vec::new());
                }
                if state != ConnState::DreqSent {
                    self.modify_qp(id, QpRequest::Err { qpn });
                }
                let bytes = self.send(from, &drep);
                self.emit_event(id, CmEventKind::Disconnected);
                self.enter_timewait(now_ns, id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.last_sent = Some(Box::new(bytes));
                }
            }
            ConnState::TimeWait => {
                self.counters.duplicate_dreqs += 1;
                self.send(from, &drep);
            }
            _ => self.counters.out_of_state += 1,
        }
    }

    pub(super) fn on_drep(&mut self, now_ns: u64, from: IpAddr, drep: &DrepRepr) {
        let id = drep.remote_comm_id;
        if !self.matching_conn(from, id, drep.local_comm_id) {
            return;
        }
        if self.conns[&id].state != ConnState::DreqSent {
            self.counters.out_of_state += 1;
            return;
        }
        self.emit_event(id, CmEventKind::Disconnected);
        self.enter_timewait(now_ns, id);
    }

    /// Time-wait lasts the path's ACK timeout (the kernel's cm_enter_timewait).
    pub(super) fn enter_timewait(&mut self, now_ns: u64, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = ConnState::TimeWait;
            c.deadline_ns = Some(now_ns.saturating_add(iba_time_ns(c.path.ack_timeout)));
        }
    }
}
