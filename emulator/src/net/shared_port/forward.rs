//! The safety net of port sharing: a member that receives a datagram meant for another
//! member's slot (a steering program not yet updated, QP1 MADs, the kernel's hash fallback)
//! passes it on over a Unix datagram socket, with the original sender's address and the
//! IPv4 identification in front, so the owner's receive pipeline sees the datagram exactly
//! as if the kernel had steered it there.
//!
//! Each member binds an abstract socket named after the device and its slot: no file to
//! clean up, and the name goes when the process does.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::super::{DatagramView, InDatagram, MAX_DATAGRAM_BYTES};

/// Bytes in front of a forwarded datagram: family (1), IP (16), port (2), whether the
/// IPv4 identification is known (1), the identification (2).
const HEADER_BYTES: usize = 22;
/// How long a forward waits for room in the owner's queue before dropping the datagram.
/// A Unix datagram socket queues `net.unix.max_dgram_qlen` datagrams (10 by default),
/// which a stream steered the wrong way for a moment (a stale program, right after a
/// member left) fills at once; the owner takes them within its next few receive calls
/// (a polling owner looks every few tens of microseconds, a waiting one wakes), so a
/// short wait turns those drops, each an RC retransmission later, into a delay.
pub const FORWARD_PATIENCE: Duration = Duration::from_millis(2);

/// The abstract socket name of `slot` of the device on `device` (its IP address and port).
fn name(device: SocketAddr, slot: u8) -> Vec<u8> {
    format!("softverbs/{device}/{slot}").into_bytes()
}

/// One member's end of the forwarding sockets.
pub struct Forwarder {
    socket: UnixDatagram,
    device: SocketAddr,
    /// The buffer [`Forwarder::try_recv`] receives into, allocated once: the receive
    /// usually finds nothing (a polling application looks every few polls), and a zeroed
    /// buffer of a full datagram per look cost more than the look's system call.
    scratch: Mutex<Vec<u8>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("socket", &self.socket)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// Binds the forwarding socket of `slot` on `device`. `AddrInUse` if a live process has
    /// it (the slot registry keeps that from happening).
    pub fn bind(device: SocketAddr, slot: u8) -> io::Result<Forwarder> {
        let addr = UnixAddr::from_abstract_name(name(device, slot))?;
        let socket = UnixDatagram::bind_addr(&addr)?;
        socket.set_nonblocking(true)?;
        Ok(Forwarder {
            socket,
            device,
            scratch: Mutex::new(vec![0; HEADER_BYTES + MAX_DATAGRAM_BYTES]),
        })
    }

    /// Passes `datagram` on to the member holding `slot`. `Ok(false)` if no process has that
    /// slot's socket (the member is gone: the caller drops and counts the datagram) or its
    /// queue stayed full for [`FORWARD_PATIENCE`] (dropped like any datagram a full socket
    /// buffer refuses).
    pub fn forward(&self, slot: u8, datagram: DatagramView<'_>) -> io::Result<bool> {
        self.forward_within(slot, datagram, FORWARD_PATIENCE)
    }

    /// [`Forwarder::forward`], waiting at most `patience` for room in the owner's queue.
    pub fn forward_within(
        &self,
        slot: u8,
        datagram: DatagramView<'_>,
        patience: Duration,
    ) -> io::Result<bool> {
        let to = UnixAddr::from_abstract_name(name(self.device, slot))?;
        let mut buf = Vec::with_capacity(HEADER_BYTES + datagram.payload.len());
        encode_header(&mut buf, datagram.src, datagram.ipv4_identification);
        buf.extend_from_slice(datagram.payload);
        let mut full_since = None;
        loop {
            match self.socket.send_to_addr(&buf, &to) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let since = *full_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= patience {
                        return Ok(false);
                    }
                    std::thread::yield_now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                    ) =>
                {
                    return Ok(false)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes one forwarded datagram if one waits (`Ok(None)` if none). A malformed one
    /// (shorter than the header, an unknown family) is dropped as `InvalidData`: only this
    /// user's processes can reach the socket, but none of them is trusted to be right.
    pub fn try_recv(&self) -> io::Result<Option<InDatagram>> {
        let mut buf = self.scratch.lock();
        let n = match self.socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        let (src, ipv4_identification) = decode_header(&buf[..n]).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "malformed forwarded datagram")
        })?;
        Ok(Some(InDatagram {
            src,
            dst: self.device,
            payload: buf[HEADER_BYTES..n].to_vec(),
            ipv4_identification,
        }))
    }

    /// The socket, for poll(2) beside the device's UDP socket.
    pub fn as_socket(&self) -> &UnixDatagram {
        &self.socket
    }
}

fn encode_header(buf: &mut Vec<u8>, src: SocketAddr, id: Option<u16>) {
    let (family, ip) = match src.ip() {
        IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (6u8, v6.octets()),
    };
    buf.push(family);
    buf.extend_from_slice(&ip);
    buf.extend_from_slice(&src.port().to_be_bytes());
    buf.push(u8::from(id.is_some()));
    buf.extend_from_slice(&id.unwrap_or(0).to_be_bytes());
}

fn decode_header(buf: &[u8]) -> Option<(SocketAddr, Option<u16>)> {
    let h = buf.get(..HEADER_BYTES)?;
    let octets: [u8; 16] = h[1..17].try_into().ok()?;
    let ip = match h[0] {
        4 => IpAddr::V4(Ipv6Addr::from(octets).to_ipv4_mapped()?),
        6 => IpAddr::V6(Ipv6Addr::from(octets)),
        _ => return None,
    };
    let port = u16::from_be_bytes([h[17], h[18]]);
    let id = match h[19] {
        0 => None,
        1 => Some(u16::from_be_bytes([h[20], h[21]])),
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn device(tag: u8) -> SocketAddr {
        // A name of this test's own: abstract names are per network namespace, so another
        // test process at once (a second clone's `cargo test`) takes its own by its pid. Only
        // a name: nothing binds this address.
        let port = 10_000 + (std::process::id() % 50_000) as u16;
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 29, 1, tag)), port)
    }

    #[test]
    fn a_forwarded_datagram_arrives_whole_with_its_sender_and_identification() {
        let dev = device(1);
        let a = Forwarder::bind(dev, 3).unwrap();
        let b = Forwarder::bind(dev, 9).unwrap();
        for (src, id) in [
            (
                SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), 49152),
                Some(0x1234),
            ),
            (SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 4791), None),
        ] {
            let d = InDatagram {
                src,
                dst: dev,
                payload: b"bth and the rest".to_vec(),
                ipv4_identification: id,
            };
            assert!(a.forward(9, d.view()).unwrap());
            let got = b.try_recv().unwrap().expect("forwarded");
            assert_eq!(got, d);
        }
        assert_eq!(b.try_recv().unwrap(), None);
    }

    #[test]
    fn a_slot_nobody_binds_is_reported_not_an_error_and_names_are_exclusive() {
        let dev = device(2);
        let a = Forwarder::bind(dev, 3).unwrap();
        let d = InDatagram {
            src: dev,
            dst: dev,
            payload: vec![1, 2, 3],
            ipv4_identification: None,
        };
        assert!(!a.forward(200, d.view()).unwrap());
        let err = Forwarder::bind(dev, 3).expect_err("slot 3's name is taken");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        drop(a);
        Forwarder::bind(dev, 3).expect("free again once its holder closed it");
    }

    #[test]
    fn a_burst_longer_than_the_owners_queue_waits_for_room_rather_than_being_dropped() {
        let dev = device(4);
        let a = Forwarder::bind(dev, 3).unwrap();
        let b = Forwarder::bind(dev, 9).unwrap();
        let datagram = |n: u32| InDatagram {
            src: dev,
            dst: dev,
            payload: n.to_be_bytes().to_vec(),
            ipv4_identification: None,
        };
        // Nobody takes from b's queue: it fills, and a forward gives up after its wait.
        let mut queued = 0u32;
        while a
            .forward_within(9, datagram(queued).view(), Duration::ZERO)
            .unwrap()
        {
            queued += 1;
            assert!(queued < 10_000, "the queue never filled");
        }
        let refused = Instant::now();
        assert!(!a
            .forward_within(9, datagram(queued).view(), Duration::from_millis(20))
            .unwrap());
        assert!(refused.elapsed() >= Duration::from_millis(20), "it waited");
        // With b taking from its queue meanwhile, a burst of four queues' worth all goes.
        let burst = 4 * queued;
        let taker = std::thread::spawn(move || {
            let mut got = Vec::new();
            let started = Instant::now();
            while got.len() < (queued + burst) as usize
                && started.elapsed() < Duration::from_secs(10)
            {
                match b.try_recv().unwrap() {
                    Some(d) => got.push(u32::from_be_bytes(d.payload[..4].try_into().unwrap())),
                    None => std::thread::yield_now(),
                }
            }
            got
        });
        for n in queued..queued + burst {
            assert!(
                a.forward_within(9, datagram(n).view(), Duration::from_secs(5))
                    .unwrap(),
                "datagram {n} dropped"
            );
        }
        let got = taker.join().unwrap();
        assert_eq!(
            got,
            (0..queued + burst).collect::<Vec<u32>>(),
            "all, in order"
        );
    }

    #[test]
    fn malformed_forwarded_datagrams_are_refused() {
        assert_eq!(decode_header(&[4, 0, 0]), None);
        let mut buf = Vec::new();
        encode_header(&mut buf, device(3), None);
        buf[0] = 5;
        assert_eq!(decode_header(&buf), None);
        buf[0] = 4;
        buf[19] = 2;
        assert_eq!(decode_header(&buf), None);
        buf[19] = 0;
        assert_eq!(decode_header(&buf), Some((device(3), None)));
    }
}
