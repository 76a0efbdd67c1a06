//! One SIDR exchange's state (the record the manager keeps; the protocol is sidr.rs).

use std::net::IpAddr;

use crate::wire::cm::MAD_LEN;

/// SIDR states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidrState {
    /// Requester: SIDR_REQ sent, SIDR_REP awaited.
    ReqSent,
    /// Server: request handed to the application, answer awaited.
    ReqRcvd,
    /// Server: answered; duplicates get the stored SIDR_REP until the deadline.
    Answered,
}

/// One SIDR exchange.
#[derive(Debug, Clone)]
pub(crate) struct Sidr {
    pub state: SidrState,
    pub peer: IpAddr,
    /// The requester's request ID (for the server: the peer's).
    pub request_id: u32,
    pub service_id: u64,
    pub tid: u64,
    pub timeout_ns: u64,
    pub retries_left: u8,
    pub deadline_ns: Option<u64>,
    pub last_sent: Option<Box<[u8; MAD_LEN]>>,
    pub quiet: bool,
}
