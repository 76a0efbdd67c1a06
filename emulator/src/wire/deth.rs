//! Datagram extended transport header (8 bytes): Q_Key, reserved byte, source QP.
//! Carried by every UD packet.

use super::field::{check_len, get_u24, get_u32, set_u24, set_u32};
use super::WireError;

/// Length of the DETH in bytes.
pub const DETH_LEN: usize = 8;

/// A typed view of a DETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
    /// Wraps `buffer` after checking it holds a whole DETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), DETH_LEN)?;
        Ok(DethPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Queue key.
    pub fn qkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }

    /// The reserved byte (sent as zero; not kept in [`DethRepr`]).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    /// Source QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        get_u24(self.buffer.as_ref(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethPacket<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }

    /// Sets the reserved byte.
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[4] = v;
    }

    /// Sets the source QP (low 24 bits of `v`).
    pub fn set_src_qp(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), 5, v);
    }
}

/// The fields of a DETH (the reserved byte is emitted as zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Reads the fields of a DETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &DethPacket<&T>) -> Result<DethRepr, WireError> {
        Ok(DethRepr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    /// Writes every field, reserved byte zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut DethPacket<&mut T>) {
        packet.set_qkey(self.qkey);
        packet.set_reserved(0);
        packet.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // CM MAD (UD SEND ONLY to QP1), ib_send_lat_rdmacm_mtu1500.pcap frame 1: the GSI Q_Key.
    const CM_MAD: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn parse_and_emit_real_bytes() {
        let r = DethRepr::parse(&DethPacket::new_checked(&CM_MAD[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1
            }
        );
        let mut out = [0xffu8; 8];
        r.emit(&mut DethPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, CM_MAD);
    }

    #[test]
    fn src_qp_is_24_bits_and_reserved_is_skipped() {
        let b = [0, 0, 0, 7, 0xee, 0x12, 0x34, 0x56];
        let p = DethPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.qkey(), p.reserved(), p.src_qp()), (7, 0xee, 0x123456));
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            DethPacket::new_checked(&CM_MAD[..7]).unwrap_err(),
            WireError::Truncated { needed: 8, got: 7 }
        );
    }
}
