//! The probes through which the members of a shared device learn their indices in the
//! port's `SO_REUSEPORT` group: a BTH-shaped head whose destination QPN is `0xFF00ii`
//! (the steering program hands it to the socket at index `ii`), the probe round's number
//! and the number of members probed. On a UDP port the probe is the datagram itself; on a
//! qemu socket link's frames socket it is wrapped in a minimal Ethernet/IPv4/UDP frame, so
//! that the frame program finds it where it finds every BTH (see `steering`). Pure.

use std::net::Ipv4Addr;

use super::steering::{probe_qpn, Framing, PROBE_SLOT};
use crate::wire::{emit_ethernet_frame, IcrcContext, IpHeaderInfo, IPV4_FLAG_DF};

/// Bytes of a probe: a BTH-shaped head naming the index, then the round's number.
pub const PROBE_BYTES: usize = 20;
/// Where the probe starts in a probe frame: after Ethernet (14), IPv4 without options (20)
/// and UDP (8).
const FRAME_PROBE_AT: usize = 14 + 20 + 8;

/// What a probe says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The index in the group it was steered to.
    pub index: u8,
    /// The probe round.
    pub generation: u64,
    /// How many members the round probed: what a member shares the link's pacing with.
    pub members: u16,
    /// The slot of the member whose hand-over this round is (`Member::hand_over`): the
    /// others watch for it to be gone and re-probe then. On the wire the byte after
    /// `members`, 0 for none (no member holds slot 0), which earlier parsers ignore.
    pub leaving: Option<u8>,
}

impl Probe {
    /// The probe as a UDP payload.
    pub fn to_bytes(self) -> [u8; PROBE_BYTES] {
        let mut p = [0u8; PROBE_BYTES];
        let qpn = probe_qpn(self.index).to_be_bytes();
        p[5..8].copy_from_slice(&qpn[1..4]);
        // Bytes 8..12 are the BTH's PSN word, which no steering looks at.
        p[8..10].copy_from_slice(&self.members.to_be_bytes());
        p[10] = self.leaving.unwrap_or(0);
        p[12..20].copy_from_slice(&self.generation.to_be_bytes());
        p
    }

    /// The probe as a frame of the segment of `ip` (from and to it: no station answers it,
    /// the receiving member takes it before its station sees it).
    pub fn to_frame(self, ip: Ipv4Addr, udp_port: u16) -> Vec<u8> {
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: ip,
                dst: ip,
                identification: 0,
                flags_fragment: IPV4_FLAG_DF,
            },
            udp_src_port: udp_port,
            udp_dst_port: udp_port,
        };
        emit_ethernet_frame(&ctx, [0; 6], [0; 6], &self.to_bytes())
    }

    /// The probe `bytes` are (a UDP payload), if they are one.
    pub fn parse(bytes: &[u8]) -> Option<Probe> {
        if bytes.len() != PROBE_BYTES || bytes[5] != PROBE_SLOT || bytes[6] != 0 {
            return None;
        }
        Some(Probe {
            index: bytes[7],
            generation: u64::from_be_bytes(bytes[12..20].try_into().ok()?),
            members: u16::from_be_bytes([bytes[8], bytes[9]]),
            leaving: (bytes[10] != 0).then_some(bytes[10]),
        })
    }

    /// The probe `frame` carries, if it is a probe frame as [`Probe::to_frame`] builds them.
    pub fn parse_frame(frame: &[u8]) -> Option<Probe> {
        let is_ipv4_without_options = frame.get(12..15) == Some(&[0x08, 0x00, 0x45][..]);
        if !is_ipv4_without_options {
            return None;
        }
        Probe::parse(frame.get(FRAME_PROBE_AT..)?)
    }

    /// The probe in `framing`'s form (a frame on the segment of `ip`:`udp_port`).
    pub fn encode(self, framing: Framing, ip: Ipv4Addr, udp_port: u16) -> Vec<u8> {
        match framing {
            Framing::UdpPayload => self.to_bytes().to_vec(),
            Framing::EthernetFrame => self.to_frame(ip, udp_port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_survive_both_forms_and_others_are_not_probes() {
        let probe = Probe {
            index: 3,
            generation: 0x0102_0304_0506_0708,
            members: 2,
            leaving: None,
        };
        assert_eq!(Probe::parse(&probe.to_bytes()), Some(probe));
        let handing_over = Probe {
            leaving: Some(7),
            ..probe
        };
        assert_eq!(Probe::parse(&handing_over.to_bytes()), Some(handing_over));
        let frame = probe.to_frame(Ipv4Addr::new(10, 77, 0, 1), 4791);
        assert_eq!(frame.len(), FRAME_PROBE_AT + PROBE_BYTES);
        assert_eq!(Probe::parse_frame(&frame), Some(probe));
        // Where the frame steering program reads the slot and the index.
        assert_eq!((frame[14 + 20 + 8 + 5], frame[14 + 20 + 8 + 7]), (0xff, 3));
        assert_eq!(Probe::parse(&frame), None, "a frame is no UDP probe");
        let mut data = probe.to_bytes();
        data[5] = 0x01;
        assert_eq!(Probe::parse(&data), None, "a slot-1 QPN is data");
        assert_eq!(Probe::parse(&probe.to_bytes()[..12]), None);
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(Probe::parse_frame(&arp), None);
    }
}
