//! RoCEv2 over a real UDP socket (socket2), bound to the device's IP address and port 4791.
//!
//! Sending: the socket is unconnected and does real path-MTU discovery (`IP_PMTUDISC_DO`,
//! see [`super::sys`]), so every IPv4 datagram goes out with DF set and IP identification 0;
//! the ICRC is computed for exactly that header, which is what a kernel rxe receiver checks
//! (verified with tcpdump + tshark). The UDP source port is the socket's own (4791), not the
//! per-QP port rxe picks: one socket cannot vary it, receivers do not care, and the ICRC is
//! computed for the port really sent.
//!
//! Receiving: a UDP socket does not report the sender's IP identification, which the ICRC
//! covers; the engine solves for it (`wire::solve_ipv4_identification`).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use parking_lot::Mutex;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::batch_sys::{self, RecvSlots, MAX_BATCH};
use super::{InDatagram, Link, MAX_DATAGRAM_BYTES};
use crate::transport::OutPacket;
use crate::wire::{write_icrc, IcrcContext, IpHeaderInfo};

/// Flags + fragment offset of the IPv4 packets this link sends: DF, no fragmentation.
const IPV4_DF: u16 = 0x4000;
/// Socket buffer size asked for: bursts of a 128-packet window of 4 KiB packets fit.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// A UDP socket link.
///
/// The socket is non-blocking: waits are poll(2) ([`Link::wait_readable`]), receives are
/// recvmmsg batches into buffers allocated once, sends of a batch are one sendmmsg.
pub struct UdpLink {
    socket: UdpSocket,
    local: SocketAddr,
    /// Receive buffers and the datagram lent to receivers (one receiver at a time).
    rx: Mutex<RxBuffers>,
}

struct RxBuffers {
    slots: RecvSlots,
    scratch: InDatagram,
}

impl UdpLink {
    /// Binds `ip:port`.
    pub fn bind(ip: IpAddr, port: u16) -> io::Result<UdpLink> {
        let local = SocketAddr::new(ip, port);
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if ip.is_ipv6() {
            socket.set_only_v6(true)?;
        } else {
            super::sys::set_pmtudisc_do(&socket)?;
        }
        // Best effort: an unprivileged process is capped at net.core.{r,w}mem_max.
        if super::sys::set_recv_buffer_force(&socket, SOCKET_BUFFER_BYTES).is_err() {
            let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
        }
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
        socket.bind(&SockAddr::from(local))?;
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        socket.set_nonblocking(true)?;
        // socket2 for the options, std for safe I/O into initialised buffers.
        Ok(UdpLink {
            socket: socket.into(),
            local,
            rx: Mutex::new(RxBuffers {
                slots: RecvSlots::new(MAX_BATCH, MAX_DATAGRAM_BYTES),
                scratch: InDatagram {
                    src: local,
                    dst: local,
                    payload: Vec::with_capacity(MAX_DATAGRAM_BYTES),
                    ipv4_identification: None,
                },
            }),
        })
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
        let mut got = None;
        if self.wait_readable(timeout)? {
            self.recv_ready(1, &mut |d| got = Some(d.clone()))?;
        }
        Ok(got)
    }

    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        let mut first = Ok(());
        for chunk in packets.chunks_mut(MAX_BATCH) {
            let mut list: [(&[u8], SocketAddr); MAX_BATCH] = [(&[][..], self.local); MAX_BATCH];
            for p in chunk.iter_mut() {
                self.finalize(p)?;
            }
            for (slot, p) in list.iter_mut().zip(chunk.iter()) {
                *slot = (&p.bytes[..], SocketAddr::new(p.dst_ip, p.udp_dst_port));
            }
            let n = chunk.len();
            let mut done = 0;
            while done < n {
                match batch_sys::send_batch(&self.socket, &list[done..n]) {
                    Ok(k) => done += k.max(1),
                    // A full socket buffer or no buffer memory is loss, as in send_raw: skip
                    // the datagram the kernel refused.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => done += 1,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => done += 1,
                    Err(e) => {
                        if first.is_ok() {
                            first = Err(e);
                        }
                        done += 1;
                    }
                }
            }
        }
        first
    }

    fn pollable(&self) -> bool {
        true
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        batch_sys::wait_readable(&self.socket, timeout)
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(&InDatagram)) -> io::Result<usize> {
        let mut rx = self.rx.lock();
        let RxBuffers { slots, scratch } = &mut *rx;
        let mut total = 0;
        while total < max {
            let want = (max - total).min(slots.capacity());
            let n = match batch_sys::recv_batch_now(&self.socket, slots, want) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    break
                }
                // An ICMP error queued for an earlier send: not a receive failure.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            for i in 0..n {
                let (bytes, src) = slots.get(i);
                let Some(src) = src else { continue };
                scratch.src = src;
                scratch.payload.clear();
                scratch.payload.extend_from_slice(bytes);
                sink(scratch);
            }
            total += n;
            if n < want {
                break;
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

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
