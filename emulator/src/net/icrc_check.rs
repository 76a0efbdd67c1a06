//! The receiver's ICRC check, and which IP header it assumes.
//!
//! The ICRC covers the IPv4 identification and flags, which a UDP socket does not report. Two
//! kinds of sender reach us:
//! - softverbs devices send DF with identification 0 (see `udp.rs`) from their own bound port,
//!   4791 or an explicitly configured one; the ICRC is then checked against exactly that
//!   header, a full 32-bit check;
//! - kernel rxe sends from a per-QP port at or above 0xC000 with an identification that
//!   counts; the receiver solves for it (`wire::solve_ipv4_identification`), which leaves a
//!   16-bit check: a corruption whose CRC difference one identification can absorb passes.
//!
//! In-process links know the header they carried and say so in the datagram.

use std::net::IpAddr;

use super::DatagramView;
use crate::wire::{
    solve_ipv4_identification, verify_icrc, IcrcContext, IpHeaderInfo, IPV4_FLAG_DF,
};

/// rxe's UDP source ports are `0xC000 | (flow label bits)`, never below this.
pub const RXE_MIN_SRC_PORT: u16 = 0xC000;

/// The IPv4 identification the datagram travelled with, as the ICRC check sees it: what the
/// link reported, 0 for softverbs senders (DF), or the solved value for rxe-style senders.
/// `None` for IPv6 or when no identification fits.
pub fn ipv4_identification<'a>(d: impl Into<DatagramView<'a>>) -> Option<u16> {
    let d = d.into();
    match (d.src.ip(), d.dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => d.ipv4_identification.or_else(|| {
            if d.src.port() < RXE_MIN_SRC_PORT {
                Some(0)
            } else {
                match solve_ipv4_identification(src, dst, d.src.port(), d.dst.port(), d.payload) {
                    Some(IpHeaderInfo::V4 { identification, .. }) => Some(identification),
                    _ => None,
                }
            }
        }),
        _ => None,
    }
}

/// True if the datagram's ICRC is right for the header it most plausibly travelled with.
pub fn icrc_ok<'a>(d: impl Into<DatagramView<'a>>) -> bool {
    let d = d.into();
    let (sport, dport) = (d.src.port(), d.dst.port());
    match (d.src.ip(), d.dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let known_id = d
                .ipv4_identification
                .or_else(|| (sport < RXE_MIN_SRC_PORT).then_some(0));
            match known_id {
                Some(identification) => verify_icrc(
                    &IcrcContext {
                        ip: IpHeaderInfo::V4 {
                            src,
                            dst,
                            identification,
                            flags_fragment: IPV4_FLAG_DF,
                        },
                        udp_src_port: sport,
                        udp_dst_port: dport,
                    },
                    d.payload,
                ),
                None => solve_ipv4_identification(src, dst, sport, dport, d.payload).is_some(),
            }
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => verify_icrc(
            &IcrcContext {
                ip: IpHeaderInfo::V6 { src, dst },
                udp_src_port: sport,
                udp_dst_port: dport,
            },
            d.payload,
        ),
        _ => false,
    }
}
