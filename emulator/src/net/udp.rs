//! RoCEv2 over a real UDP socket (socket2), bound to the device's IP address and port 4791.
//!
//! Sending: the socket is unconnected and does real path-MTU discovery (`IP_PMTUDISC_DO`,
//! see `super::socket_options`), so every IPv4 datagram goes out with DF set and IP identification 0;
//! the ICRC is computed for exactly that header, which is what a kernel rxe receiver checks
//! (verified with tcpdump + tshark). The UDP source port is the socket's own (4791), not the
//! per-QP port rxe picks: one socket cannot vary it, receivers do not care, and the ICRC is
//! computed for the port really sent.
//!
//! Receiving: a UDP socket does not report the sender's IP identification, which the ICRC
//! covers; the engine solves for it (`wire::solve_ipv4_identification`).
//!
//! Batching: the socket is non-blocking; waits are poll(2), receives recvmmsg batches into
//! buffers allocated once, and the packets of one transport call leave in one sendmmsg.
//! Towards loopback addresses, runs of equal-sized packets to one destination (the middle
//! and last packets of a message) are one entry of that sendmmsg, a UDP GSO send, and the
//! socket asks for GRO, so that such a run crosses the kernel as one buffer; receives split
//! it again (`udp_receive`). A socket that gets single datagrams one at a time (a
//! ping-pong) turns GRO off meanwhile and receives with recvfrom (`gro_mode`). Loopback
//! only, because the kernel numbers the IPv4 identification of GSO
//! segments 0, 1, 2 ... while each packet's ICRC covers identification 0: a softverbs
//! receiver never sees the IP header (it assumes 0 for port-4791 senders), a kernel rxe on
//! a wire would. Without GSO in the kernel the first refused send turns it off and sendmmsg
//! carries everything.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::batched_io::{self, Datagram, MAX_BATCH};
use super::send_plan;
use super::udp_receive::Receiver;
use super::OutPacket;
use super::{DatagramView, InDatagram, Link};
use crate::wire::{write_icrc, write_icrc_with_payload, IcrcContext, IpHeaderInfo};

/// Flags + fragment offset of the IPv4 packets this link sends: DF, no fragmentation.
const IPV4_DF: u16 = 0x4000;
/// Socket buffer size asked for: bursts of a 128-packet window of 4 KiB packets fit.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Environment variable: `0` turns UDP GSO / GRO off.
pub const GSO_ENV: &str = "SOFTVERBS_UDP_GSO";

/// A UDP socket link.
///
/// The socket is non-blocking: waits are poll(2) ([`Link::wait_readable`]), receives are
/// recvmmsg batches into buffers allocated once, sends of a batch are one sendmmsg.
pub struct UdpLink {
    socket: UdpSocket,
    local: SocketAddr,
    /// The receive side (one receiver at a time).
    rx: Mutex<Receiver>,
    /// UDP GSO is used for loopback destinations (cleared when the kernel refuses it).
    gso: AtomicBool,
}

impl UdpLink {
    /// Binds `ip:port`.
    pub fn bind(ip: IpAddr, port: u16) -> io::Result<UdpLink> {
        UdpLink::bind_with(ip, port, false)
    }

    /// Binds `ip:port` with `SO_REUSEPORT`, as one member of the processes sharing that
    /// port (see `shared_port`).
    pub fn bind_shared(ip: IpAddr, port: u16) -> io::Result<UdpLink> {
        UdpLink::bind_with(ip, port, true)
    }

    /// The socket: for what only port sharing does with it (steering programs, probes), and
    /// for benchmarks that time raw UDP over a device's socket setup.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    fn bind_with(ip: IpAddr, port: u16, reuse_port: bool) -> io::Result<UdpLink> {
        let local = SocketAddr::new(ip, port);
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        if ip.is_ipv6() {
            socket.set_only_v6(true)?;
        } else {
            super::socket_options::set_pmtudisc_do(&socket)?;
        }
        // Best effort: an unprivileged process is capped at net.core.{r,w}mem_max.
        if super::socket_options::set_recv_buffer_force(&socket, SOCKET_BUFFER_BYTES).is_err() {
            let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
        }
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
        socket.bind(&SockAddr::from(local))?;
        // UD multicast sends leave through the device's own interface (see `multicast`);
        // without it they follow the routing table, which is no reason to refuse the device.
        if let Err(e) = super::multicast::set_multicast_interface(&socket, ip) {
            tracing::debug!("{local}: IP_MULTICAST_IF: {e}");
        }
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        socket.set_nonblocking(true)?;
        // SOFTVERBS_UDP_GSO=0 turns GSO and GRO off (to compare, or for a peer that
        // needs plain datagrams).
        let wanted = std::env::var(GSO_ENV).map_or(true, |v| v != "0");
        let gro = wanted && batched_io::set_udp_gro(&socket, true).is_ok();
        // socket2 for the options, std for safe I/O into initialised buffers.
        Ok(UdpLink {
            socket: socket.into(),
            local,
            gso: AtomicBool::new(gro),
            rx: Mutex::new(Receiver::new(gro)),
        })
    }

    /// Whether the socket coalesces received GSO runs (UDP GRO) now: off while it gets single
    /// datagrams one receive at a time (see `gro_mode`).
    pub fn coalescing(&self) -> bool {
        self.rx.lock().coalescing()
    }

    fn icrc_context(&self, dst: SocketAddr) -> IcrcContext {
        let ip = match (self.local.ip(), dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpHeaderInfo::V4 {
                src,
                dst,
                identification: 0,
                flags_fragment: IPV4_DF,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpHeaderInfo::V6 { src, dst },
            // Mixed families cannot be sent; the send itself reports that.
            (IpAddr::V4(src), IpAddr::V6(dst)) => IpHeaderInfo::V6 {
                src: src.to_ipv6_mapped(),
                dst,
            },
            (IpAddr::V6(src), IpAddr::V4(dst)) => IpHeaderInfo::V6 {
                src,
                dst: dst.to_ipv6_mapped(),
            },
        };
        IcrcContext {
            ip,
            udp_src_port: self.local.port(),
            udp_dst_port: dst.port(),
        }
    }
}

impl UdpLink {
    /// Sends `list` (ICRCs written) in as few sendmmsg calls as the limits allow: one entry
    /// per plain datagram or GSO run, flushed when either limit of a call is reached.
    fn send_all<D: Datagram>(&self, list: &[D]) -> io::Result<()> {
        if let [only] = list {
            if only.bytes().len() <= SEND_ALONE_MAX {
                return self.send_alone(only);
            }
        }
        let mut first = Ok(());
        let run_of = |rest: &[D]| {
            if self.gso.load(Ordering::Relaxed) {
                gso_run(rest)
            } else {
                1
            }
        };
        send_plan::group_calls(list, run_of, |start, runs| {
            if let (Err(e), true) = (self.flush(&list[start..], runs), first.is_ok()) {
                first = Err(e);
            }
        });
        first
    }

    /// Sends one small datagram with sendto, its parts gathered into one buffer: a ping-pong's
    /// message leaves alone, and sendto costs less than a sendmmsg of one entry (0.13 us of
    /// a raw UDP ping-pong's half round trip, 3.35 against 3.48 us). A lost one (full
    /// buffer) is dropped as in [`UdpLink::flush`].
    fn send_alone<D: Datagram>(&self, datagram: &D) -> io::Result<()> {
        let parts = datagram.parts();
        let mut buf: [u8; SEND_ALONE_MAX];
        let bytes = if parts[1..].iter().all(|p| p.is_empty()) {
            // All in one piece (its payload copied in): sent as it is.
            parts[0]
        } else {
            buf = [0; SEND_ALONE_MAX];
            let mut len = 0;
            for part in parts {
                let end = len + part.len();
                let Some(room) = buf.get_mut(len..end) else {
                    return Err(io::Error::from(io::ErrorKind::InvalidInput));
                };
                room.copy_from_slice(part);
                len = end;
            }
            &buf[..len]
        };
        match batched_io::send_one(&self.socket, bytes, datagram.destination()) {
            Ok(_) => Ok(()),
            Err(e) if is_loss(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends `list` with sendmmsg, `runs` as in [`batched_io::send_runs`]; datagrams the
    /// kernel refuses for lack of buffer space are lost (the transport retransmits), other
    /// errors are returned after the rest went out. A GSO run the kernel refuses turns GSO
    /// off (said once) and leaves as plain datagrams.
    fn flush<D: Datagram>(&self, list: &[D], runs: &[usize]) -> io::Result<()> {
        let mut first = Ok(());
        let (mut entry, mut datagram) = (0, 0);
        while entry < runs.len() {
            let sent = match batched_io::send_runs(&self.socket, &list[datagram..], &runs[entry..])
            {
                Ok(k) => k.max(1),
                Err(e) if is_loss(&e) => 1,
                Err(e) if runs[entry] > 1 && gso_unsupported(&e) => {
                    if self.gso.swap(false, Ordering::Relaxed) {
                        tracing::debug!(error = %e, "UDP GSO refused; using sendmmsg");
                    }
                    // The run again, each datagram an entry of its own (a run is at most
                    // MAX_BATCH datagrams, see gso_run).
                    let run = runs[entry];
                    let plain = [1; MAX_BATCH];
                    let retried = self.flush(&list[datagram..datagram + run], &plain[..run]);
                    first = first.and(retried);
                    1
                }
                Err(e) => {
                    first = first.and(Err(e));
                    1
                }
            };
            for &run in &runs[entry..entry + sent] {
                datagram += run;
            }
            entry += sent;
        }
        first
    }
}

impl Datagram for OutPacket {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn destination(&self) -> SocketAddr {
        dst_of(self)
    }
    fn steering_slot(&self) -> Option<u8> {
        super::shared_port::steering::slot_of(&self.bytes)
    }
}

/// A packet whose payload, if it left it in registered memory, is `payload`.
struct FromMemory<'a> {
    packet: &'a OutPacket,
    payload: &'a [u8],
}

impl Datagram for FromMemory<'_> {
    fn bytes(&self) -> &[u8] {
        &self.packet.bytes
    }
    fn destination(&self) -> SocketAddr {
        dst_of(self.packet)
    }
    fn steering_slot(&self) -> Option<u8> {
        self.packet.steering_slot()
    }
    fn parts(&self) -> [&[u8]; batched_io::PARTS] {
        let bytes = &self.packet.bytes[..];
        match self.packet.payload {
            Some(r) => batched_io::parts_around(bytes, r.at, self.payload),
            None => [bytes, &[], &[]],
        }
    }
}

fn dst_of(p: &OutPacket) -> SocketAddr {
    SocketAddr::new(p.dst_ip, p.udp_dst_port)
}

/// The largest datagram sent alone with sendto ([`UdpLink::send_alone`]): small messages,
/// ACKs and requests without payload; the copy into one buffer costs less than the call
/// saves up to here.
const SEND_ALONE_MAX: usize = 512;

/// A send error that is just a lost datagram: a full socket buffer, or no buffer memory.
fn is_loss(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// The errors of a kernel (or route) without UDP GSO.
fn gso_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOPROTOOPT | libc::EIO | libc::EOPNOTSUPP)
    )
}

/// How many packets from the start of `packets` can leave as one GSO send
/// ([`send_plan::gso_run`]), towards loopback destinations only. 1 means send it alone.
fn gso_run<D: Datagram>(packets: &[D]) -> usize {
    match packets.first() {
        Some(head) if !head.destination().ip().is_loopback() => 1,
        _ => send_plan::gso_run(packets),
    }
}

impl Link for UdpLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        let dst = SocketAddr::new(packet.dst_ip, packet.udp_dst_port);
        write_icrc(&self.icrc_context(dst), &mut packet.bytes);
        Ok(())
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        let dst = SocketAddr::new(packet.dst_ip, packet.udp_dst_port);
        match self.socket.send_to(&packet.bytes, dst) {
            Ok(_) => Ok(()),
            // A full socket buffer is packet loss, which the transport recovers from.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        if let Some(d) = self.rx.lock().backlog.pop_front() {
            return Ok(Some(d));
        }
        if self.wait_readable(timeout)? {
            // One receive may bring a GRO run: keep what is not returned now.
            let mut got = Vec::new();
            self.recv_ready(1, &mut |d| got.push(d.to_owned()))?;
            let mut rx = self.rx.lock();
            rx.backlog.extend(got);
            return Ok(rx.backlog.pop_front());
        }
        Ok(None)
    }

    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        for p in packets.iter_mut() {
            self.finalize(p)?;
        }
        self.send_all(packets)
    }

    /// Zero copy: each packet's payload goes to the kernel as an iovec into registered
    /// memory, between its headers and its pad and ICRC (the ICRC computed over it there).
    fn send_batch_from(&self, packets: &mut [OutPacket], payloads: &[&[u8]]) -> io::Result<()> {
        let payload_of = |i: usize| payloads.get(i).copied().unwrap_or_default();
        // The packets of a send mostly share their destination: its ICRC context is made once.
        let mut last: Option<(SocketAddr, IcrcContext)> = None;
        for (i, p) in packets.iter_mut().enumerate() {
            match (p.payload, payload_of(i)) {
                (Some(r), payload) if !payload.is_empty() => {
                    let dst = dst_of(p);
                    let ctx = match last {
                        Some((to, ctx)) if to == dst => ctx,
                        _ => last.insert((dst, self.icrc_context(dst))).1,
                    };
                    write_icrc_with_payload(&ctx, &mut p.bytes, r.at, payload)
                }
                _ => self.finalize(p)?,
            }
        }
        // Inline up to a 64 KiB message at MTU 4096, as the payloads: no allocation.
        let list: smallvec::SmallVec<[FromMemory<'_>; 16]> = packets
            .iter()
            .enumerate()
            .map(|(i, packet)| FromMemory {
                packet,
                payload: payload_of(i),
            })
            .collect();
        self.send_all(&list)
    }

    fn carries_multicast(&self) -> bool {
        matches!(self.local.ip(), std::net::IpAddr::V4(v4) if !v4.is_unspecified())
    }

    fn join_group(&self, group: IpAddr) -> io::Result<Option<super::multicast::GroupSocket>> {
        super::multicast::GroupSocket::join(group, self.local.port(), self.local.ip()).map(Some)
    }

    fn pollable(&self) -> bool {
        true
    }

    /// A UDP datagram to a receiver asleep in ppoll costs its sender a wake-up inside the
    /// send call (the socket's wait queue, an IPI) and the receiver a context switch: a
    /// stream of small writes into a sleeping engine ran at 0.15 Mpps, against 0.21 with the
    /// engine polling. 50 µs covers the gaps of a stream and of a ping-pong.
    fn poll_before_sleep(&self) -> Duration {
        Duration::from_micros(50)
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        batched_io::wait_readable(&self.socket, timeout)
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        self.rx.lock().receive(&self.socket, self.local, max, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn out(dst: &str, len: usize) -> OutPacket {
        OutPacket {
            dst_ip: dst.parse().unwrap(),
            udp_dst_port: 4791,
            udp_src_port: 4791,
            bytes: vec![0; len],
            payload: None,
        }
    }

    #[test]
    fn gso_runs_are_equal_sized_loopback_packets_to_one_destination() {
        // A run is equal sizes, then at most one shorter packet, which ends it: FIRST (with
        // RETH) takes one MIDDLE as its shorter tail; MIDDLEs then a shorter LAST make a
        // run; nothing after a shorter packet joins it.
        let msg = [
            out("127.0.0.2", 4128),
            out("127.0.0.2", 4112),
            out("127.0.0.2", 4112),
            out("127.0.0.2", 1000),
            out("127.0.0.2", 1000),
        ];
        assert_eq!(gso_run(&msg), 2);
        assert_eq!(gso_run(&msg[1..]), 3);
        assert_eq!(gso_run(&msg[3..]), 2);
        assert_eq!(gso_run(&msg[4..]), 1);
        // Another destination ends a run; a non-loopback destination never starts one.
        let mixed = [out("127.0.0.2", 100), out("127.0.0.3", 100)];
        assert_eq!(gso_run(&mixed), 1);
        let wire = [out("10.0.0.2", 100), out("10.0.0.2", 100)];
        assert_eq!(gso_run(&wire), 1);
        // A QP of another steering slot (another process on a shared port) ends a run;
        // another QP of the same slot does not.
        let mut slots = [
            out("127.0.0.2", 100),
            out("127.0.0.2", 100),
            out("127.0.0.2", 100),
        ];
        slots[0].bytes[5..8].copy_from_slice(&[0x02, 0x8b, 0x54]);
        slots[1].bytes[5..8].copy_from_slice(&[0x02, 0x00, 0x11]);
        slots[2].bytes[5..8].copy_from_slice(&[0x01, 0xb3, 0xee]);
        assert_eq!(gso_run(&slots), 2);
        assert_eq!(gso_run(&slots[1..]), 1);
        // At most 64 segments and what fits one IPv4 datagram.
        let many: Vec<OutPacket> = (0..100).map(|_| out("::1", 100)).collect();
        assert_eq!(gso_run(&many), MAX_BATCH);
        let big: Vec<OutPacket> = (0..40).map(|_| out("127.0.0.2", 4112)).collect();
        assert_eq!(gso_run(&big), batched_io::GSO_MAX_BYTES / 4112);
        assert_eq!(gso_run::<OutPacket>(&[]), 0);
    }

    /// A datagram in pieces, as a packet whose payload lies in registered memory.
    struct Pieces<'a>([&'a [u8]; batched_io::PARTS], &'a [u8], SocketAddr);

    impl Datagram for Pieces<'_> {
        fn bytes(&self) -> &[u8] {
            self.1
        }
        fn destination(&self) -> SocketAddr {
            self.2
        }
        fn parts(&self) -> [&[u8]; batched_io::PARTS] {
            self.0
        }
    }

    #[test]
    fn a_small_datagram_sent_alone_arrives_whole_from_its_pieces() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let link = UdpLink::bind(ip, 0).unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (head, tail) = ([1u8; 12], [3u8; 4]);
        // One sent alone (sendto), one too large for that (sendmmsg): the same bytes.
        for len in [24, SEND_ALONE_MAX + 1] {
            let payload = vec![2u8; len - 16];
            let stand_in = vec![0u8; len];
            let d = Pieces(
                [&head, &payload, &tail],
                &stand_in,
                rx.local_addr().unwrap(),
            );
            link.send_all(&[d]).unwrap();
            let mut buf = [0u8; 1024];
            let n = rx.recv(&mut buf).unwrap();
            let want: Vec<u8> = [&head[..], &payload, &tail].concat();
            assert_eq!(&buf[..n], &want[..], "{len} B");
        }
    }

    #[test]
    fn recv_ready_takes_at_most_max_and_keeps_the_order() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let link = UdpLink::bind(ip, 0).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..5u8 {
            tx.send_to(&[i; 20], link.local_addr()).unwrap();
        }
        assert!(link.wait_readable(Duration::from_secs(5)).unwrap());
        let mut seen = Vec::new();
        let n = link
            .recv_ready(2, &mut |d| seen.push(d.payload[0]))
            .unwrap();
        assert_eq!((n, seen.clone()), (2, vec![0, 1]));
        while seen.len() < 5 {
            link.wait_readable(Duration::from_secs(5)).unwrap();
            link.recv_ready(64, &mut |d| seen.push(d.payload[0]))
                .unwrap();
        }
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert_eq!(link.recv(Duration::from_millis(1)).unwrap(), None);
    }
}
