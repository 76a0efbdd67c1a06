//! IPv4/IPv6 + UDP framing around RoCE packets, for pcap files (reading captures, writing
//! a tap). Live traffic goes through UDP sockets and never sees these headers.

use std::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Header, Ethernet2HeaderSlice, IpFragOffset, IpNumber, Ipv4Header,
    Ipv4HeaderSlice, Ipv6FlowLabel, Ipv6Header, Ipv6HeaderSlice, UdpHeader, UdpHeaderSlice,
};

use super::icrc::{IcrcContext, IpHeaderInfo};
use super::udp_port::ROCE_UDP_PORT;
use super::WireError;

/// Link-layer framing of a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II, optionally with 802.1Q / 802.1ad tags (pcap LINKTYPE_ETHERNET = 1).
    Ethernet,
    /// Linux cooked capture v1, 16-byte header (LINKTYPE_LINUX_SLL = 113).
    LinuxSll,
    /// Linux cooked capture v2, 20-byte header (LINKTYPE_LINUX_SLL2 = 276).
    LinuxSll2,
}

impl LinkType {
    /// The link type for a pcap LINKTYPE_* number.
    pub fn from_pcap(linktype: u32) -> Result<LinkType, WireError> {
        match linktype {
            1 => Ok(LinkType::Ethernet),
            113 => Ok(LinkType::LinuxSll),
            276 => Ok(LinkType::LinuxSll2),
            other => Err(WireError::UnsupportedLinkType(other)),
        }
    }

    /// The pcap LINKTYPE_* number.
    pub fn pcap_number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
        }
    }
}

/// A RoCE packet found in a frame, with what its ICRC needs from the IP and UDP headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// Addresses, IPv4 ID/flags and ports.
    pub ctx: IcrcContext,
    /// The UDP payload: BTH .. ICRC.
    pub udp_payload: &'a [u8],
}

const VLAN_TAG_LEN: usize = 4;
const SLL_LEN: usize = 16;
const SLL2_LEN: usize = 20;

fn bad(reason: impl Into<String>) -> WireError {
    WireError::BadFrame(reason.into())
}

/// Returns the RoCE packet in a link-layer frame if it is UDP to port 4791; `Ok(None)` for
/// other traffic (ARP, TCP, other UDP, IPv4 non-first fragments, IPv6 with extension
/// headers). A frame that claims IP but is truncated, or a RoCE candidate the ICRC context
/// cannot describe (IPv4 options, fragments), is an error.
pub fn parse_frame(link: LinkType, frame: &[u8]) -> Result<Option<RoceFrame<'_>>, WireError> {
    let (ether_type, net) = match link {
        LinkType::Ethernet => {
            let eth = Ethernet2HeaderSlice::from_slice(frame)
                .map_err(|e| bad(format!("ethernet: {e}")))?;
            let mut ether_type = eth.ether_type();
            let mut rest = &frame[Ethernet2Header::LEN..];
            while ether_type == EtherType::VLAN_TAGGED_FRAME
                || ether_type == EtherType::PROVIDER_BRIDGING
                || ether_type == EtherType::VLAN_DOUBLE_TAGGED_FRAME
            {
                if rest.len() < VLAN_TAG_LEN {
                    return Err(WireError::Truncated {
                        needed: VLAN_TAG_LEN,
                        got: rest.len(),
                    });
                }
                ether_type = EtherType(u16::from_be_bytes([rest[2], rest[3]]));
                rest = &rest[VLAN_TAG_LEN..];
            }
            (ether_type, rest)
        }
        LinkType::LinuxSll => {
            if frame.len() < SLL_LEN {
                return Err(WireError::Truncated {
                    needed: SLL_LEN,
                    got: frame.len(),
                });
            }
            (
                EtherType(u16::from_be_bytes([frame[14], frame[15]])),
                &frame[SLL_LEN..],
            )
        }
        LinkType::LinuxSll2 => {
            if frame.len() < SLL2_LEN {
                return Err(WireError::Truncated {
                    needed: SLL2_LEN,
                    got: frame.len(),
                });
            }
            (
                EtherType(u16::from_be_bytes([frame[0], frame[1]])),
                &frame[SLL2_LEN..],
            )
        }
    };
    match ether_type {
        EtherType::IPV4 => parse_ipv4(net),
        EtherType::IPV6 => parse_ipv6(net),
        _ => Ok(None),
    }
}

fn parse_ipv4(net: &[u8]) -> Result<Option<RoceFrame<'_>>, WireError> {
    let ip = Ipv4HeaderSlice::from_slice(net).map_err(|e| bad(format!("ipv4: {e}")))?;
    if ip.protocol() != IpNumber::UDP {
        return Ok(None);
    }
    let total = usize::from(ip.total_len());
    let header_len = ip.slice().len();
    if total < header_len {
        return Err(bad(format!(
            "ipv4 total length {total} < header length {header_len}"
        )));
    }
    if net.len() < total {
        return Err(WireError::Truncated {
            needed: total,
            got: net.len(),
        });
    }
    if ip.fragments_offset().value() != 0 {
        return Ok(None); // a later fragment has no UDP header to recognise RoCE by
    }
    let Some((sport, dport, payload)) = parse_udp(&net[header_len..total])? else {
        return Ok(None);
    };
    if ip.more_fragments() {
        return Err(bad("fragmented RoCE packet"));
    }
    if header_len != 20 {
        return Err(bad("IPv4 options on a RoCE packet"));
    }
    let b = ip.slice();
    Ok(Some(RoceFrame {
        ctx: IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: ip.source_addr(),
                dst: ip.destination_addr(),
                identification: ip.identification(),
                flags_fragment: u16::from_be_bytes([b[6], b[7]]),
            },
            udp_src_port: sport,
            udp_dst_port: dport,
        },
        udp_payload: payload,
    }))
}

fn parse_ipv6(net: &[u8]) -> Result<Option<RoceFrame<'_>>, WireError> {
    let ip = Ipv6HeaderSlice::from_slice(net).map_err(|e| bad(format!("ipv6: {e}")))?;
    if ip.next_header() != IpNumber::UDP {
        return Ok(None); // rxe sends no extension headers; the ICRC would not cover them
    }
    let end = Ipv6Header::LEN + usize::from(ip.payload_length());
    if net.len() < end {
        return Err(WireError::Truncated {
            needed: end,
            got: net.len(),
        });
    }
    let Some((sport, dport, payload)) = parse_udp(&net[Ipv6Header::LEN..end])? else {
        return Ok(None);
    };
    Ok(Some(RoceFrame {
        ctx: IcrcContext {
            ip: IpHeaderInfo::V6 {
                src: ip.source_addr(),
                dst: ip.destination_addr(),
            },
            udp_src_port: sport,
            udp_dst_port: dport,
        },
        udp_payload: payload,
    }))
}

/// Source port, destination port and payload of a UDP datagram.
type UdpParts<'a> = (u16, u16, &'a [u8]);

/// The parts of a UDP datagram to the RoCE port; `None` for other ports.
fn parse_udp(ip_payload: &[u8]) -> Result<Option<UdpParts<'_>>, WireError> {
    let udp = UdpHeaderSlice::from_slice(ip_payload).map_err(|e| bad(format!("udp: {e}")))?;
    if udp.destination_port() != ROCE_UDP_PORT {
        return Ok(None);
    }
    let len = usize::from(udp.length());
    if len < UdpHeader::LEN || len > ip_payload.len() {
        return Err(WireError::LengthMismatch {
            what: "UDP length",
            expected: ip_payload.len(),
            got: len,
        });
    }
    Ok(Some((
        udp.source_port(),
        udp.destination_port(),
        &ip_payload[UdpHeader::LEN..len],
    )))
}

/// Builds an Ethernet frame around a RoCE packet the way rxe sends it: IPv4 with TOS 0,
/// TTL 64 and the ID/flags of `ctx` (IPv6: traffic class 0, flow label 0, hop limit 64),
/// UDP checksum 0. For a pcap tap; lengths that do not fit the headers are truncated.
pub fn emit_ethernet_frame(
    ctx: &IcrcContext,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    udp_payload: &[u8],
) -> Vec<u8> {
    let udp_len = UdpHeader::LEN + udp_payload.len();
    let mut out = Vec::with_capacity(Ethernet2Header::LEN + Ipv6Header::LEN + udp_len);
    let ether_type = match ctx.ip {
        IpHeaderInfo::V4 { .. } => EtherType::IPV4,
        IpHeaderInfo::V6 { .. } => EtherType::IPV6,
    };
    out.extend_from_slice(
        &Ethernet2Header {
            source: src_mac,
            destination: dst_mac,
            ether_type,
        }
        .to_bytes(),
    );
    match ctx.ip {
        IpHeaderInfo::V4 {
            src,
            dst,
            identification,
            flags_fragment,
        } => out.extend_from_slice(&ipv4_header(
            src,
            dst,
            identification,
            flags_fragment,
            udp_len,
        )),
        IpHeaderInfo::V6 { src, dst } => out.extend_from_slice(&ipv6_header(src, dst, udp_len)),
    }
    let udp = UdpHeader {
        source_port: ctx.udp_src_port,
        destination_port: ctx.udp_dst_port,
        length: udp_len as u16,
        checksum: 0,
    };
    out.extend_from_slice(&udp.to_bytes());
    out.extend_from_slice(udp_payload);
    out
}

fn ipv4_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    identification: u16,
    flags_fragment: u16,
    payload_len: usize,
) -> Vec<u8> {
    let mut h = Ipv4Header {
        total_len: (Ipv4Header::MIN_LEN + payload_len) as u16,
        identification,
        dont_fragment: flags_fragment & 0x4000 != 0,
        more_fragments: flags_fragment & 0x2000 != 0,
        fragment_offset: IpFragOffset::try_new(flags_fragment & 0x1fff)
            .unwrap_or(IpFragOffset::ZERO),
        time_to_live: 64,
        protocol: IpNumber::UDP,
        source: src.octets(),
        destination: dst.octets(),
        ..Default::default()
    };
    h.header_checksum = h.calc_header_checksum();
    h.to_bytes().to_vec()
}

fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize) -> [u8; Ipv6Header::LEN] {
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: payload_len as u16,
        next_header: IpNumber::UDP,
        hop_limit: 64,
        source: src.octets(),
        destination: dst.octets(),
    }
    .to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // ib_atomic_lat_cmp_swap_mtu1500.pcap frame 24, the whole Ethernet frame.
    const FRAME: &str = concat!(
        "525400770002525400770001080045000038",
        "5f3e40004011c6da0a4d00010a4d0002c6e012b700240000",
        "1200ffff00000028009b726e1f0000014bc42cbaa56198f13386a267"
    );

    #[test]
    fn parse_and_rebuild_real_frame() {
        let f = hex(FRAME);
        let rf = parse_frame(LinkType::Ethernet, &f).unwrap().unwrap();
        assert_eq!(
            rf.ctx.ip,
            IpHeaderInfo::V4 {
                src: Ipv4Addr::new(10, 77, 0, 1),
                dst: Ipv4Addr::new(10, 77, 0, 2),
                identification: 0x5f3e,
                flags_fragment: 0x4000,
            }
        );
        assert_eq!((rf.ctx.udp_src_port, rf.ctx.udp_dst_port), (50912, 4791));
        assert_eq!(rf.udp_payload, &f[42..]);
        let rebuilt = emit_ethernet_frame(
            &rf.ctx,
            f[6..12].try_into().unwrap(),
            f[0..6].try_into().unwrap(),
            rf.udp_payload,
        );
        assert_eq!(rebuilt, f);
    }

    #[test]
    fn cooked_captures() {
        let f = hex(FRAME);
        // SLL v1: packet type, ARPHRD, address length, 8 address bytes, protocol.
        let mut sll = hex("00000001000652540077000100000800");
        sll.extend_from_slice(&f[14..]);
        let a = parse_frame(LinkType::LinuxSll, &sll).unwrap().unwrap();
        // SLL v2: protocol, reserved, ifindex, ARPHRD, packet type, address length, address.
        let mut sll2 = hex("0800000000000002000100065254007700010000");
        sll2.extend_from_slice(&f[14..]);
        let b = parse_frame(LinkType::LinuxSll2, &sll2).unwrap().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.udp_payload, &f[42..]);
    }

    #[test]
    fn vlan_tag_is_skipped() {
        let f = hex(FRAME);
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(
            parse_frame(LinkType::Ethernet, &tagged)
                .unwrap()
                .map(|r| r.udp_payload),
            Some(&f[42..])
        );
    }

    #[test]
    fn non_roce_is_none_and_truncation_is_error() {
        let f = hex(FRAME);
        let mut other_port = f.clone();
        other_port[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(parse_frame(LinkType::Ethernet, &other_port).unwrap(), None);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_frame(LinkType::Ethernet, &arp).unwrap(), None);
        let mut tcp = f.clone();
        tcp[23] = 6;
        assert_eq!(parse_frame(LinkType::Ethernet, &tcp).unwrap(), None);
        assert_eq!(
            parse_frame(LinkType::Ethernet, &f[..f.len() - 1]).unwrap_err(),
            WireError::Truncated {
                needed: 56,
                got: 55
            }
        );
        let mut frag = f.clone();
        frag[20] |= 0x20; // more fragments
        assert!(matches!(
            parse_frame(LinkType::Ethernet, &frag),
            Err(WireError::BadFrame(_))
        ));
        assert!(parse_frame(LinkType::Ethernet, &f[..10]).is_err());
    }

    #[test]
    fn ipv6_frame_roundtrip() {
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V6 {
                src: "fe80::5054:ff:fe77:1".parse().unwrap(),
                dst: "fe80::5054:ff:fe77:2".parse().unwrap(),
            },
            udp_src_port: 50829,
            udp_dst_port: 4791,
        };
        let payload = hex("1100ffff0000002900b2a8851f0000012c61e530");
        let f = emit_ethernet_frame(&ctx, [2; 6], [4; 6], &payload);
        assert_eq!(f.len(), 14 + 40 + 8 + payload.len());
        let rf = parse_frame(LinkType::Ethernet, &f).unwrap().unwrap();
        assert_eq!(
            rf,
            RoceFrame {
                ctx,
                udp_payload: &payload
            }
        );
    }

    #[test]
    fn link_type_numbers() {
        for l in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
            assert_eq!(LinkType::from_pcap(l.pcap_number()), Ok(l));
        }
        assert_eq!(
            LinkType::from_pcap(105),
            Err(WireError::UnsupportedLinkType(105))
        );
    }
}
