//! What goes in and out of the connection manager: handles, events, QP-modify requests,
//! outputs and errors. Plain data, so a C ABI (librdmacm) can map them one to one.

use std::net::IpAddr;

use crate::wire::cm::CmaHdr;

/// A connection (or SIDR request) handle: its local communication ID (request ID for SIDR),
/// random and unique among live connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// Which side of a connection this end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sent the REQ (rdma_connect).
    Active,
    /// Received the REQ through a listener (rdma_accept / rdma_reject).
    Passive,
}

/// Attributes for INIT -> RTR, as ib_cm_init_qp_attr gives them to rdma_cm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtrAttrs {
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// Path MTU (IBV_MTU_* enum: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// Incoming RDMA READ/atomic requests accepted (responder resources).
    pub max_dest_rd_atomic: u8,
    /// The peer's GID (its IP address, IPv4-mapped for v4).
    pub remote_gid: [u8; 16],
    /// Flow label of the path (picks the RoCEv2 UDP source port).
    pub flow_label: u32,
    /// Hop limit of the path.
    pub hop_limit: u8,
    /// Traffic class of the path.
    pub traffic_class: u8,
    /// Service level of the path.
    pub sl: u8,
}

/// Attributes for RTR -> RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtsAttrs {
    /// First PSN this QP sends.
    pub sq_psn: u32,
    /// Local ACK timeout: 4.096 us * 2^value.
    pub timeout: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomic requests issued (initiator depth).
    pub max_rd_atomic: u8,
}

/// A QP state change the CM asks the engine to make. The CM never writes transport state;
/// the engine applies these in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpRequest {
    /// Move `qpn` to RTR.
    Rtr {
        /// The local QP.
        qpn: u32,
        /// Its new attributes.
        attrs: RtrAttrs,
    },
    /// Move `qpn` to RTS.
    Rts {
        /// The local QP.
        qpn: u32,
        /// Its new attributes.
        attrs: RtsAttrs,
    },
    /// Move `qpn` to ERR (flushes outstanding work).
    Err {
        /// The local QP.
        qpn: u32,
    },
}

/// Why a connection attempt ended without a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rejection {
    /// REJ reason code (wire::cm::rej_reason).
    pub reason: u16,
    /// The REJ's whole private data (148 bytes), as librdmacm hands it over.
    pub private_data: Vec<u8>,
}

/// An event for the application (the rdma_cm event it maps to in brackets).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmEventKind {
    /// A REQ for a listened service (RDMA_CM_EVENT_CONNECT_REQUEST); answer with accept or
    /// reject.
    ConnectRequest {
        /// The listened service ID.
        service_id: u64,
        /// rdma_cm's header: who connects from where.
        cma: CmaHdr,
        /// The requester's QP.
        remote_qpn: u32,
        /// Responder resources it offers.
        responder_resources: u8,
        /// Initiator depth it wants.
        initiator_depth: u8,
        /// The user's private data (56 bytes after rdma_cm's header).
        private_data: Vec<u8>,
    },
    /// The connection is usable (RDMA_CM_EVENT_ESTABLISHED); the QP is in RTS.
    Established {
        /// The peer's QP.
        remote_qpn: u32,
        /// The peer's private data (REP's 196 bytes on the active side, RTU's on the passive).
        private_data: Vec<u8>,
    },
    /// The REP of a connection whose application moves its own QP
    /// (RDMA_CM_EVENT_CONNECT_RESPONSE): move the QP (the attributes are
    /// [`crate::cm::CmManager::qp_attrs`]'s), then `establish` sends the RTU.
    ConnectResponse {
        /// The peer's QP.
        remote_qpn: u32,
        /// The REP's private data (196 bytes).
        private_data: Vec<u8>,
    },
    /// The peer rejected (RDMA_CM_EVENT_REJECTED).
    Rejected(Rejection),
    /// No answer after every retry (RDMA_CM_EVENT_UNREACHABLE, status -ETIMEDOUT).
    Unreachable,
    /// Setting up the QP failed (RDMA_CM_EVENT_CONNECT_ERROR). The CM core never emits it: the
    /// engine raises it when it cannot apply a [`QpRequest`], then destroys the handle.
    ConnectError,
    /// The connection is closed (RDMA_CM_EVENT_DISCONNECTED); the QP was moved to ERR.
    Disconnected,
    /// Time-wait is over; the handle is gone (RDMA_CM_EVENT_TIMEWAIT_EXIT).
    TimewaitExit,
    /// A UD service was resolved (RDMA_CM_EVENT_ESTABLISHED for UD): send to `qpn` with `qkey`.
    SidrResolved {
        /// The serving QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
    },
    /// A SIDR_REQ for a listened UD service (RDMA_CM_EVENT_CONNECT_REQUEST on a UDP id);
    /// answer with sidr_accept or sidr_reject.
    SidrRequest {
        /// The listened service ID.
        service_id: u64,
        /// rdma_cm's header.
        cma: CmaHdr,
        /// The user's private data (after rdma_cm's header).
        private_data: Vec<u8>,
    },
    /// SIDR answered with a non-success status (RDMA_CM_EVENT_UNREACHABLE for UD).
    SidrFailed {
        /// The SIDR_REP status, or None when no answer came.
        status: Option<u8>,
    },
}

/// An event on handle `id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CmEvent {
    /// The handle.
    pub id: CmId,
    /// What happened.
    pub kind: CmEventKind,
}

/// Something the engine must do for the CM.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmOutput {
    /// Send this 256-byte MAD as a UD SEND from QP1 to QP1 of `to` (Q_Key 0x80010000,
    /// P_Key 0xffff).
    SendMad {
        /// The peer's address (its GID).
        to: IpAddr,
        /// The MAD.
        mad: Box<[u8; crate::wire::cm::MAD_LEN]>,
    },
    /// Change a QP's state; apply before sending any later MAD of the same output batch.
    ModifyQp(QpRequest),
    /// Tell the application.
    Event(CmEvent),
}

/// Why an API call failed; each maps to the errno librdmacm returns.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum CmError {
    /// No such handle (EINVAL).
    #[error("unknown CM handle {0:?}")]
    UnknownId(CmId),
    /// The call does not fit the handle's state (EINVAL).
    #[error("operation not valid in state {0}")]
    InvalidState(&'static str),
    /// Private data longer than the message allows (EINVAL).
    #[error("private data of {got} bytes, at most {max} allowed")]
    PrivateDataTooLong {
        /// Bytes given.
        got: usize,
        /// The limit.
        max: usize,
    },
    /// Someone listens on this service already (EADDRINUSE).
    #[error("service ID 0x{0:016x} already listened on")]
    AddressInUse(u64),
    /// A table is full (ENOMEM).
    #[error("{0} table full")]
    TableFull(&'static str),
    /// An argument is out of range (EINVAL).
    #[error("bad argument: {0}")]
    BadArgument(&'static str),
}

impl CmError {
    /// The errno librdmacm would report.
    pub fn errno(&self) -> i32 {
        match self {
            CmError::AddressInUse(_) => libc::EADDRINUSE,
            CmError::TableFull(_) => libc::ENOMEM,
            _ => libc::EINVAL,
        }
    }
}

/// A REQ waiting for a listener (see `held_reqs.rs`).
#[derive(Debug)]
pub(super) struct HeldReq {
    pub(super) from: IpAddr,
    /// Its transaction ID, which the REJ repeats.
    pub(super) tid: u64,
    pub(super) service_id: u64,
    pub(super) remote_comm_id: u32,
    /// When it is rejected if nobody listened meanwhile.
    pub(super) until_ns: u64,
    pub(super) mad: Box<[u8; crate::wire::cm::MAD_LEN]>,
}
