//! The classic-BPF program that steers a device's datagrams among the processes sharing its
//! port (`SO_REUSEPORT`): by the slot in the top byte of the BTH's destination QPN, with a
//! probe rule through which the members learn their indices in the group (see
//! docs/shared-devices.md). The BTH sits at the start of the UDP payload of a RoCE device's
//! port, or inside a whole Ethernet frame on a qemu socket link's frames socket
//! ([`Framing`]). Building the program is pure; attaching it is
//! [`crate::net::socket_options::attach_reuseport_cbpf`].

/// One classic-BPF instruction, as `struct sock_filter` lays it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// Operation.
    pub code: u16,
    /// Jump offset when true.
    pub jt: u8,
    /// Jump offset when false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// `ld b [k]`: A = the byte at offset k of the UDP payload.
const LD_B_ABS: u16 = 0x30;
/// `ld h [k]`: A = the big-endian 16 bits at offset k.
const LD_H_ABS: u16 = 0x28;
/// `ldx b 4*([k]&0xf)`: X = the IPv4 header length at offset k, in bytes.
const LDX_B_MSH: u16 = 0xb1;
/// `ld b [x+k]`: A = the byte at offset X + k.
const LD_B_IND: u16 = 0x50;
/// `jeq #k, jt, jf`.
const JEQ_K: u16 = 0x15;
/// `ret #k`.
const RET_K: u16 = 0x06;
/// `ret a`.
const RET_A: u16 = 0x16;

/// Offset of the destination QPN's top byte in the BTH: the owner's slot.
const QPN_SLOT_BYTE: u32 = 5;
/// Offset of the destination QPN's low byte: the index a probe names.
const QPN_LOW_BYTE: u32 = 7;
/// Ethernet header bytes before the IPv4 header of a frame.
const ETHERNET_BYTES: u32 = 14;
/// UDP header bytes between the IPv4 header and the BTH.
const UDP_BYTES: u32 = 8;
/// The Ethernet type of IPv4.
const ETHERTYPE_IPV4: u32 = 0x0800;

/// The slot a RoCE packet (`bth`: its UDP payload, from the BTH on) is steered to: the byte
/// the program reads. `None` for a datagram too short to hold one.
pub fn slot_of(bth: &[u8]) -> Option<u8> {
    bth.get(QPN_SLOT_BYTE as usize).copied()
}

/// What the members' sockets receive, and so where the BTH is in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A RoCE device's UDP port: the datagram's payload is the BTH and what follows.
    UdpPayload,
    /// A qemu socket netdev's frames socket: each datagram is a whole Ethernet frame, the
    /// BTH after the Ethernet, IPv4 (of any header length) and UDP headers. Frames that are
    /// not IPv4 (ARP) go to any member.
    EthernetFrame,
}

/// The slot whose QPNs are probes: `0xFF00ii` asks the kernel for the socket at index `ii`.
/// (0xFFFFFF, the multicast QPN, is not a probe: probes name indices below 254.)
pub const PROBE_SLOT: u8 = 0xFF;
/// Most members one program steers to (slots 1..=254).
pub const MAX_MEMBERS: usize = 254;
/// What the program returns for a datagram no member is named for: an index beyond any
/// group, which makes the kernel fall back to its hash (some member gets it).
pub const ANY_MEMBER: u32 = u32::MAX;

/// The destination QPN of the probe for index `index`.
pub fn probe_qpn(index: u8) -> u32 {
    (u32::from(PROBE_SLOT) << 16) | u32::from(index)
}

/// The program for `members` (slot, index in the group) of a group receiving `framing`:
/// datagrams for a member's slot go to its index, probes to the index they name, everything
/// else to any member. `None` for more than [`MAX_MEMBERS`] members or a slot outside
/// 1..=254.
pub fn program(framing: Framing, members: &[(u8, u32)]) -> Option<Vec<BpfInsn>> {
    program_falling_back(framing, members, ANY_MEMBER)
}

/// [`program`] with what names no member (QP1, a gone slot, a frame that is not IPv4) sent
/// to index `fallback` rather than to the kernel's hash: a member about to leave steers so
/// that nothing more lands in its socket (see `Member::hand_over`).
pub fn program_falling_back(
    framing: Framing,
    members: &[(u8, u32)],
    fallback: u32,
) -> Option<Vec<BpfInsn>> {
    if members.len() > MAX_MEMBERS
        || members
            .iter()
            .any(|&(slot, _)| slot == 0 || slot == PROBE_SLOT)
    {
        return None;
    }
    let insn = |code, jt, jf, k| BpfInsn { code, jt, jf, k };
    let mut p = match framing {
        UdpPayload => vec![insn(LD_B_ABS, 0, 0, QPN_SLOT_BYTE)],
        EthernetFrame => vec![
            insn(LD_H_ABS, 0, 0, ETHERNET_BYTES - 2),
            // Not IPv4 (ARP, IPv6 neighbour discovery): any member, which passes ARP on.
            insn(JEQ_K, 1, 0, ETHERTYPE_IPV4),
            insn(RET_K, 0, 0, fallback),
            // X = the IPv4 header's length, so options do not move the BTH out of reach.
            insn(LDX_B_MSH, 0, 0, ETHERNET_BYTES),
            insn(LD_B_IND, 0, 0, ETHERNET_BYTES + UDP_BYTES + QPN_SLOT_BYTE),
        ],
    };
    let probe_index = match framing {
        UdpPayload => insn(LD_B_ABS, 0, 0, QPN_LOW_BYTE),
        EthernetFrame => insn(LD_B_IND, 0, 0, ETHERNET_BYTES + UDP_BYTES + QPN_LOW_BYTE),
    };
    p.extend([
        // A probe: on to the next two instructions; else skip them.
        insn(JEQ_K, 0, 2, u32::from(PROBE_SLOT)),
        probe_index,
        insn(RET_A, 0, 0, 0),
    ]);
    for &(slot, index) in members {
        // One compare per member: JITted, a chain of 254 costs well under a microsecond, and
        // groups are small.
        p.push(insn(JEQ_K, 0, 1, u32::from(slot)));
        p.push(insn(RET_K, 0, 0, index));
    }
    p.push(insn(RET_K, 0, 0, fallback));
    Some(p)
}

use Framing::{EthernetFrame, UdpPayload};

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the instructions the programs use: what the kernel
    /// computes for `packet` (a failed load returns 0, as the kernel's does).
    fn run(program: &[BpfInsn], packet: &[u8]) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut pc = 0usize;
        let byte = |at: u32| packet.get(at as usize).copied().map(u32::from);
        loop {
            let i = program[pc];
            pc += 1;
            let loaded = match i.code {
                LD_B_ABS => byte(i.k),
                LD_B_IND => byte(x + i.k),
                LD_H_ABS => byte(i.k).zip(byte(i.k + 1)).map(|(h, l)| h << 8 | l),
                LDX_B_MSH => match byte(i.k) {
                    Some(b) => {
                        x = 4 * (b & 0xf);
                        continue;
                    }
                    None => return 0,
                },
                _ => Some(a),
            };
            match i.code {
                LD_B_ABS | LD_B_IND | LD_H_ABS => match loaded {
                    Some(v) => a = v,
                    None => return 0,
                },
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                RET_A => return a,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    fn bth(dest_qpn: u32) -> Vec<u8> {
        let q = dest_qpn.to_be_bytes();
        vec![0x04, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0, 0, 0, 1]
    }

    #[test]
    fn members_slots_probes_and_strangers_are_steered_as_planned() {
        let p = program(UdpPayload, &[(3, 0), (7, 2), (9, 1)]).unwrap();
        assert_eq!(run(&p, &bth(0x03_0011)), 0);
        assert_eq!(run(&p, &bth(0x07_ffff)), 2);
        assert_eq!(run(&p, &bth(0x09_0002)), 1);
        assert_eq!(run(&p, &bth(probe_qpn(5))), 5);
        // QP1 (slot 0), a slot nobody has, and the multicast QPN: any member.
        assert_eq!(run(&p, &bth(1)), ANY_MEMBER);
        assert_eq!(run(&p, &bth(0x42_0001)), ANY_MEMBER);
        assert_eq!(run(&p, &bth(0xff_ffff)), 0xff);
        // Too short to hold a QPN: the load fails, index 0 (garbage goes somewhere).
        assert_eq!(run(&p, &[4, 0, 0]), 0);
    }

    #[test]
    fn a_fallback_takes_what_names_no_member_in_both_framings() {
        let p = program_falling_back(UdpPayload, &[(3, 0), (9, 2)], 2).unwrap();
        assert_eq!(run(&p, &bth(0x03_0011)), 0);
        assert_eq!(run(&p, &bth(probe_qpn(1))), 1);
        assert_eq!(run(&p, &bth(1)), 2, "QP1");
        assert_eq!(run(&p, &bth(0x07_0001)), 2, "a slot no member has");
        let p = program_falling_back(EthernetFrame, &[(3, 0)], 4).unwrap();
        assert_eq!(run(&p, &frame(0x0806, 5, &bth(0x03_0011))), 4, "ARP");
        assert_eq!(run(&p, &frame(0x0800, 5, &bth(1))), 4);
        assert_eq!(run(&p, &frame(0x0800, 5, &bth(0x03_0011))), 0);
    }

    #[test]
    fn slot_zero_the_probe_slot_and_too_many_members_are_refused() {
        for framing in [UdpPayload, EthernetFrame] {
            assert!(program(framing, &[(0, 0)]).is_none());
            assert!(program(framing, &[(PROBE_SLOT, 0)]).is_none());
            let too_many: Vec<(u8, u32)> = (0..255).map(|i| (1 + (i % 254) as u8, i)).collect();
            assert!(program(framing, &too_many).is_none());
        }
        let many: Vec<(u8, u32)> = (1..=254u8).map(|s| (s, u32::from(s))).collect();
        assert_eq!(program(UdpPayload, &many).unwrap().len(), 4 + 2 * 254 + 1);
    }

    /// `bth` in an Ethernet/IPv4/UDP frame whose IPv4 header has `ihl` 32-bit words.
    fn frame(ether_type: u16, ihl: u8, bth: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ether_type.to_be_bytes());
        let mut ip = vec![0u8; 4 * usize::from(ihl)];
        ip[0] = 0x40 | ihl;
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0xc0, 0x01, 0x12, 0xb7, 0, 0, 0, 0]);
        f.extend_from_slice(bth);
        f
    }

    #[test]
    fn frames_are_steered_by_the_bth_behind_any_ipv4_header_and_arp_goes_anywhere() {
        let p = program(EthernetFrame, &[(3, 0), (7, 2)]).unwrap();
        for ihl in [5, 6, 15] {
            assert_eq!(
                run(&p, &frame(0x0800, ihl, &bth(0x03_0011))),
                0,
                "ihl {ihl}"
            );
            assert_eq!(
                run(&p, &frame(0x0800, ihl, &bth(0x07_0002))),
                2,
                "ihl {ihl}"
            );
            assert_eq!(run(&p, &frame(0x0800, ihl, &bth(probe_qpn(4)))), 4);
            assert_eq!(run(&p, &frame(0x0800, ihl, &bth(1))), ANY_MEMBER);
        }
        // ARP (whatever its bytes say at the BTH's place) and IPv6: any member.
        let arp = frame(0x0806, 5, &bth(0x03_0011));
        assert_eq!(run(&p, &arp), ANY_MEMBER);
        assert_eq!(run(&p, &frame(0x86dd, 5, &bth(0x07_0002))), ANY_MEMBER);
        // The UDP program reads the frame's first bytes instead: not what a frame needs.
        let udp = program(UdpPayload, &[(3, 0), (7, 2)]).unwrap();
        assert_ne!(run(&udp, &frame(0x0800, 5, &bth(0x07_0002))), 2);
    }
}
