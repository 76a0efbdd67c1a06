//! The pcap tap: a [`Link`] wrapper that writes every datagram its device sends and
//! receives to a pcap file, as the Ethernet/IPv4|IPv6/UDP frame it was on the wire, so that
//! Wireshark or tshark decode our own RoCEv2 traffic with good ICRCs.
//!
//! Turned on for every device of a process by `SOFTVERBS_PCAP=FILE` ([`PCAP_ENV`]); the
//! devices of one process share the file. A link sends with IP and UDP headers of its own
//! (the UDP link from its bound port with IPv4 identification 0, the in-process link from
//! rxe's per-QP port, the qemu link with an identification of its choosing), which the ICRC
//! covers: the tap recovers them from the ICRC itself (the source port among the two a link
//! can use, the identification by solving for it, as receivers do), so the capture shows
//! the header the ICRC was computed for. Received datagrams are written unless their sender
//! is another tapped device of the process (whose send is already in the file; devices
//! have addresses of their own, and a link may send from a per-QP port).
//! Ethernet addresses are the devices' own (`02:00:` + the IPv4 address or the last four
//! bytes of the IPv6 one), as `DeviceConfig::mac` gives them.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::PcapWriter;
use crate::net::icrc_check::ipv4_identification;
use crate::net::{DatagramView, InDatagram, Link};
use crate::transport::OutPacket;
use crate::wire::{
    emit_ethernet_frame, solve_ipv4_identification, verify_icrc, IcrcContext, IpHeaderInfo,
    IPV4_FLAG_DF,
};

/// The environment variable naming the capture file of every device of the process.
pub const PCAP_ENV: &str = "SOFTVERBS_PCAP";

/// One capture file shared by the taps of a process.
struct Capture {
    path: PathBuf,
    /// Unbuffered: every frame reaches the file at once, so a process that exits without
    /// dropping its devices still leaves a complete capture.
    writer: PcapWriter<File>,
    /// The addresses of the tapped devices (a datagram between two of them is written once,
    /// when it is sent).
    local: Vec<SocketAddr>,
}

fn capture_slot() -> &'static Mutex<Option<Capture>> {
    static SLOT: OnceLock<Mutex<Option<Capture>>> = OnceLock::new();
    SLOT.get_or_init(|| Mutex::new(None))
}

/// The Ethernet address of the device on `ip`: as `DeviceConfig::mac`.
fn mac_of(ip: IpAddr) -> [u8; 6] {
    let tail = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, tail[0], tail[1], tail[2], tail[3]]
}

/// Wraps `link` in a tap when `SOFTVERBS_PCAP` names a file (created, or truncated, by the
/// first device of the process; later devices append to it); `link` itself otherwise.
/// EINVAL naming the variable if it is empty or not UTF-8, EIO-like if the file cannot be
/// created.
pub fn tap_from_env(link: Box<dyn Link>) -> VerbsResult<Box<dyn Link>> {
    match std::env::var(PCAP_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(link),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(VerbsError::inval(format!("{PCAP_ENV} is not valid UTF-8")))
        }
        Ok(path) if path.is_empty() => Err(VerbsError::inval(format!(
            "{PCAP_ENV} is empty (it names the capture file)"
        ))),
        Ok(path) => Ok(Box::new(PcapTap::new(link, Path::new(&path))?)),
    }
}

/// A link whose traffic is also written to the process's capture file.
pub struct PcapTap {
    inner: Box<dyn Link>,
    local: SocketAddr,
}

impl PcapTap {
    /// Taps `inner`, writing to `path` (the process's one capture file: a second path while
    /// the first is open is EINVAL).
    pub fn new(inner: Box<dyn Link>, path: &Path) -> VerbsResult<PcapTap> {
        let local = inner.local_addr();
        let mut slot = capture_slot().lock();
        match slot.as_mut() {
            Some(c) if c.path != path => {
                return Err(VerbsError::inval(format!(
                    "{PCAP_ENV}: this process already captures to {}",
                    c.path.display()
                )))
            }
            Some(c) => c.local.push(local),
            None => {
                let writer = File::create(path)
                    .map_err(super::PcapError::from)
                    .and_then(PcapWriter::new)
                    .map_err(|e| VerbsError::Io {
                        errno: libc::EIO,
                        message: format!("{PCAP_ENV}={}: {e}", path.display()),
                    })?;
                *slot = Some(Capture {
                    path: path.to_path_buf(),
                    writer,
                    local: vec![local],
                });
            }
        }
        Ok(PcapTap { inner, local })
    }

    /// Writes one frame carrying `payload` under the headers `ctx`.
    fn write(&self, ctx: &IcrcContext, payload: &[u8], src_ip: IpAddr, dst_ip: IpAddr) {
        let frame = emit_ethernet_frame(ctx, mac_of(src_ip), mac_of(dst_ip), payload);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let mut slot = capture_slot().lock();
        if let Some(c) = slot.as_mut() {
            // A frame that cannot be written (a full disk) is lost from the capture only:
            // the traffic itself must not fail for it.
            let _ = c.writer.write_frame(now, &frame);
        }
    }

    /// Records a packet about to be sent, before it is (a reply must not appear in the
    /// file before what it answers). `packet` as `send_raw` takes it (ICRC written, and
    /// perhaps corrupted by a fault wrapper since), or with `unfinished` as the batch sends
    /// take it: the ICRC not yet written and perhaps the payload still in registered memory
    /// (`payload`); a copy is then completed as the link will complete it.
    fn record_sent(&self, packet: &OutPacket, unfinished: Option<&[u8]>) {
        let completed;
        let bytes: &[u8] = match unfinished {
            None => &packet.bytes,
            Some(payload) => {
                let mut copy = packet.clone();
                copy.fill_payload(payload);
                if self.inner.finalize(&mut copy).is_err() {
                    return; // the send fails the same way and sends nothing
                }
                completed = copy.bytes;
                &completed
            }
        };
        let src = self.local;
        let dst = SocketAddr::new(packet.dst_ip, packet.udp_dst_port);
        let ctx = sent_headers(src, dst, packet.udp_src_port, bytes);
        self.write(&ctx, bytes, src.ip(), dst.ip());
    }

    /// Records a received datagram, unless another tapped device of the process sent it.
    fn record_received(&self, d: DatagramView<'_>) {
        let from_tapped = capture_slot()
            .lock()
            .as_ref()
            .is_some_and(|c| c.local.iter().any(|a| a.ip() == d.src.ip()));
        if from_tapped {
            return;
        }
        let ip = match (d.src.ip(), d.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpHeaderInfo::V4 {
                src,
                dst,
                identification: ipv4_identification(d).unwrap_or(0),
                flags_fragment: IPV4_FLAG_DF,
            },
            (src, dst) => IpHeaderInfo::V6 {
                src: to_v6(src),
                dst: to_v6(dst),
            },
        };
        let ctx = IcrcContext {
            ip,
            udp_src_port: d.src.port(),
            udp_dst_port: d.dst.port(),
        };
        self.write(&ctx, d.payload, d.src.ip(), d.dst.ip());
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The IP and UDP headers a link sent `packet` (from `src` to `dst`) with: the source port
/// is the link's bound port or the packet's own (rxe's per-QP port), the IPv4
/// identification the one the ICRC was computed for; whichever the ICRC confirms. A packet
/// whose ICRC fits neither (corrupted on purpose by fault injection) gets the bound port
/// and identification 0, and shows as bad in the capture, as on the wire.
fn sent_headers(src: SocketAddr, dst: SocketAddr, packet_port: u16, bytes: &[u8]) -> IcrcContext {
    let fallback = |port| IcrcContext {
        ip: match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpHeaderInfo::V4 {
                src: s,
                dst: d,
                identification: 0,
                flags_fragment: IPV4_FLAG_DF,
            },
            (s, d) => IpHeaderInfo::V6 {
                src: to_v6(s),
                dst: to_v6(d),
            },
        },
        udp_src_port: port,
        udp_dst_port: dst.port(),
    };
    for port in [src.port(), packet_port] {
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                if let Some(ip) = solve_ipv4_identification(s, d, port, dst.port(), bytes) {
                    return IcrcContext {
                        ip,
                        udp_src_port: port,
                        udp_dst_port: dst.port(),
                    };
                }
            }
            _ => {
                let ctx = fallback(port);
                if verify_icrc(&ctx, bytes) {
                    return ctx;
                }
            }
        }
    }
    fallback(src.port())
}

impl Drop for PcapTap {
    fn drop(&mut self) {
        let mut slot = capture_slot().lock();
        if let Some(c) = slot.as_mut() {
            c.local.retain(|a| *a != self.local);
            if c.local.is_empty() {
                // The last tapped device is gone: close the file; a device opened later
                // starts a new one.
                *slot = None;
            }
        }
    }
}

impl Link for PcapTap {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn qpn_range(&self) -> Option<std::ops::Range<u32>> {
        self.inner.qpn_range()
    }

    fn shared_port(&self) -> Option<&crate::net::shared_port::member::Member> {
        self.inner.shared_port()
    }

    fn hand_over_shared_port(&self) -> std::io::Result<()> {
        self.inner.hand_over_shared_port()
    }

    fn carries_multicast(&self) -> bool {
        self.inner.carries_multicast()
    }

    fn join_group(
        &self,
        group: std::net::IpAddr,
    ) -> io::Result<Option<crate::net::multicast::GroupSocket>> {
        self.inner.join_group(group)
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.inner.finalize(packet)
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        self.record_sent(packet, None);
        self.inner.send_raw(packet)
    }

    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        for p in packets.iter() {
            self.record_sent(p, Some(&[]));
        }
        self.inner.send_batch(packets)
    }

    fn send_batch_from(&self, packets: &mut [OutPacket], payloads: &[&[u8]]) -> io::Result<()> {
        for (p, payload) in packets.iter().zip(payloads) {
            self.record_sent(p, Some(payload));
        }
        self.inner.send_batch_from(packets, payloads)
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        let got = self.inner.recv(timeout)?;
        if let Some(d) = &got {
            self.record_received(d.view());
        }
        Ok(got)
    }

    fn pollable(&self) -> bool {
        self.inner.pollable()
    }

    fn poll_before_sleep(&self) -> Duration {
        self.inner.poll_before_sleep()
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        self.inner.wait_readable(timeout)
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        self.inner.recv_ready(max, &mut |d| {
            self.record_received(d);
            sink(d)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::channel::ChannelNetwork;
    use crate::net::pcap::read_capture;
    use crate::wire::{parse_frame, LinkType, RoceRepr};

    fn packet(dst: SocketAddr, src_port: u16) -> OutPacket {
        // A minimal RC SEND ONLY: BTH (opcode 0x04, dest QP 0x11, PSN 5) + 4 bytes + ICRC.
        let mut bytes = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 5, 1, 2, 3, 4];
        bytes.extend_from_slice(&[0; 4]);
        OutPacket {
            dst_ip: dst.ip(),
            udp_dst_port: dst.port(),
            udp_src_port: src_port,
            bytes,
            payload: None,
        }
    }

    /// Two in-process devices, both tapped: the file holds each datagram once, with the
    /// headers its ICRC was computed for (rxe's per-QP source port on this link).
    #[test]
    fn a_tapped_pair_captures_each_datagram_once_with_good_icrcs() {
        let dir = std::env::temp_dir().join(format!("softverbs-tap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tap.pcap");
        let net = ChannelNetwork::new();
        let a_addr: SocketAddr = "127.0.24.101:4791".parse().unwrap();
        let b_addr: SocketAddr = "127.0.24.102:4791".parse().unwrap();
        let a = PcapTap::new(Box::new(net.attach(a_addr).unwrap()), &path).unwrap();
        let b = PcapTap::new(Box::new(net.attach(b_addr).unwrap()), &path).unwrap();
        let mut p = packet(b_addr, 0xC123);
        a.send(&mut p).unwrap();
        let got = b.recv(Duration::from_secs(5)).unwrap().expect("datagram");
        assert_eq!(got.payload, p.bytes);
        drop((a, b));
        let frames = read_capture(&path).unwrap();
        assert_eq!(frames.len(), 1, "sent once, not again as received");
        let rf = parse_frame(LinkType::Ethernet, &frames[0].data)
            .unwrap()
            .expect("RoCE frame");
        assert!(verify_icrc(&rf.ctx, rf.udp_payload));
        assert_eq!(rf.ctx.udp_src_port, 0xC123);
        assert_eq!(&frames[0].data[0..6], &[0x02, 0, 127, 0, 24, 102]);
        let (repr, _) = RoceRepr::parse(rf.udp_payload).unwrap();
        assert_eq!(repr.bth.dest_qp, 0x11);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
