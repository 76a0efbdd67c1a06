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

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{InDatagram, Link, MAX_DATAGRAM_BYTES};
use crate::transport::OutPacket;
use crate::wire::{write_icrc, IcrcContext, IpHeaderInfo};

/// Flags + fragment offset of the IPv4 packets this link sends: DF, no fragmentation.
const IPV4_DF: u16 = 0x4000;
/// Socket buffer size asked for: bursts of a 128-packet window of 4 KiB packets fit.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// A UDP socket link.
pub struct UdpLink {
    socket: UdpSocket,
    local: SocketAddr,
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
        // socket2 for the options, std for safe I/O into initialised buffers.
        Ok(UdpLink {
            socket: socket.into(),
            local,
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
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
        let mut buf = [0u8; MAX_DATAGRAM_BYTES];
        match self.socket.recv_from(&mut buf) {
            Ok((len, src)) => Ok(Some(InDatagram {
                src,
                dst: self.local,
                payload: buf[..len].to_vec(),
                ipv4_identification: None,
            })),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}
