//! Base transport header (12 bytes), present in every RoCE packet.
//!
//! ```text
//! byte 0     opcode
//! byte 1     SE(7) MigReq(6) PadCnt(5:4) TVer(3:0)
//! bytes 2-3  P_Key
//! byte 4     FECN(7) BECN(6) reserved(5:0)
//! bytes 5-7  destination QP
//! byte 8     AckReq(7) reserved(6:0)
//! bytes 9-11 PSN
//! ```

use super::field::{check_len, get_u16, get_u24, set_u16, set_u24};
use super::{Opcode, Psn, WireError};

/// Length of the BTH in bytes.
pub const BTH_LEN: usize = 12;

/// A typed view of a BTH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps `buffer` after checking it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), BTH_LEN)?;
        Ok(BthPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opcode (byte 0).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }

    /// Solicited event bit.
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }

    /// Migration request bit.
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }

    /// Number of pad bytes (0..=3) between payload and ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 0x3
    }

    /// Transport header version (0 for IBTA 1.x).
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0f
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        get_u16(self.b(), 2)
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }

    /// The 6 reserved bits of byte 4 (sent as zero; not kept in [`BthRepr`]).
    pub fn reserved6(&self) -> u8 {
        self.b()[4] & 0x3f
    }

    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        get_u24(self.b(), 5)
    }

    /// Acknowledge request bit.
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }

    /// The 7 reserved bits of byte 8 (sent as zero; not kept in [`BthRepr`]).
    pub fn reserved7(&self) -> u8 {
        self.b()[8] & 0x7f
    }

    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(get_u24(self.b(), 9))
    }
}

fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.b_mut()[0] = v.0;
    }

    /// Sets the solicited event bit.
    pub fn set_solicited(&mut self, v: bool) {
        set_bit(&mut self.b_mut()[1], 0x80, v);
    }

    /// Sets the migration request bit.
    pub fn set_mig_req(&mut self, v: bool) {
        set_bit(&mut self.b_mut()[1], 0x40, v);
    }

    /// Sets the pad count (low 2 bits of `v`).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.b_mut()[1];
        *b = (*b & !0x30) | ((v & 0x3) << 4);
    }

    /// Sets the transport header version (low 4 bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.b_mut()[1];
        *b = (*b & !0x0f) | (v & 0x0f);
    }

    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.b_mut(), 2, v);
    }

    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        set_bit(&mut self.b_mut()[4], 0x80, v);
    }

    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        set_bit(&mut self.b_mut()[4], 0x40, v);
    }

    /// Sets the reserved bits of byte 4 (low 6 bits of `v`).
    pub fn set_reserved6(&mut self, v: u8) {
        let b = &mut self.b_mut()[4];
        *b = (*b & !0x3f) | (v & 0x3f);
    }

    /// Sets the destination QP (low 24 bits of `v`).
    pub fn set_dest_qp(&mut self, v: u32) {
        set_u24(self.b_mut(), 5, v);
    }

    /// Sets the acknowledge request bit.
    pub fn set_ack_req(&mut self, v: bool) {
        set_bit(&mut self.b_mut()[8], 0x80, v);
    }

    /// Sets the reserved bits of byte 8 (low 7 bits of `v`).
    pub fn set_reserved7(&mut self, v: u8) {
        let b = &mut self.b_mut()[8];
        *b = (*b & !0x7f) | (v & 0x7f);
    }

    /// Sets the PSN.
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.b_mut(), 9, v.value());
    }
}

/// The fields of a BTH. Reserved bits are not kept: parse ignores them, emit writes zeros
/// (as rxe does; every captured packet has them zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode (not checked against the table here; [`super::RoceRepr::parse`] does).
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count (0..=3). [`super::RoceRepr::emit`] ignores this and derives it from the
    /// payload length.
    pub pad_count: u8,
    /// Transport header version.
    pub tver: u8,
    /// Partition key (rxe: 0xffff).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH as rxe sends it: P_Key 0xffff, TVer 0, no MigReq / SE / FECN / BECN, no AckReq.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads the fields of a BTH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &BthPacket<&T>) -> Result<BthRepr, WireError> {
        Ok(BthRepr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_count: packet.pad_count(),
            tver: packet.tver(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// Writes every field (reserved bits zero). Out-of-range values are masked to their
    /// field width.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut BthPacket<&mut T>) {
        packet.set_opcode(self.opcode);
        let b1 = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad_count & 0x3) << 4)
            | (self.tver & 0x0f);
        packet.b_mut()[1] = b1;
        packet.set_pkey(self.pkey);
        packet.b_mut()[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        packet.set_dest_qp(self.dest_qp);
        packet.b_mut()[8] = u8::from(self.ack_req) << 7;
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC SEND ONLY from ib_send_lat_mtu1500.pcap frame 23.
    const SEND_ONLY: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2a, 0x80, 0x4f, 0x72, 0x3e,
    ];
    // UD SEND ONLY (CM MAD to QP1) from ib_send_lat_rdmacm_mtu1500.pcap frame 1.
    const UD_SEND: [u8; 12] = [
        0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0x80, 0x00, 0x00, 0x03,
    ];

    #[test]
    fn parse_real_send_only() {
        let p = BthPacket::new_checked(&SEND_ONLY[..]).unwrap();
        let r = BthRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                tver: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x2a,
                ack_req: true,
                psn: Psn::new(0x4f723e),
            }
        );
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, SEND_ONLY);
    }

    #[test]
    fn parse_real_ud_send() {
        let r = BthRepr::parse(&BthPacket::new_checked(&UD_SEND[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(r.dest_qp, 1);
        assert_eq!(r.psn, Psn::new(3));
        assert!(r.ack_req);
    }

    #[test]
    fn every_bit_lands_in_its_place() {
        let r = BthRepr {
            opcode: Opcode(0xa5),
            solicited: true,
            mig_req: true,
            pad_count: 3,
            tver: 0xf,
            pkey: 0x1234,
            fecn: true,
            becn: true,
            dest_qp: 0xabcdef,
            ack_req: true,
            psn: Psn::new(0x123456),
        };
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(
            out,
            [0xa5, 0xff, 0x12, 0x34, 0xc0, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56]
        );
        assert_eq!(
            BthRepr::parse(&BthPacket::new_checked(&out[..]).unwrap()).unwrap(),
            r
        );
    }

    #[test]
    fn setters_touch_only_their_bits() {
        let mut b = [0xffu8; 12];
        let mut p = BthPacket::new_checked(&mut b[..]).unwrap();
        p.set_pad_count(0);
        p.set_becn(false);
        p.set_reserved7(0);
        assert_eq!(
            b,
            [0xff, 0xcf, 0xff, 0xff, 0xbf, 0xff, 0xff, 0xff, 0x80, 0xff, 0xff, 0xff]
        );
        let p = BthPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.reserved6(), p.reserved7(), p.tver()), (0x3f, 0, 0xf));
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            BthPacket::new_checked(&SEND_ONLY[..11]).unwrap_err(),
            WireError::Truncated {
                needed: 12,
                got: 11
            }
        );
    }
}
