//! Datagram I/O: the [`Link`] trait and its implementations (UDP sockets, an in-process
//! channel network, Ethernet frames over a qemu socket netdev), a fault-injecting wrapper
//! for any, plus pcap reading and writing.
//!
//! A link owns the IP and UDP headers of what it sends, so it is also where the ICRC is
//! written: the ICRC covers those headers (see `wire::icrc`).

pub mod arp;
pub mod batched_io;
/// The old name of [`batched_io`], kept while tools use it.
pub use batched_io as batch_sys;
pub mod channel;
pub mod ethernet;
pub mod fault;
pub mod gro_mode;
pub mod icrc_check;
pub mod multicast;
pub mod pacer;
pub mod packet;
pub mod packet_pool;
pub mod pcap;
pub mod qemu_socket;
pub mod send_plan;
pub mod shared_port;
mod socket_options;
pub mod udp;
mod udp_receive;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use packet::{OutPacket, PathInfo};

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
    /// The IPv4 identification it carried, when the link knows it (in-process links); a UDP
    /// socket does not report it.
    pub ipv4_identification: Option<u16>,
}

/// A received datagram lent by the link (its buffer is reused for the next one): what
/// [`Link::recv_ready`] hands out, so that receiving copies nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramView<'a> {
    /// Sender's IP address and UDP port.
    pub src: SocketAddr,
    /// Our IP address and UDP port it was sent to.
    pub dst: SocketAddr,
    /// UDP payload (BTH .. ICRC).
    pub payload: &'a [u8],
    /// The IPv4 identification it carried, when the link knows it.
    pub ipv4_identification: Option<u16>,
}

impl InDatagram {
    /// A view of this datagram.
    pub fn view(&self) -> DatagramView<'_> {
        DatagramView {
            src: self.src,
            dst: self.dst,
            payload: &self.payload,
            ipv4_identification: self.ipv4_identification,
        }
    }
}

impl<'a> From<&'a InDatagram> for DatagramView<'a> {
    fn from(d: &'a InDatagram) -> Self {
        d.view()
    }
}

impl DatagramView<'_> {
    /// An owned copy.
    pub fn to_owned(&self) -> InDatagram {
        InDatagram {
            src: self.src,
            dst: self.dst,
            payload: self.payload.to_vec(),
            ipv4_identification: self.ipv4_identification,
        }
    }
}

/// A datagram link of one device: its local address, a send path and a receive path.
pub trait Link: Send + Sync {
    /// The local IP address and UDP port.
    fn local_addr(&self) -> SocketAddr;
    /// Writes the ICRC into `packet.bytes` for the IP and UDP headers this link really sends
    /// it with. `InvalidInput` if the destination cannot be reached from this link (another
    /// address family).
    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()>;
    /// Sends `packet.bytes` exactly as they are (ICRC already written by [`Link::finalize`]).
    /// Split from `send` so that a wrapper can change the bytes after the ICRC was computed,
    /// as corruption on the wire would. Errors are the OS's; a dropped datagram is not an
    /// error (the transport retries).
    fn send_raw(&self, packet: &OutPacket) -> io::Result<()>;
    /// Writes the ICRC into `packet.bytes` and sends it: [`Link::finalize`] then
    /// [`Link::send_raw`].
    fn send(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.finalize(packet)?;
        self.send_raw(packet)
    }
    /// Waits up to `timeout` for one datagram. `Ok(None)` on timeout. Call in a loop.
    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>>;

    /// Writes the ICRC of every packet and sends them, in order, with as few system calls as
    /// the link can. Every packet is attempted; the first error is returned.
    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        let mut first = Ok(());
        for p in packets {
            if let Err(e) = self.send(p) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// [`Link::send_batch`] for packets of which some leave their payload in registered
    /// memory ([`OutPacket::payload`]): `payloads[i]` is packet `i`'s (empty for a packet
    /// that carries its own). A link that can hand the kernel that memory directly does; by
    /// default the payloads are copied into the packets first.
    fn send_batch_from(&self, packets: &mut [OutPacket], payloads: &[&[u8]]) -> io::Result<()> {
        for (p, payload) in packets.iter_mut().zip(payloads) {
            p.fill_payload(payload);
        }
        self.send_batch(packets)
    }

    /// Whether [`Link::join_group`] can work: the link carries IP multicast.
    fn carries_multicast(&self) -> bool {
        false
    }

    /// Joins IP multicast group `group` for this link's device: the socket the group's
    /// datagrams to the device's port arrive on (see [`multicast`]), or `None` when they
    /// arrive through the link's own receive path (a link that sees whole frames).
    /// `Unsupported` (the default) for a link without IP multicast.
    fn join_group(&self, group: std::net::IpAddr) -> io::Result<Option<multicast::GroupSocket>> {
        let _ = group;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this link carries no IP multicast",
        ))
    }

    /// The QP numbers this link's device may hand out, when it shares its port with other
    /// processes (`shared_port`): the datagrams of other numbers go to their owners. `None`:
    /// all of them.
    fn qpn_range(&self) -> Option<std::ops::Range<u32>> {
        None
    }

    /// The member's end of a shared port, when this link is one (or wraps one): its slot,
    /// counters and registry entry. `None` for a link the process has to itself.
    fn shared_port(&self) -> Option<&shared_port::member::Member> {
        None
    }

    /// Before this link's socket closes (its process exiting): when it is a member of a
    /// shared port, steers nothing more to it and passes on what it holds for others
    /// ([`shared_port::member::Member::hand_over`]). Nothing to do for any other link.
    fn hand_over_shared_port(&self) -> io::Result<()> {
        Ok(())
    }

    /// Whether [`Link::wait_readable`] and [`Link::recv_ready`] are real: waiting without
    /// receiving, and receiving without waiting. Then the engine thread and polling
    /// applications can share the receive path; a link answering `false` is only ever used
    /// through [`Link::recv`] by the engine thread.
    fn pollable(&self) -> bool {
        false
    }

    /// How long a receiver should keep polling after its last datagram before it sleeps in
    /// [`Link::wait_readable`]: as long as waking a sleeper costs the sender more than a
    /// receiver's polling costs the machine. Zero (the default) never polls. Only meaningful
    /// when [`Link::pollable`].
    fn poll_before_sleep(&self) -> Duration {
        Duration::ZERO
    }

    /// Waits up to `timeout` until a datagram is there, without taking it; `Ok(false)` on
    /// timeout. Only meaningful when [`Link::pollable`].
    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let _ = timeout;
        Ok(true)
    }

    /// Hands datagrams that are already there to `sink`, in arrival order, without waiting,
    /// from up to `max` receives (one receive may carry a run of datagrams the kernel
    /// coalesced, see `udp`); returns the receives. Call again while it returns `max`. The
    /// datagram lent to `sink` is the link's own buffer, reused for the next one.
    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.recv(Duration::from_micros(1))? {
                Some(d) => sink(d.view()),
                None => break,
            }
            n += 1;
        }
        Ok(n)
    }
}
