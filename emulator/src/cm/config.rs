//! Per-device CM configuration: identity, seed, defaults rdma_cm uses, and the limits on
//! every table and queue.

use std::net::IpAddr;

use super::timing::{CMA_CM_RESPONSE_TIMEOUT, CMA_IBOE_PACKET_LIFETIME, CMA_MAX_CM_RETRIES};

/// User private data librdmacm allows per message (after rdma_cm's own header where it
/// adds one).
pub mod private_data_max {
    /// rdma_connect on a TCP port space: 92 bytes of REQ minus the 36-byte header.
    pub const CONNECT: usize = 56;
    /// rdma_accept (REP).
    pub const ACCEPT: usize = 196;
    /// rdma_reject (REJ).
    pub const REJECT: usize = 148;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DISCONNECT: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ: 216 minus the 36-byte header.
    pub const SIDR_REQ: usize = 180;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// Configuration of one device's CM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's address (its GID).
    pub local_addr: IpAddr,
    /// The device's node GUID (goes in REQ/REP).
    pub ca_guid: u64,
    /// Seed of the communication ID and PSN generator; the engine passes fresh randomness.
    pub seed: u64,
    /// High 32 bits of every transaction ID this CM makes (the kernel uses its MAD agent's).
    pub tid_hi: u32,
    /// Packet life time of paths (IBA time value).
    pub packet_life_time: u8,
    /// CM response timeout announced and assumed for the peer (IBA time value).
    pub cm_response_timeout: u8,
    /// CM message retries before giving up (4 bits on the wire).
    pub max_cm_retries: u8,
    /// The CA's ACK delay (IBA time value; goes in REP's target ACK delay).
    pub ca_ack_delay: u8,
    /// Live connections (all states including time-wait) at most.
    pub max_connections: usize,
    /// Listened services at most.
    pub max_listeners: usize,
    /// Outstanding SIDR requests (both directions) at most.
    pub max_sidr: usize,
    /// Queued MAD sends at most; sends beyond it are dropped (and counted), then retried.
    pub max_queued_sends: usize,
    /// The top byte of every local communication ID and SIDR request ID, when set: on a
    /// device shared by several processes, the slot of this one, so that the MADs
    /// answering those IDs reach it. `None`: IDs from the whole 32-bit space.
    pub comm_id_prefix: Option<u8>,
    /// How long a REQ for a service nobody listens on waits for a listener before the REJ
    /// "invalid service ID" (see `held_reqs.rs`); 0 rejects at once, as the kernel.
    pub req_hold_ns: u64,
    /// REQs held so at most; beyond it they are rejected at once.
    pub max_held_reqs: usize,
}

impl CmConfig {
    /// rdma_cm's defaults on rxe for a device at `local_addr`.
    pub fn new(local_addr: IpAddr, ca_guid: u64, seed: u64) -> CmConfig {
        CmConfig {
            local_addr,
            ca_guid,
            seed,
            tid_hi: 1,
            packet_life_time: CMA_IBOE_PACKET_LIFETIME,
            cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: CMA_MAX_CM_RETRIES,
            ca_ack_delay: super::timing::RXE_LOCAL_CA_ACK_DELAY,
            max_connections: 1024,
            max_listeners: 64,
            max_sidr: 256,
            max_queued_sends: 4096,
            comm_id_prefix: None,
            req_hold_ns: 250_000_000,
            max_held_reqs: 16,
        }
    }
}
