//! The classic-BPF program that steers a device's datagrams among the processes sharing its
//! port (`SO_REUSEPORT`): by the slot in the top byte of the BTH's destination QPN, with a
//! probe rule through which the members learn their indices in the group (see
//! docs/shared-devices.md). Building the program is pure; attaching it is
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

/// The program for `members` (slot, index in the group): datagrams for a member's slot go
/// to its index, probes to the index they name, everything else to any member. `None` for
/// more than [`MAX_MEMBERS`] members or a slot outside 1..=254.
pub fn program(members: &[(u8, u32)]) -> Option<Vec<BpfInsn>> {
    if members.len() > MAX_MEMBERS
        || members
            .iter()
            .any(|&(slot, _)| slot == 0 || slot == PROBE_SLOT)
    {
        return None;
    }
    let insn = |code, jt, jf, k| BpfInsn { code, jt, jf, k };
    let mut p = vec![
        insn(LD_B_ABS, 0, 0, QPN_SLOT_BYTE),
        // A probe: on to the next two instructions; else skip them.
        insn(JEQ_K, 0, 2, u32::from(PROBE_SLOT)),
        insn(LD_B_ABS, 0, 0, QPN_LOW_BYTE),
        insn(RET_A, 0, 0, 0),
    ];
    for &(slot, index) in members {
        // One compare per member: JITted, a chain of 254 costs well under a microsecond, and
        // groups are small.
        p.push(insn(JEQ_K, 0, 1, u32::from(slot)));
        p.push(insn(RET_K, 0, 0, index));
    }
    p.push(insn(RET_K, 0, 0, ANY_MEMBER));
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the four instructions the program uses: what the
    /// kernel computes for `packet` (a failed load returns 0, as the kernel's does).
    fn run(program: &[BpfInsn], packet: &[u8]) -> u32 {
        let mut a = 0u32;
        let mut pc = 0usize;
        loop {
            let i = program[pc];
            pc += 1;
            match i.code {
                LD_B_ABS => match packet.get(i.k as usize) {
                    Some(&b) => a = u32::from(b),
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
        let p = program(&[(3, 0), (7, 2), (9, 1)]).unwrap();
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
    fn slot_zero_the_probe_slot_and_too_many_members_are_refused() {
        assert!(program(&[(0, 0)]).is_none());
        assert!(program(&[(PROBE_SLOT, 0)]).is_none());
        let many: Vec<(u8, u32)> = (1..=254u8).map(|s| (s, u32::from(s))).collect();
        assert_eq!(program(&many).unwrap().len(), 4 + 2 * 254 + 1);
        let too_many: Vec<(u8, u32)> = (0..255).map(|i| (1 + (i % 254) as u8, i)).collect();
        assert!(program(&too_many).is_none());
    }
}
