//! Invalidate extended transport header (4 bytes): the rkey to invalidate, big-endian.
//! Carried by SEND LAST/ONLY WITH INVALIDATE. Its repr is a plain `u32`.

use super::field::{check_len, get_u32, set_u32};
use super::WireError;

/// Length of the IETH in bytes.
pub const IETH_LEN: usize = 4;

/// A typed view of an IETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IethPacket<T> {
    /// Wraps `buffer` after checking it holds an IETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), IETH_LEN)?;
        Ok(IethPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The rkey to invalidate.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IethPacket<T> {
    /// Sets the rkey to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // No capture has SEND WITH INVALIDATE; an rkey in the form rxe hands out (index << 8 | key).
    #[test]
    fn rkey_is_big_endian() {
        let mut out = [0u8; 4];
        IethPacket::new_checked(&mut out[..])
            .unwrap()
            .set_rkey(0x0000_2695);
        assert_eq!(out, [0x00, 0x00, 0x26, 0x95]);
        assert_eq!(IethPacket::new_checked(&out[..]).unwrap().rkey(), 0x2695);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            IethPacket::new_checked(&[0u8; 1][..]).unwrap_err(),
            WireError::Truncated { needed: 4, got: 1 }
        );
    }
}
