//! Immediate data (4 bytes, big-endian on the wire). Its repr is a plain `u32` in host
//! order: the value of the four wire bytes read as a big-endian number.
//!
//! Note for the verbs layer: libibverbs' `imm_data` is a `__be32`, i.e. the application's
//! bytes go to the wire unchanged; on a little-endian host an application value
//! 0x11223344 appears on the wire as 44 33 22 11 and parses here as 0x44332211.

use super::field::{check_len, get_u32, set_u32};
use super::WireError;

/// Length of ImmDt in bytes.
pub const IMMDT_LEN: usize = 4;

/// A typed view of ImmDt at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmDtPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDtPacket<T> {
    /// Wraps `buffer` after checking it holds ImmDt.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), IMMDT_LEN)?;
        Ok(ImmDtPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The immediate value (wire bytes read big-endian).
    pub fn value(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtPacket<T> {
    /// Writes the immediate value big-endian.
    pub fn set_value(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC SEND ONLY WITH IMMEDIATE, pyverbs_rc_imm_rnr_mtu1500.pcap frame 17; the client
    // posted imm_data 0x99aabbcc from a little-endian host.
    const IMM: [u8; 4] = [0xcc, 0xbb, 0xaa, 0x99];

    #[test]
    fn real_bytes() {
        let p = ImmDtPacket::new_checked(&IMM[..]).unwrap();
        assert_eq!(p.value(), 0xccbb_aa99);
        let mut out = [0u8; 4];
        ImmDtPacket::new_checked(&mut out[..])
            .unwrap()
            .set_value(p.value());
        assert_eq!(out, IMM);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            ImmDtPacket::new_checked(&IMM[..2]).unwrap_err(),
            WireError::Truncated { needed: 4, got: 2 }
        );
    }
}
