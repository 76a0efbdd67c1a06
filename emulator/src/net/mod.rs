//! Datagram I/O: the [`Link`] trait and its implementations (UDP sockets, an in-process
//! channel network), plus pcap reading and writing.
//!
//! A link owns the IP and UDP headers of what it sends, so it is also where the ICRC is
//! written: the ICRC covers those headers (see `wire::icrc`).

pub mod channel;
pub mod pcap;
mod sys;
pub mod udp;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::transport::OutPacket;

/// Largest datagram a link carries: a 4096-byte MTU packet plus every RoCE header, rounded up.
pub const MAX_DATAGRAM_BYTES: usize = 4096 + 128;

/// A received datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InDatagram {
    /// Sender's IP address and UDP port.
    pub src: SocketAddr,
    /// Our IP address and UDP port it was sent to.
    pub dst: SocketAddr,
    /// UDP payload (BTH .. ICRC).
    pub payload: Vec<u8>,
}

/// A datagram link of one device: its local address, a send path and a receive path.
pub trait Link: Send + Sync {
    /// The local IP address and UDP port.
    fn local_addr(&self) -> SocketAddr;
    /// Writes the ICRC into `packet.bytes` (for the headers this link really sends) and sends
    /// it. Errors are the OS's; a dropped datagram is not an error (the transport retries).
    fn send(&self, packet: &mut OutPacket) -> io::Result<()>;
    /// Waits up to `timeout` for one datagram. `Ok(None)` on timeout. Call in a loop.
    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>>;
}
