//! An Ethernet station for RoCEv2 over IPv4, sans I/O: frames in, frames and datagrams out.
//!
//! A link that carries whole Ethernet frames (qemu's socket netdev, see `qemu_socket.rs`)
//! needs what a host's kernel would do for it: answer ARP for its own address, resolve the
//! peer's MAC by ARP (holding packets until the answer comes), wrap RoCE packets in
//! Ethernet/IPv4/UDP and take them out again. In return it sees the whole IP header of what
//! it receives, so the ICRC check gets the sender's real IPv4 identification, and it chooses
//! the identification of what it sends.
//!
//! IPv4 multicast (UD multicast groups): a group's frames go to its Ethernet multicast MAC
//! (RFC 1112's 01:00:5e + the group's low 23 bits, no ARP), and the station takes in every
//! RoCE frame to an IPv4 group; which groups its device serves is the engine's table
//! (`engine::multicast`). Joining needs no IGMP on a segment without switches.
//!
//! IPv4 only: the lab link it serves is IPv4 (IPv6 would need neighbour discovery).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use etherparse::{EtherType, Ethernet2Header, Ethernet2HeaderSlice};

use super::arp::{ArpOp, ArpRepr};
use super::InDatagram;
use super::OutPacket;
use crate::wire::{emit_ethernet_frame, parse_frame, IcrcContext, IpHeaderInfo, LinkType};
use crate::wire::{write_icrc, IPV4_FLAG_DF};

/// The Ethernet broadcast address.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];
/// Shortest Ethernet frame without FCS; shorter frames (ARP) are padded, as NICs do.
const MIN_FRAME_BYTES: usize = 60;
/// Most packets held while their destination's MAC is being resolved; beyond that the
/// oldest is dropped (the transport retransmits).
pub const PENDING_PACKETS_MAX: usize = 256;
/// Most IP → MAC entries kept; a full cache is emptied and relearned.
pub const ARP_CACHE_MAX: usize = 256;
/// How long an unanswered ARP request waits before it is asked again.
pub const ARP_RETRY: Duration = Duration::from_millis(500);

/// The Ethernet MAC of IPv4 group `group` (RFC 1112): 01:00:5e and its low 23 bits.
pub fn multicast_mac(group: Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// Whether `mac` is one of the MACs of IPv4 groups.
fn is_ipv4_multicast_mac(mac: [u8; 6]) -> bool {
    mac[..3] == [0x01, 0x00, 0x5e] && mac[3] & 0x80 == 0
}

/// What one received frame amounts to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FrameOutcome {
    /// A RoCE datagram for this station, with the IPv4 identification it carried.
    pub datagram: Option<InDatagram>,
    /// Frames to send in answer (an ARP reply; packets released by an ARP reply).
    pub replies: Vec<Vec<u8>>,
}

/// One IPv4 address on an Ethernet segment, with its MAC, ARP cache and held packets.
#[derive(Debug)]
pub struct EthernetStation {
    mac: [u8; 6],
    ip: Ipv4Addr,
    udp_port: u16,
    arp_cache: HashMap<Ipv4Addr, [u8; 6]>,
    /// Frames waiting for their destination's MAC: (destination, frame with a zero MAC).
    pending: VecDeque<(Ipv4Addr, Vec<u8>)>,
    /// When each unresolved address was last asked for.
    asked: HashMap<Ipv4Addr, Instant>,
}

impl EthernetStation {
    /// A station with address `ip` and `mac` receiving RoCE on `udp_port`.
    pub fn new(mac: [u8; 6], ip: Ipv4Addr, udp_port: u16) -> Self {
        EthernetStation {
            mac,
            ip,
            udp_port,
            arp_cache: HashMap::new(),
            pending: VecDeque::new(),
            asked: HashMap::new(),
        }
    }

    /// The station's address and RoCE port.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), self.udp_port)
    }

    /// The MAC of `ip`: a group's multicast MAC, or the one learnt by ARP, if any.
    pub fn resolved(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        if ip.is_multicast() {
            return Some(multicast_mac(ip));
        }
        self.arp_cache.get(&ip).copied()
    }

    /// Packets held for unresolved destinations.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The IP header `packet` is sent with: DF, and an identification taken from the low 16
    /// bits of its PSN, so that [`EthernetStation::frame`] can rebuild the same header after
    /// [`EthernetStation::finalize`] (a wrapper may duplicate or delay the packet between
    /// them), and so that the ICRC a receiver checks really depends on a varying ID.
    fn icrc_context(&self, packet: &OutPacket) -> std::io::Result<(IcrcContext, Ipv4Addr)> {
        let IpAddr::V4(dst) = packet.dst_ip else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the Ethernet link carries IPv4 only",
            ));
        };
        let identification = match packet.bytes.get(10..12) {
            Some(b) => u16::from_be_bytes([b[0], b[1]]),
            None => 0,
        };
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: self.ip,
                dst,
                identification,
                flags_fragment: IPV4_FLAG_DF,
            },
            udp_src_port: packet.udp_src_port,
            udp_dst_port: packet.udp_dst_port,
        };
        Ok((ctx, dst))
    }

    /// Writes the ICRC of `packet` for the headers [`EthernetStation::frame`] gives it.
    /// `InvalidInput` for an IPv6 destination.
    pub fn finalize(&self, packet: &mut OutPacket) -> std::io::Result<()> {
        let (ctx, _) = self.icrc_context(packet)?;
        write_icrc(&ctx, &mut packet.bytes);
        Ok(())
    }

    /// The frames to put on the wire for `packet` (ICRC already written): the packet itself
    /// if its destination's MAC is known; otherwise it is held and, unless one was sent less
    /// than [`ARP_RETRY`] ago, an ARP request goes out instead.
    pub fn frame(&mut self, packet: &OutPacket, now: Instant) -> std::io::Result<Vec<Vec<u8>>> {
        let (ctx, dst) = self.icrc_context(packet)?;
        if let Some(mac) = self.resolved(dst) {
            return Ok(vec![emit_ethernet_frame(
                &ctx,
                self.mac,
                mac,
                &packet.bytes,
            )]);
        }
        if self.pending.len() >= PENDING_PACKETS_MAX {
            self.pending.pop_front();
        }
        let frame = emit_ethernet_frame(&ctx, self.mac, [0; 6], &packet.bytes);
        self.pending.push_back((dst, frame));
        let due = self
            .asked
            .get(&dst)
            .is_none_or(|t| now.duration_since(*t) >= ARP_RETRY);
        if !due {
            return Ok(Vec::new());
        }
        if self.asked.len() >= ARP_CACHE_MAX && !self.asked.contains_key(&dst) {
            self.asked.clear(); // bounded like the cache; a forgotten entry only asks again
        }
        self.asked.insert(dst, now);
        Ok(vec![self.arp_frame(
            ArpOp::Request,
            BROADCAST_MAC,
            [0; 6],
            dst,
        )])
    }

    /// Takes in one received frame: answers ARP requests for our address, learns from ARP,
    /// releases held packets, and returns a RoCE datagram addressed to us. Anything else
    /// (other addresses, other protocols, malformed frames) is ignored.
    pub fn receive(&mut self, frame: &[u8]) -> FrameOutcome {
        let mut out = FrameOutcome::default();
        let Ok(eth) = Ethernet2HeaderSlice::from_slice(frame) else {
            return out;
        };
        let dst_mac = eth.destination();
        if dst_mac != self.mac && dst_mac != BROADCAST_MAC && !is_ipv4_multicast_mac(dst_mac) {
            return out;
        }
        match eth.ether_type() {
            EtherType::ARP => self.receive_arp(&frame[Ethernet2Header::LEN..], &mut out),
            EtherType::IPV4 => out.datagram = self.receive_ipv4(frame),
            _ => {}
        }
        out
    }

    fn receive_ipv4(&self, frame: &[u8]) -> Option<InDatagram> {
        let roce = parse_frame(LinkType::Ethernet, frame).ok()??;
        let IpHeaderInfo::V4 {
            src,
            dst,
            identification,
            ..
        } = roce.ctx.ip
        else {
            return None;
        };
        if (dst != self.ip && !dst.is_multicast()) || roce.ctx.udp_dst_port != self.udp_port {
            return None;
        }
        Some(InDatagram {
            src: SocketAddr::new(IpAddr::V4(src), roce.ctx.udp_src_port),
            dst: SocketAddr::new(IpAddr::V4(dst), self.udp_port),
            payload: roce.udp_payload.to_vec(),
            ipv4_identification: Some(identification),
        })
    }

    fn receive_arp(&mut self, body: &[u8], out: &mut FrameOutcome) {
        let Some(arp) = ArpRepr::parse(body) else {
            return;
        };
        let for_us = arp.target_ip == self.ip;
        // As a kernel does: learn the sender of anything addressed to us, and refresh an
        // entry we already have from any ARP packet.
        if (for_us || self.arp_cache.contains_key(&arp.sender_ip))
            && !arp.sender_ip.is_unspecified()
        {
            self.learn(arp.sender_ip, arp.sender_mac, out);
        }
        if for_us && arp.op == ArpOp::Request {
            out.replies.push(self.arp_frame(
                ArpOp::Reply,
                arp.sender_mac,
                arp.sender_mac,
                arp.sender_ip,
            ));
        }
    }

    fn learn(&mut self, ip: Ipv4Addr, mac: [u8; 6], out: &mut FrameOutcome) {
        if mac == BROADCAST_MAC || mac[0] & 1 != 0 {
            return; // a multicast MAC is no station's address
        }
        if self.arp_cache.len() >= ARP_CACHE_MAX && !self.arp_cache.contains_key(&ip) {
            self.arp_cache.clear();
        }
        self.arp_cache.insert(ip, mac);
        self.asked.remove(&ip);
        let mut kept = VecDeque::with_capacity(self.pending.len());
        for (dst, mut frame) in self.pending.drain(..) {
            if dst == ip {
                frame[..6].copy_from_slice(&mac);
                out.replies.push(frame);
            } else {
                kept.push_back((dst, frame));
            }
        }
        self.pending = kept;
    }

    fn arp_frame(
        &self,
        op: ArpOp,
        eth_dst: [u8; 6],
        target_mac: [u8; 6],
        target_ip: Ipv4Addr,
    ) -> Vec<u8> {
        let arp = ArpRepr {
            op,
            sender_mac: self.mac,
            sender_ip: self.ip,
            target_mac,
            target_ip,
        };
        let mut frame = Ethernet2Header {
            source: self.mac,
            destination: eth_dst,
            ether_type: EtherType::ARP,
        }
        .to_bytes()
        .to_vec();
        frame.extend_from_slice(&arp.emit());
        frame.resize(frame.len().max(MIN_FRAME_BYTES), 0);
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::icrc_check::icrc_ok;

    const OUR_MAC: [u8; 6] = [0x02, 0x00, 10, 77, 0, 1];
    const PEER_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x77, 0x00, 0x02];
    const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn station() -> EthernetStation {
        EthernetStation::new(OUR_MAC, OUR_IP, 4791)
    }

    /// An ARP request from the guest (10.77.0.2, 52:54:00:77:00:02) for 10.77.0.1, as a
    /// Linux guest sends it (broadcast, no padding).
    fn arp_request_for_us() -> Vec<u8> {
        hex(concat!(
            "ffffffffffff",
            "525400770002",
            "0806",
            "0001",
            "0800",
            "06",
            "04",
            "0001",
            "525400770002",
            "0a4d0002",
            "000000000000",
            "0a4d0001"
        ))
    }

    // A real rxe frame (ib_atomic_lat capture, 10.77.0.1 -> 10.77.0.2, ID 0x5f3e) with the
    // addresses swapped so that it is addressed to us; its ICRC covers the addresses only
    // through the masked pseudo-header, so it is recomputed below.
    fn rxe_frame_to_us(identification: u16) -> Vec<u8> {
        let f = hex(concat!(
            "525400770002525400770001080045000038",
            "5f3e40004011c6da0a4d00010a4d0002c6e012b700240000",
            "1200ffff00000028009b726e1f0000014bc42cbaa56198f13386a267"
        ));
        let mut payload = f[42..].to_vec();
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: PEER_IP,
                dst: OUR_IP,
                identification,
                flags_fragment: IPV4_FLAG_DF,
            },
            udp_src_port: 0xc6e0,
            udp_dst_port: 4791,
        };
        write_icrc(&ctx, &mut payload);
        emit_ethernet_frame(&ctx, PEER_MAC, OUR_MAC, &payload)
    }

    fn out_packet(psn: u32) -> OutPacket {
        // BTH: SEND_ONLY to QP 0x11, PSN `psn`; 4 payload bytes; ICRC room.
        let mut bytes = hex("0400ffff00000011");
        bytes.extend_from_slice(&(psn & 0xff_ffff).to_be_bytes());
        bytes.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0]);
        OutPacket {
            dst_ip: IpAddr::V4(PEER_IP),
            udp_dst_port: 4791,
            udp_src_port: 0xc123,
            bytes,
            payload: None,
        }
    }

    #[test]
    fn answers_arp_requests_for_its_address_and_learns_the_asker() {
        let mut s = station();
        let out = s.receive(&arp_request_for_us());
        assert_eq!(out.datagram, None);
        let expected = hex(concat!(
            "525400770002",
            "02000a4d0001",
            "0806",
            "0001",
            "0800",
            "06",
            "04",
            "0002",
            "02000a4d0001",
            "0a4d0001",
            "525400770002",
            "0a4d0002",
            "000000000000000000000000000000000000"
        ));
        assert_eq!(out.replies, vec![expected]);
        assert_eq!(s.resolved(PEER_IP), Some(PEER_MAC));
    }

    #[test]
    fn ignores_arp_for_other_addresses_and_other_frames() {
        let mut s = station();
        let mut other = arp_request_for_us();
        other[41] = 9; // target 10.77.0.9
        assert_eq!(s.receive(&other), FrameOutcome::default());
        assert_eq!(s.resolved(PEER_IP), None);
        // Truncated ARP, IPv6, a unicast frame for another MAC, garbage.
        let req = arp_request_for_us();
        assert_eq!(s.receive(&req[..30]), FrameOutcome::default());
        let mut v6 = req.clone();
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(s.receive(&v6), FrameOutcome::default());
        let mut not_ours = rxe_frame_to_us(1);
        not_ours[5] ^= 0xff;
        assert_eq!(s.receive(&not_ours), FrameOutcome::default());
        assert_eq!(s.receive(&[0u8; 5]), FrameOutcome::default());
    }

    #[test]
    fn roce_frames_to_us_become_datagrams_with_their_ip_identification() {
        let mut s = station();
        let frame = rxe_frame_to_us(0x5f3e);
        let out = s.receive(&frame);
        let d = out.datagram.expect("a RoCE datagram");
        assert!(out.replies.is_empty());
        assert_eq!(d.src, "10.77.0.2:50912".parse().unwrap());
        assert_eq!(d.dst, "10.77.0.1:4791".parse().unwrap());
        assert_eq!(d.ipv4_identification, Some(0x5f3e));
        assert_eq!(d.payload, frame[42..]);
        // The full 32-bit ICRC check passes with the carried ID, and fails for a flipped bit
        // of the ID the sender used (the check really sees the header).
        assert!(icrc_ok(&d));
        let mut wrong = d.clone();
        wrong.ipv4_identification = Some(0x5f3f);
        assert!(!icrc_ok(&wrong));
        // Another destination address or port is not ours.
        let mut other_port = frame.clone();
        other_port[36..38].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(s.receive(&other_port).datagram, None);
    }

    #[test]
    fn a_group_needs_no_arp_and_a_frame_to_a_group_is_taken_in() {
        let group = Ipv4Addr::new(239, 0x85, 0, 9);
        assert_eq!(multicast_mac(group), [0x01, 0x00, 0x5e, 0x05, 0x00, 0x09]);
        let mut s = station();
        let mut p = out_packet(7);
        p.dst_ip = IpAddr::V4(group);
        s.finalize(&mut p).unwrap();
        let frames = s.frame(&p, Instant::now()).unwrap();
        assert_eq!(frames.len(), 1, "the packet itself, no ARP request");
        assert_eq!(frames[0][..6], multicast_mac(group));
        assert_eq!(s.pending_len(), 0);
        // Another station (the guest's kernel) sending to the group: taken in, with the
        // group as its destination.
        assert_eq!(ipv4_addresses(&frames[0]), (OUR_IP, group));
        let mut other = station_at(PEER_MAC, PEER_IP);
        let d = other
            .receive(&frames[0])
            .datagram
            .expect("a group's datagram");
        assert_eq!(d.dst, SocketAddr::new(IpAddr::V4(group), 4791));
        assert!(icrc_ok(&d));
        // A multicast MAC that is not an IPv4 group's (IPv6's 33:33) is not ours.
        let mut v6_mac = frames[0].clone();
        v6_mac[..2].copy_from_slice(&[0x33, 0x33]);
        assert_eq!(other.receive(&v6_mac).datagram, None);
    }

    fn station_at(mac: [u8; 6], ip: Ipv4Addr) -> EthernetStation {
        EthernetStation::new(mac, ip, 4791)
    }

    /// The source and destination of a frame's IPv4 header.
    fn ipv4_addresses(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&frame[14..]).unwrap();
        (ip.source_addr(), ip.destination_addr())
    }

    #[test]
    fn sending_to_an_unknown_peer_asks_arp_holds_the_packet_and_releases_it() {
        let mut s = station();
        let t0 = Instant::now();
        let mut p = out_packet(0x12_3456);
        s.finalize(&mut p).unwrap();
        let frames = s.frame(&p, t0).unwrap();
        let request = hex(concat!(
            "ffffffffffff",
            "02000a4d0001",
            "0806",
            "0001",
            "0800",
            "06",
            "04",
            "0001",
            "02000a4d0001",
            "0a4d0001",
            "000000000000",
            "0a4d0002",
            "000000000000000000000000000000000000"
        ));
        assert_eq!(frames, vec![request.clone()]);
        assert_eq!(s.pending_len(), 1);
        // A second packet soon after waits without a second request; later, it asks again.
        let mut p2 = out_packet(0x12_3457);
        s.finalize(&mut p2).unwrap();
        assert!(s.frame(&p2, t0 + ARP_RETRY / 2).unwrap().is_empty());
        assert_eq!(s.frame(&p2, t0 + ARP_RETRY).unwrap(), vec![request]);
        assert_eq!(s.pending_len(), 3);

        // The peer's reply releases the packets in order, with its MAC.
        let reply = hex(concat!(
            "02000a4d0001",
            "525400770002",
            "0806",
            "0001",
            "0800",
            "06",
            "04",
            "0002",
            "525400770002",
            "0a4d0002",
            "02000a4d0001",
            "0a4d0001"
        ));
        let out = s.receive(&reply);
        assert!(out.datagram.is_none());
        assert_eq!(out.replies.len(), 3);
        assert_eq!(s.pending_len(), 0);
        for (frame, psn) in out.replies.iter().zip([0x3456u16, 0x3457, 0x3457]) {
            assert_eq!(&frame[..6], &PEER_MAC);
            assert_eq!(&frame[6..12], &OUR_MAC);
            assert_eq!(u16::from_be_bytes([frame[18], frame[19]]), psn, "IP ID");
        }
        // Then packets go straight out.
        let direct = s.frame(&p, t0).unwrap();
        assert_eq!(direct, vec![out.replies[0].clone()]);
    }

    #[test]
    fn sent_frames_parse_back_with_a_valid_icrc_for_their_header() {
        let mut s = station();
        s.receive(&arp_request_for_us());
        let mut p = out_packet(0xab_cdef);
        s.finalize(&mut p).unwrap();
        let frame = s.frame(&p, Instant::now()).unwrap().remove(0);
        let roce = parse_frame(LinkType::Ethernet, &frame).unwrap().unwrap();
        assert_eq!(
            roce.ctx.ip,
            IpHeaderInfo::V4 {
                src: OUR_IP,
                dst: PEER_IP,
                identification: 0xcdef,
                flags_fragment: IPV4_FLAG_DF,
            }
        );
        assert_eq!(roce.ctx.udp_src_port, 0xc123);
        assert_eq!(roce.udp_payload, &p.bytes[..]);
        assert!(crate::wire::verify_icrc(&roce.ctx, roce.udp_payload));
        // IPv4 header checksum is right.
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&frame[14..]).unwrap();
        assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
    }

    #[test]
    fn ipv6_destinations_are_refused_and_the_pending_queue_is_bounded() {
        let mut s = station();
        let mut p = out_packet(1);
        p.dst_ip = "fe80::1".parse().unwrap();
        assert_eq!(
            s.finalize(&mut p).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
        let t0 = Instant::now();
        let p = out_packet(2);
        for _ in 0..PENDING_PACKETS_MAX + 10 {
            s.frame(&p, t0).unwrap();
        }
        assert_eq!(s.pending_len(), PENDING_PACKETS_MAX);
    }
}
