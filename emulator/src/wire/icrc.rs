//! The RoCEv2 invariant CRC and how to check it when the IP header is not at hand.
//!
//! # What the ICRC covers
//! CRC-32 (the zlib/Ethernet polynomial, init and final xor all-ones) over
//! `8 x 0xff | IP header | UDP header | BTH | extension headers | payload | pad`, with the
//! fields that routers may change masked to all-ones: IPv4 TOS, TTL and header checksum
//! (IPv6 traffic class, flow label and hop limit), the UDP checksum, and BTH byte 4
//! (FECN/BECN/reserved). The 4 ICRC bytes follow the pad, little-endian. IP and UDP
//! lengths are derived from the RoCE packet's length (IPv4 header of 20 bytes, no options).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use super::bth::BTH_LEN;
use super::roce::ICRC_LEN;

// Recovering the IPv4 identification a UDP socket hides (a GF(2) solver).
mod ipv4_id;
pub use ipv4_id::solve_ipv4_identification;

/// The IP header fields the ICRC covers (besides lengths, which follow from the packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpHeaderInfo {
    /// IPv4.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// Identification field.
        identification: u16,
        /// Flags and fragment offset (0x4000 = DF, no fragment).
        flags_fragment: u16,
    },
    /// IPv6 (no extension headers).
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

/// Everything outside the RoCE packet that its ICRC depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcrcContext {
    /// IP header fields.
    pub ip: IpHeaderInfo,
    /// UDP source port.
    pub udp_src_port: u16,
    /// UDP destination port (4791).
    pub udp_dst_port: u16,
}

/// The IPv4 "don't fragment" flag in `flags_fragment`.
pub const IPV4_FLAG_DF: u16 = 0x4000;

const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
const IP_PROTO_UDP: u8 = 17;
/// Offset of the IPv4 identification in the CRC input (after the 8 0xff bytes).
const IPV4_ID_OFFSET: usize = 8 + 4;
/// Reflected CRC-32 polynomial.
const POLY: u32 = 0xedb8_8320;

/// Length-dependent 16-bit fields, truncated like the wire fields would be.
fn len16(n: usize) -> [u8; 2] {
    (n as u16).to_be_bytes()
}

/// Covered bytes of a packet short enough to be hashed with its pseudo-headers in one update.
const SHORT_PACKET: usize = 64;
/// Longest hashed head after the leading all-ones bytes: IPv6 header, UDP header and a short
/// packet.
const MAX_HEAD: usize = IPV6_HEADER_LEN + UDP_HEADER_LEN + SHORT_PACKET;

/// A hasher that has taken the 8 all-ones bytes that open every ICRC input, cloned per
/// packet: that skips hashing them and the CPU feature check a new hasher makes.
fn hasher_after_leading_ones() -> crc32fast::Hasher {
    static AFTER: OnceLock<crc32fast::Hasher> = OnceLock::new();
    AFTER
        .get_or_init(|| {
            let mut h = crc32fast::Hasher::new();
            h.update(&[0xff; 8]);
            h
        })
        .clone()
}

/// Writes the masked IP + UDP headers that precede the RoCE packet in the CRC input (after
/// the all-ones bytes, which [`hasher_after_leading_ones`] has taken) at the start of `out`,
/// at fixed offsets (this runs twice per packet, sender and receiver); returns their length.
fn pseudo_headers(ctx: &IcrcContext, packet_len: usize, out: &mut [u8; MAX_HEAD]) -> usize {
    let udp_len = len16(UDP_HEADER_LEN + packet_len);
    let udp_at = match ctx.ip {
        IpHeaderInfo::V4 {
            src,
            dst,
            identification,
            flags_fragment,
        } => {
            // version/IHL, TOS (masked), total length, identification, flags/fragment,
            // TTL (masked), protocol, checksum (masked), addresses.
            out[0..2].copy_from_slice(&[0x45, 0xff]);
            out[2..4].copy_from_slice(&len16(IPV4_HEADER_LEN + UDP_HEADER_LEN + packet_len));
            out[4..6].copy_from_slice(&identification.to_be_bytes());
            out[6..8].copy_from_slice(&flags_fragment.to_be_bytes());
            out[8..12].copy_from_slice(&[0xff, IP_PROTO_UDP, 0xff, 0xff]);
            out[12..16].copy_from_slice(&src.octets());
            out[16..20].copy_from_slice(&dst.octets());
            IPV4_HEADER_LEN
        }
        IpHeaderInfo::V6 { src, dst } => {
            // version, traffic class and flow label (masked), payload length, next
            // header, hop limit (masked), addresses.
            out[0..4].copy_from_slice(&[0x6f, 0xff, 0xff, 0xff]);
            out[4..6].copy_from_slice(&udp_len);
            out[6..8].copy_from_slice(&[IP_PROTO_UDP, 0xff]);
            out[8..24].copy_from_slice(&src.octets());
            out[24..40].copy_from_slice(&dst.octets());
            IPV6_HEADER_LEN
        }
    };
    let udp = &mut out[udp_at..udp_at + UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&ctx.udp_src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&ctx.udp_dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len);
    udp[6..8].copy_from_slice(&[0xff, 0xff]);
    udp_at + UDP_HEADER_LEN
}

/// ICRC of `packet`, the whole UDP payload (BTH..ICRC); its last 4 bytes are not covered.
/// A packet shorter than 4 bytes is treated as having no covered bytes.
pub fn compute_icrc(ctx: &IcrcContext, packet: &[u8]) -> u32 {
    compute_icrc_with(ctx, packet, 0, &[])
}

/// [`compute_icrc`] of `packet` with `payload` in place of its bytes from `at` on: for a
/// packet whose payload is sent from elsewhere (registered memory) and was never copied in.
/// `at` must not be inside the BTH, and `payload` must fit before the ICRC.
fn compute_icrc_with(ctx: &IcrcContext, packet: &[u8], at: usize, payload: &[u8]) -> u32 {
    let mut head = [0u8; MAX_HEAD];
    let bth_at = pseudo_headers(ctx, packet.len(), &mut head);
    let covered = &packet[..packet.len().saturating_sub(ICRC_LEN)];
    // A short packet (an ACK, a small SEND) goes to the hasher whole with the headers, in one
    // update: each update costs some 40-60 instructions, whatever its length up to here.
    let head_end = if payload.is_empty() && covered.len() <= SHORT_PACKET {
        covered.len()
    } else {
        covered.len().min(BTH_LEN)
    };
    head[bth_at..bth_at + head_end].copy_from_slice(&covered[..head_end]);
    if head_end > 4 {
        // FECN, BECN and the reserved bits may change in flight.
        head[bth_at + 4] = 0xff;
    }
    // The headers in one update, the leading all-ones bytes already hashed.
    let mut hasher = hasher_after_leading_ones();
    hasher.update(&head[..bth_at + head_end]);
    if payload.is_empty() {
        // A short packet is all in the headers' update: an empty one would still cost.
        if head_end < covered.len() {
            hasher.update(&covered[head_end..]);
        }
    } else {
        // Empty pieces (a middle packet has no header after the BTH, most have no pad) are
        // skipped: each update call costs, whatever its length.
        for piece in [
            &covered[head_end..at],
            payload,
            &covered[at + payload.len()..],
        ] {
            if !piece.is_empty() {
                hasher.update(piece);
            }
        }
    }
    hasher.finalize()
}

/// Like [`write_icrc`], for a packet whose bytes from `at` on are `payload` on the wire
/// (sent from registered memory by a second iovec) whatever `packet` holds there.
/// Panics if `at` is inside the BTH or `payload` does not fit before the ICRC (a caller bug).
pub fn write_icrc_with_payload(ctx: &IcrcContext, packet: &mut [u8], at: usize, payload: &[u8]) {
    assert!(
        at >= BTH_LEN && at + payload.len() + ICRC_LEN <= packet.len(),
        "payload outside the packet"
    );
    let icrc = compute_icrc_with(ctx, packet, at, payload);
    let end = packet.len() - ICRC_LEN;
    packet[end..].copy_from_slice(&icrc.to_le_bytes());
}

/// Computes the ICRC and stores it little-endian in the last 4 bytes of `packet`
/// (does nothing if `packet` is shorter than 4 bytes).
pub fn write_icrc(ctx: &IcrcContext, packet: &mut [u8]) {
    if packet.len() < ICRC_LEN {
        return;
    }
    let icrc = compute_icrc(ctx, packet);
    let at = packet.len() - ICRC_LEN;
    packet[at..].copy_from_slice(&icrc.to_le_bytes());
}

/// The ICRC stored in the last 4 bytes of `packet`, if it has them.
pub fn stored_icrc(packet: &[u8]) -> Option<u32> {
    let at = packet.len().checked_sub(ICRC_LEN)?;
    let mut b = [0u8; ICRC_LEN];
    b.copy_from_slice(&packet[at..]);
    Some(u32::from_le_bytes(b))
}

/// Whether the stored ICRC matches the packet in `ctx`.
pub fn verify_icrc(ctx: &IcrcContext, packet: &[u8]) -> bool {
    stored_icrc(packet) == Some(compute_icrc(ctx, packet))
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

    // ib_atomic_lat_cmp_swap_mtu1500.pcap frame 24: 10.77.0.1 -> 10.77.0.2, IP ID 0x5f3e,
    // DF, UDP 50912 -> 4791, RC ATOMIC ACKNOWLEDGE.
    fn atomic_ack() -> (IcrcContext, Vec<u8>) {
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: Ipv4Addr::new(10, 77, 0, 1),
                dst: Ipv4Addr::new(10, 77, 0, 2),
                identification: 0x5f3e,
                flags_fragment: IPV4_FLAG_DF,
            },
            udp_src_port: 50912,
            udp_dst_port: 4791,
        };
        (
            ctx,
            hex("1200ffff00000028009b726e1f0000014bc42cbaa56198f13386a267"),
        )
    }

    #[test]
    fn real_packet_verifies() {
        let (ctx, p) = atomic_ack();
        assert_eq!(compute_icrc(&ctx, &p), 0x67a2_8633);
        assert!(verify_icrc(&ctx, &p));
        let mut wrong = ctx;
        wrong.udp_src_port ^= 1;
        assert!(!verify_icrc(&wrong, &p));
    }

    #[test]
    fn masked_fields_do_not_matter() {
        let (ctx, mut p) = atomic_ack();
        p[4] = 0xc0; // FECN + BECN set in flight
        assert!(verify_icrc(&ctx, &p));
        p[5] ^= 1; // the destination QP is covered
        assert!(!verify_icrc(&ctx, &p));
    }

    #[test]
    fn write_icrc_stores_le() {
        let (ctx, p) = atomic_ack();
        let mut q = p.clone();
        q[24..].fill(0);
        write_icrc(&ctx, &mut q);
        assert_eq!(q, p);
        let mut tiny = [1u8, 2];
        write_icrc(&ctx, &mut tiny);
        assert_eq!(tiny, [1, 2]);
        assert!(!verify_icrc(&ctx, &tiny));
    }

    #[test]
    fn an_icrc_over_a_payload_sent_from_elsewhere_is_the_captured_one() {
        let (ctx, p) = atomic_ack();
        // Bytes 16..24 (the AtomicAckETH here) come from another buffer, as a payload sent
        // from registered memory does; the packet's own bytes there do not count.
        for (at, len) in [(16, 8), (12, 12), (12, 4), (20, 4)] {
            let mut q = p.clone();
            q[at..at + len].fill(0xee);
            q[24..].fill(0);
            write_icrc_with_payload(&ctx, &mut q, at, &p[at..at + len]);
            assert_eq!(q[24..], p[24..], "at {at} len {len}");
            assert!(q[at..at + len].iter().all(|&b| b == 0xee));
        }
        // A different payload gives a different ICRC.
        let mut q = p.clone();
        write_icrc_with_payload(&ctx, &mut q, 16, &[0; 8]);
        assert_ne!(q[24..], p[24..]);
    }

    /// The ICRC from scratch: the whole CRC input built, then hashed in one call.
    fn icrc_from_scratch(ctx: &IcrcContext, packet: &[u8]) -> u32 {
        let mut head = [0; MAX_HEAD];
        let len = pseudo_headers(ctx, packet.len(), &mut head);
        let mut input = vec![0xff; 8];
        input.extend_from_slice(&head[..len]);
        input.extend_from_slice(&packet[..packet.len() - ICRC_LEN]);
        if packet.len() - ICRC_LEN > 4 {
            input[8 + len + 4] = 0xff;
        }
        crc32fast::hash(&input)
    }

    #[test]
    fn short_and_long_packets_hash_the_same_bytes() {
        let (v4, p) = atomic_ack();
        let v6 = IcrcContext {
            ip: IpHeaderInfo::V6 {
                src: Ipv6Addr::LOCALHOST,
                dst: Ipv6Addr::LOCALHOST,
            },
            ..v4
        };
        // Around the length hashed in one update with the headers, and a BTH byte 4 that
        // must count as all ones.
        let bytes: Vec<u8> = (0..120u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for ctx in [&v4, &v6] {
            for len in ICRC_LEN..=120 {
                let packet = &bytes[..len];
                assert_eq!(
                    compute_icrc(ctx, packet),
                    icrc_from_scratch(ctx, packet),
                    "{len} bytes, {ctx:?}"
                );
            }
        }
        assert_eq!(compute_icrc(&v4, &p), 0x67a2_8633);
    }

    #[test]
    fn solve_finds_the_captured_id() {
        let (ctx, p) = atomic_ack();
        let got = solve_ipv4_identification(
            Ipv4Addr::new(10, 77, 0, 1),
            Ipv4Addr::new(10, 77, 0, 2),
            50912,
            4791,
            &p,
        );
        assert_eq!(got, Some(ctx.ip));
    }

    #[test]
    fn solve_handles_id_zero_and_no_df() {
        let (mut ctx, mut p) = atomic_ack();
        for (id, flags) in [
            (0, IPV4_FLAG_DF),
            (0xffff, 0),
            (0x8001, IPV4_FLAG_DF),
            (0x1234, 0),
        ] {
            let IpHeaderInfo::V4 { src, dst, .. } = ctx.ip else {
                unreachable!()
            };
            ctx.ip = IpHeaderInfo::V4 {
                src,
                dst,
                identification: id,
                flags_fragment: flags,
            };
            write_icrc(&ctx, &mut p);
            assert_eq!(
                solve_ipv4_identification(src, dst, 50912, 4791, &p),
                Some(ctx.ip)
            );
        }
    }

    // Brute force over all IDs for one small packet: the matrix method agrees with it.
    #[test]
    fn solve_matches_brute_force() {
        let (ctx, p) = atomic_ack();
        let IpHeaderInfo::V4 { src, dst, .. } = ctx.ip else {
            unreachable!()
        };
        let brute: Vec<u16> = (0..=u16::MAX)
            .filter(|&id| {
                let c = IcrcContext {
                    ip: IpHeaderInfo::V4 {
                        src,
                        dst,
                        identification: id,
                        flags_fragment: IPV4_FLAG_DF,
                    },
                    ..ctx
                };
                verify_icrc(&c, &p)
            })
            .collect();
        assert_eq!(brute, [0x5f3e]);
    }

    #[test]
    fn solve_rejects_short_or_corrupt() {
        let (_, mut p) = atomic_ack();
        let (s, d) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(solve_ipv4_identification(s, d, 50912, 4791, &p[..3]), None);
        p[13] ^= 0x01;
        assert_eq!(solve_ipv4_identification(s, d, 50912, 4791, &p), None);
    }

    #[test]
    fn ipv6_pseudo_header() {
        // rc_pingpong_ipv6gid_mtu1500.pcap: checked end to end in tests/conformance_captures.rs;
        // here only that traffic class / flow label / hop limit are not inputs.
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V6 {
                src: Ipv6Addr::LOCALHOST,
                dst: Ipv6Addr::UNSPECIFIED,
            },
            udp_src_port: 1,
            udp_dst_port: 4791,
        };
        let mut head = [0; MAX_HEAD];
        assert_eq!(pseudo_headers(&ctx, 20, &mut head), 40 + 8);
        assert_eq!(&head[0..8], &[0x6f, 0xff, 0xff, 0xff, 0x00, 28, 17, 0xff]);
    }
}
