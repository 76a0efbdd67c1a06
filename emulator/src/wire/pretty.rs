//! One-line rendering of a RoCE packet, for logs, the decode tool and fuzzing reports.

use std::fmt;

use super::aeth::{AethKind, NakCode};
use super::RoceRepr;

impl fmt::Display for AethKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AethKind::Ack => f.write_str("ACK"),
            AethKind::RnrNak { timer } => write!(f, "RNR_NAK(timer={timer})"),
            AethKind::Nak(code) => {
                let name = match code {
                    NakCode::PsnSequenceError => "PSN_SEQ_ERR",
                    NakCode::InvalidRequest => "INVALID_REQ",
                    NakCode::RemoteAccessError => "REMOTE_ACCESS_ERR",
                    NakCode::RemoteOperationalError => "REMOTE_OP_ERR",
                    NakCode::InvalidRdRequest => "INVALID_RD_REQ",
                };
                write!(f, "NAK({name})")
            }
            AethKind::Reserved(s) => write!(f, "RESERVED(0x{s:02x})"),
        }
    }
}

/// `OPCODE qp=0xDDDDDD psn=N [A] [SE] [M] [FECN] [BECN] [pkey=..] [tver=..] headers len=N`.
impl fmt::Display for RoceRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bth;
        match b.opcode.info() {
            Some(info) => f.write_str(info.name)?,
            None => write!(f, "UNKNOWN(0x{:02x})", b.opcode.0)?,
        }
        write!(f, " qp=0x{:06x} psn={}", b.dest_qp, b.psn)?;
        for (on, flag) in [
            (b.ack_req, "A"),
            (b.solicited, "SE"),
            (b.mig_req, "M"),
            (b.fecn, "FECN"),
            (b.becn, "BECN"),
        ] {
            if on {
                write!(f, " {flag}")?;
            }
        }
        if b.pkey != 0xffff {
            write!(f, " pkey=0x{:04x}", b.pkey)?;
        }
        if b.tver != 0 {
            write!(f, " tver={}", b.tver)?;
        }
        if let Some(d) = &self.deth {
            write!(f, " deth(qkey=0x{:08x} srcqp=0x{:06x})", d.qkey, d.src_qp)?;
        }
        if let Some(e) = &self.feth {
            write!(
                f,
                " feth(plt={} sel={})",
                e.placement_type(),
                e.selectivity_level()
            )?;
        }
        if let Some(r) = &self.reth {
            write!(
                f,
                " reth(va=0x{:x} rkey=0x{:x} len={})",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = &self.atomic_eth {
            write!(
                f,
                " atomic(va=0x{:x} rkey=0x{:x} swap_add=0x{:x} compare=0x{:x})",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = &self.aeth {
            write!(f, " aeth({} msn={})", a.kind(), a.msn)?;
        }
        if let Some(a) = &self.atomic_ack_eth {
            write!(f, " atomic_ack(orig=0x{:x})", a.orig)?;
        }
        if let Some(v) = self.immdt {
            write!(f, " imm=0x{v:08x}")?;
        }
        if let Some(v) = self.ieth {
            write!(f, " ieth(rkey=0x{v:x})")?;
        }
        write!(f, " len={}", self.payload.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AethRepr, Opcode};
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn lines_for_real_packets() {
        let cases = [
            // ib_send_bw_4096_mtu1500.pcap frame 27
            ("1100ffff0000002900b2a8851f0000012c61e530", "RC_ACKNOWLEDGE qp=0x000029 psn=11708549 aeth(ACK msn=1) len=0"),
            // pyverbs_rc_imm_rnr_mtu1500.pcap frame 22
            ("1100ffff00000030004049552c00000336dd5000", "RC_ACKNOWLEDGE qp=0x000030 psn=4213077 aeth(RNR_NAK(timer=12) msn=3) len=0"),
            // ib_write_lat_mtu1500.pcap frame 23, payload cut to 4 bytes
            (
                "0a00ffff000000248036a06e0000557f228f30000000145f000000400000000000000000",
                "RC_RDMA_WRITE_ONLY qp=0x000024 psn=3580014 A reth(va=0x557f228f3000 rkey=0x145f len=64) len=4",
            ),
        ];
        for (bytes, line) in cases {
            let b = hex(bytes);
            let (r, _) = RoceRepr::parse(&b).unwrap();
            assert_eq!(r.to_string(), line);
        }
    }

    #[test]
    fn nak_and_unknown() {
        let b = hex("1100ffff0000002900b2a8851f0000012c61e530");
        let (mut r, _) = RoceRepr::parse(&b).unwrap();
        r.aeth = Some(AethRepr::nak(NakCode::PsnSequenceError, 7));
        r.bth.opcode = Opcode(0x15);
        r.bth.solicited = true;
        r.bth.pkey = 0x8001;
        assert_eq!(
            r.to_string(),
            "UNKNOWN(0x15) qp=0x000029 psn=11708549 SE pkey=0x8001 aeth(NAK(PSN_SEQ_ERR) msn=7) len=0"
        );
    }
}
