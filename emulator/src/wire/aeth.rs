//! ACK extended transport header (4 bytes): syndrome and MSN.
//!
//! Syndrome bits 6:5 select ACK (00), RNR NAK (01) or NAK (11); the low 5 bits are the
//! credit count, the RNR timer code or the NAK code. Bit 7 and the 10 encoding are
//! reserved.

use super::field::{check_len, get_u24, set_u24};
use super::WireError;

/// Length of the AETH in bytes.
pub const AETH_LEN: usize = 4;

/// A typed view of an AETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    /// Wraps `buffer` after checking it holds a whole AETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), AETH_LEN)?;
        Ok(AethPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        get_u24(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    /// Sets the syndrome byte.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    /// Sets the MSN (low 24 bits of `v`).
    pub fn set_msn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), 1, v);
    }
}

/// NAK codes (syndrome 0b011x_xxxx).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    /// PSN sequence error: the AETH's PSN is the one the responder expects.
    PsnSequenceError = 0,
    /// Invalid request.
    InvalidRequest = 1,
    /// Remote access error (bad rkey, bounds or access rights).
    RemoteAccessError = 2,
    /// Remote operational error.
    RemoteOperationalError = 3,
    /// Invalid RD request.
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The code from the low 5 syndrome bits, `None` if reserved.
    pub fn from_u8(v: u8) -> Option<NakCode> {
        Some(match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// What a syndrome says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// Positive acknowledge (credit count in the low bits; rxe always sends 0x1f).
    Ack,
    /// Receiver not ready; `timer` is the 5-bit RNR timer code.
    RnrNak {
        /// Encoded minimum RNR NAK timer (IBTA table), 0..=31.
        timer: u8,
    },
    /// Negative acknowledge.
    Nak(NakCode),
    /// A reserved syndrome (reserved bit 7, encoding 0b10, or an unassigned NAK code);
    /// carries the raw byte.
    Reserved(u8),
}

/// The fields of an AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Raw syndrome byte; see [`AethRepr::kind`].
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Syndrome of a plain ACK as rxe sends it: credit count 0x1f ("invalid", i.e. no
    /// end-to-end credits).
    pub const ACK_SYNDROME: u8 = 0x1f;

    /// An ACK with rxe's syndrome 0x1f.
    pub fn ack(msn: u32) -> AethRepr {
        AethRepr {
            syndrome: Self::ACK_SYNDROME,
            msn: msn & 0x00ff_ffff,
        }
    }

    /// An RNR NAK with the 5-bit timer code `timer`.
    pub fn rnr_nak(timer: u8, msn: u32) -> AethRepr {
        AethRepr {
            syndrome: 0x20 | (timer & 0x1f),
            msn: msn & 0x00ff_ffff,
        }
    }

    /// A NAK with `code`.
    pub fn nak(code: NakCode, msn: u32) -> AethRepr {
        AethRepr {
            syndrome: 0x60 | code as u8,
            msn: msn & 0x00ff_ffff,
        }
    }

    /// Decodes the syndrome.
    pub fn kind(&self) -> AethKind {
        let low = self.syndrome & 0x1f;
        match self.syndrome >> 5 {
            0 => AethKind::Ack,
            1 => AethKind::RnrNak { timer: low },
            3 => NakCode::from_u8(low).map_or(AethKind::Reserved(self.syndrome), AethKind::Nak),
            _ => AethKind::Reserved(self.syndrome),
        }
    }

    /// The credit count of an ACK (low 5 bits; 0x1f means "not used").
    pub fn credits(&self) -> u8 {
        self.syndrome & 0x1f
    }

    /// Reads the fields of an AETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &AethPacket<&T>) -> Result<AethRepr, WireError> {
        Ok(AethRepr {
            syndrome: packet.syndrome(),
            msn: packet.msn(),
        })
    }

    /// Writes every field (MSN masked to 24 bits).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut AethPacket<&mut T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ACK (MSN 1), ib_send_bw_4096_mtu1500.pcap frame 27.
    const ACK: [u8; 4] = [0x1f, 0x00, 0x00, 0x01];
    // RNR NAK timer 12 (MSN 3), pyverbs_rc_imm_rnr_mtu1500.pcap frame 22.
    const RNR_NAK: [u8; 4] = [0x2c, 0x00, 0x00, 0x03];

    fn parse(b: &[u8]) -> AethRepr {
        AethRepr::parse(&AethPacket::new_checked(b).unwrap()).unwrap()
    }

    #[test]
    fn real_ack() {
        let r = parse(&ACK);
        assert_eq!(r, AethRepr::ack(1));
        assert_eq!(r.kind(), AethKind::Ack);
        assert_eq!(r.credits(), 0x1f);
        let mut out = [0u8; 4];
        r.emit(&mut AethPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, ACK);
    }

    #[test]
    fn real_rnr_nak() {
        let r = parse(&RNR_NAK);
        assert_eq!(r, AethRepr::rnr_nak(12, 3));
        assert_eq!(r.kind(), AethKind::RnrNak { timer: 12 });
    }

    #[test]
    fn nak_codes() {
        // 0x60 = PSN sequence error, as in the README's loss captures.
        assert_eq!(AethRepr::nak(NakCode::PsnSequenceError, 9).syndrome, 0x60);
        for code in [
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ] {
            assert_eq!(AethRepr::nak(code, 0).kind(), AethKind::Nak(code));
        }
        assert_eq!(
            AethRepr {
                syndrome: 0x65,
                msn: 0
            }
            .kind(),
            AethKind::Reserved(0x65)
        );
        assert_eq!(
            AethRepr {
                syndrome: 0x40,
                msn: 0
            }
            .kind(),
            AethKind::Reserved(0x40)
        );
        assert_eq!(
            AethRepr {
                syndrome: 0x9f,
                msn: 0
            }
            .kind(),
            AethKind::Reserved(0x9f)
        );
    }

    #[test]
    fn msn_is_24_bits() {
        let mut out = [0u8; 4];
        AethRepr {
            syndrome: 0,
            msn: 0xff12_3456,
        }
        .emit(&mut AethPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, [0x00, 0x12, 0x34, 0x56]);
        assert_eq!(AethRepr::ack(0x0100_0002).msn, 2);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            AethPacket::new_checked(&ACK[..3]).unwrap_err(),
            WireError::Truncated { needed: 4, got: 3 }
        );
    }
}
