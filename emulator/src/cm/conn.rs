//! One connection's state: the explicit state enum of the IB CM connection state machine
//! (the subset rdma_cm drives) and what the connection remembers to answer duplicates and
//! to resend on timeouts.

use std::net::IpAddr;

use super::types::{Role, RtrAttrs, RtsAttrs};
use crate::wire::cm::MAD_LEN;

/// Connection states (IBA 12.9.6; the kernel's `enum ib_cm_state` names in brackets).
///
/// ```text
/// active:  connect -> ReqSent --MRA--> MraReqRcvd --REP/RTU--> Established
///          ReqSent/MraReqRcvd --REJ--> (freed, Rejected)  --retries out--> (freed, Unreachable)
/// passive: REQ -> ReqRcvd --accept/REP--> RepSent --RTU--> Established
///          ReqRcvd --reject/REJ--> (freed)  RepSent --retries out--> (freed, Unreachable)
/// both:    Established --disconnect/DREQ--> DreqSent --DREP or retries out--> TimeWait
///          Established/RepSent/DreqSent --DREQ/DREP sent--> TimeWait --timer--> (freed)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Active: REQ sent, REP awaited; the REQ is resent on timeout (IB_CM_REQ_SENT).
    ReqSent,
    /// Active: the peer acknowledged the REQ with an MRA and needs longer
    /// (IB_CM_MRA_REQ_RCVD).
    MraReqRcvd,
    /// Active, the application moves its own QP: REP handed to it (CONNECT_RESPONSE),
    /// `establish` awaited to send the RTU (IB_CM_REP_RCVD).
    RepRcvd,
    /// Passive: REQ handed to the application, accept or reject awaited; a duplicate REQ
    /// gets an MRA (IB_CM_REQ_RCVD / IB_CM_MRA_REQ_SENT).
    ReqRcvd,
    /// Passive: REP sent, RTU awaited; the REP is resent on timeout (IB_CM_REP_SENT).
    RepSent,
    /// Connected (IB_CM_ESTABLISHED).
    Established,
    /// DREQ sent, DREP awaited; the DREQ is resent on timeout (IB_CM_DREQ_SENT).
    DreqSent,
    /// Closed; the IDs stay reserved so late or stale messages are recognised
    /// (IB_CM_TIMEWAIT).
    TimeWait,
}

impl ConnState {
    /// Name for errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            ConnState::ReqSent => "REQ_SENT",
            ConnState::MraReqRcvd => "MRA_REQ_RCVD",
            ConnState::RepRcvd => "REP_RCVD",
            ConnState::ReqRcvd => "REQ_RCVD",
            ConnState::RepSent => "REP_SENT",
            ConnState::Established => "ESTABLISHED",
            ConnState::DreqSent => "DREQ_SENT",
            ConnState::TimeWait => "TIMEWAIT",
        }
    }
}

/// The path and transport parameters a connection carries from REQ/REP to the QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathParams {
    pub remote_gid: [u8; 16],
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub path_mtu: u8,
    /// Local ACK timeout of the path (the kernel's av.timeout); also sets time-wait.
    pub ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
}

/// One connection.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub state: ConnState,
    pub role: Role,
    pub peer: IpAddr,
    pub service_id: u64,
    pub local_id: u32,
    /// The peer's communication ID, 0 until its first message.
    pub remote_id: u32,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    /// Transaction ID of this side's requests (active) or of the REQ (passive).
    pub tid: u64,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub path: PathParams,
    /// The QP's local ACK timeout at RTS when the application set one
    /// (RDMA_OPTION_ID_ACK_TIMEOUT); else the path's.
    pub qp_ack_timeout: Option<u8>,
    /// The application moves the QP itself (rdma_init_qp_attr + ibv_modify_qp, then
    /// rdma_establish): the CM asks for no QP moves.
    pub manual_qp: bool,
    pub srq: bool,
    /// Retransmission interval of the message in flight.
    pub timeout_ns: u64,
    /// Resends left for the message in flight.
    pub retries_left: u8,
    /// Resends allowed per message.
    pub max_retries: u8,
    /// When the message in flight is resent, or time-wait ends.
    pub deadline_ns: Option<u64>,
    /// The MAD resent on timeout or on a duplicate (REQ, REP, RTU, DREQ, DREP).
    pub last_sent: Option<Box<[u8; MAD_LEN]>>,
    /// The application destroyed the handle: finish the protocol without events.
    pub quiet: bool,
}

impl Conn {
    /// The QP attributes for RTR.
    pub fn rtr_attrs(&self) -> RtrAttrs {
        RtrAttrs {
            dest_qpn: self.remote_qpn,
            rq_psn: self.rq_psn,
            path_mtu: self.path.path_mtu,
            max_dest_rd_atomic: self.path.responder_resources,
            remote_gid: self.path.remote_gid,
            flow_label: self.path.flow_label,
            hop_limit: self.path.hop_limit,
            traffic_class: self.path.traffic_class,
            sl: self.path.sl,
        }
    }

    /// The QP attributes for RTS.
    pub fn rts_attrs(&self) -> RtsAttrs {
        RtsAttrs {
            sq_psn: self.sq_psn,
            timeout: self.qp_ack_timeout.unwrap_or(self.path.ack_timeout),
            retry_cnt: self.path.retry_count,
            rnr_retry: self.path.rnr_retry_count,
            max_rd_atomic: self.path.initiator_depth,
        }
    }

    /// Arms the resend timer for a new message in flight.
    pub fn arm(&mut self, now_ns: u64, timeout_ns: u64, mad: [u8; MAD_LEN]) {
        self.timeout_ns = timeout_ns;
        self.retries_left = self.max_retries;
        self.deadline_ns = Some(now_ns.saturating_add(timeout_ns));
        self.last_sent = Some(Box::new(mad));
    }
}

/// A snapshot of one connection, for the engine and for diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnInfo {
    /// Protocol state.
    pub state: ConnState,
    /// Which side.
    pub role: Role,
    /// The peer's address.
    pub peer: IpAddr,
    /// The service ID connected to.
    pub service_id: u64,
    /// The local QP (0 until accepted on the passive side).
    pub local_qpn: u32,
    /// The peer's QP (0 until known).
    pub remote_qpn: u32,
    /// First PSN this side sends (0 until known on the active side).
    pub sq_psn: u32,
    /// First PSN this side expects.
    pub rq_psn: u32,
}
