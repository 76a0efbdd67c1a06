//! A link whose wire is qemu's socket netdev (`-netdev socket,udp=...,localaddr=...`): each
//! Ethernet frame of the VM's NIC travels as one UDP datagram between two ports on
//! 127.0.0.1. This process is then the VM's link peer: it owns an IPv4 address on the VM's
//! segment (which exists nowhere on the host) and speaks Ethernet/ARP/IPv4/UDP itself
//! through an [`EthernetStation`], so a kernel rxe in the VM talks RoCEv2 to it directly.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::ethernet::EthernetStation;
use super::pacer::Pacer;
use super::OutPacket;
use super::{InDatagram, Link};

/// Largest frame read: qemu's socket netdev carries frames up to 64 KiB.
pub(crate) const MAX_FRAME_BYTES: usize = 65536;
/// Rate at which frames are sent to qemu, unless `SOFTVERBS_QEMU_PACE_KBPS` (kilobytes per
/// second, 0 for unpaced) says otherwise. A TCG guest drains its NIC at tens of MB/s at best;
/// faster bursts overflow qemu's socket buffer and are lost (see `net::pacer`).
pub(crate) const PACE_BYTES_PER_S: u64 = 8_000_000;
/// Bytes sent back to back before pacing starts: well under qemu's default 208 KiB socket
/// receive buffer, whose accounting charges each datagram more than its length.
pub(crate) const PACE_BURST_BYTES: u64 = 32 * 1024;
/// Our receive buffer: rxe's bursts arrive faster than a busy engine thread reads.
pub(crate) const RECV_BUFFER_BYTES: usize = 4 << 20;

/// The host side of a qemu socket netdev.
pub struct QemuSocketLink {
    socket: UdpSocket,
    station: Mutex<EthernetStation>,
    local: SocketAddr,
    /// Receive buffer, reused: only the device's engine thread receives.
    recv_buf: Mutex<Vec<u8>>,
    pacer: Mutex<Pacer>,
}

impl QemuSocketLink {
    /// Binds `frames_local` (a 127.0.0.0/8 UDP address, qemu's `udp=`), sends frames to
    /// `frames_peer` (qemu's `localaddr=`), and stands on the segment as `ip`:`udp_port`
    /// with `mac`. `InvalidInput` unless `ip` is IPv4.
    pub fn bind(
        frames_local: SocketAddr,
        frames_peer: SocketAddr,
        mac: [u8; 6],
        ip: IpAddr,
        udp_port: u16,
    ) -> io::Result<QemuSocketLink> {
        let IpAddr::V4(ip) = ip else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a qemu socket link carries IPv4 only",
            ));
        };
        let socket = UdpSocket::bind(frames_local)?;
        // Best effort: without privilege the kernel caps it at net.core.rmem_max.
        let _ = super::socket_options::set_recv_buffer_force(&socket, RECV_BUFFER_BYTES);
        let rate = pace_rate();
        // Connected: only qemu's datagrams are read, and the kernel filters the rest.
        socket.connect(frames_peer)?;
        let station = EthernetStation::new(mac, ip, udp_port);
        Ok(QemuSocketLink {
            socket,
            local: station.local_addr(),
            station: Mutex::new(station),
            recv_buf: Mutex::new(vec![0u8; MAX_FRAME_BYTES]),
            pacer: Mutex::new(Pacer::new(rate, PACE_BURST_BYTES)),
        })
    }

    fn send_frames(&self, frames: &[Vec<u8>]) -> io::Result<()> {
        send_paced(&self.socket, None, &self.pacer, frames)
    }
}

/// The rate frames are paced to: `SOFTVERBS_QEMU_PACE_KBPS` (kilobytes per second, 0 for
/// unpaced), else [`PACE_BYTES_PER_S`].
pub(crate) fn pace_rate() -> u64 {
    std::env::var("SOFTVERBS_QEMU_PACE_KBPS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(PACE_BYTES_PER_S, |kbps| kbps * 1000)
}

/// Sends `frames` through `socket` (to `to`, or to the peer it is connected to), each when
/// `pacer` lets it go. A frame qemu cannot take is lost, as on a wire.
pub(crate) fn send_paced(
    socket: &UdpSocket,
    to: Option<SocketAddr>,
    pacer: &Mutex<Pacer>,
    frames: &[Vec<u8>],
) -> io::Result<()> {
    for frame in frames {
        let wait = pacer.lock().delay(Instant::now(), frame.len());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let sent = match to {
            Some(to) => socket.send_to(frame, to),
            None => socket.send(frame),
        };
        match sent {
            Ok(_) => {}
            // No qemu listening (yet), or a full buffer: the frame is lost, as on a wire.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::WouldBlock
                ) || e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Link for QemuSocketLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A group's frames arrive with the others: the station takes them in.
    fn carries_multicast(&self) -> bool {
        true
    }

    fn join_group(
        &self,
        _group: std::net::IpAddr,
    ) -> io::Result<Option<crate::net::multicast::GroupSocket>> {
        Ok(None)
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.station.lock().finalize(packet)
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        let frames = self.station.lock().frame(packet, Instant::now())?;
        self.send_frames(&frames)
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        let deadline = Instant::now() + timeout;
        let mut buf = self.recv_buf.lock();
        // Frames that are not RoCE for us (ARP, IPv6 neighbour discovery ...) are handled or
        // dropped here, and the wait goes on until the deadline.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_micros(1))))?;
            let len = match self.socket.recv(&mut buf) {
                Ok(len) => len,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    // ConnectionRefused (qemu not there yet) returns at once: do not spin.
                    if e.kind() == io::ErrorKind::ConnectionRefused {
                        std::thread::sleep(left.min(Duration::from_millis(1)));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let outcome = self.station.lock().receive(&buf[..len]);
            self.send_frames(&outcome.replies)?;
            if let Some(d) = outcome.datagram {
                return Ok(Some(d));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The link against a plain UDP socket standing in for qemu: an ARP request in, the
    /// reply out; a RoCE packet out after resolution.
    #[test]
    fn answers_arp_through_the_socket_and_sends_framed_packets() {
        let qemu = UdpSocket::bind("127.0.0.1:0").unwrap();
        let link_addr = {
            let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let ip = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
        let mac = [2, 0, 10, 77, 0, 1];
        let link =
            QemuSocketLink::bind(link_addr, qemu.local_addr().unwrap(), mac, ip, 4791).unwrap();
        assert_eq!(link.local_addr(), "10.77.0.1:4791".parse().unwrap());
        qemu.connect(link_addr).unwrap();
        qemu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

        let request: Vec<u8> = [
            &[0xff; 6][..],
            &[0x52, 0x54, 0, 0x77, 0, 2],
            &[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1],
            &[0x52, 0x54, 0, 0x77, 0, 2, 10, 77, 0, 2],
            &[0; 6],
            &[10, 77, 0, 1],
        ]
        .concat();
        qemu.send(&request).unwrap();
        // ARP alone yields no datagram; the reply goes out during the wait.
        assert_eq!(link.recv(Duration::from_millis(200)).unwrap(), None);
        let mut buf = [0u8; 2048];
        let n = qemu.recv(&mut buf).unwrap();
        assert_eq!(n, 60);
        assert_eq!(&buf[..6], &[0x52, 0x54, 0, 0x77, 0, 2]);
        assert_eq!(&buf[12..14], &[0x08, 0x06]);
        assert_eq!(&buf[20..22], &[0, 2], "an ARP reply");
        assert_eq!(&buf[22..28], &mac);

        let mut packet = OutPacket {
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)),
            udp_dst_port: 4791,
            udp_src_port: 0xc001,
            bytes: vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 7, 0, 0, 0, 0],
            payload: None,
        };
        link.send(&mut packet).unwrap();
        let n = qemu.recv(&mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + packet.bytes.len());
        assert_eq!(&buf[42..n], &packet.bytes[..]);
    }
}
