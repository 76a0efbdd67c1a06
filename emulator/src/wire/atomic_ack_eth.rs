//! Atomic acknowledge extended transport header (8 bytes): the original remote data.
//! Follows the AETH in ATOMIC ACKNOWLEDGE.

use super::field::{check_len, get_u64, set_u64};
use super::WireError;

/// Length of the AtomicAckETH in bytes.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// A typed view of an AtomicAckETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
    /// Wraps `buffer` after checking it holds a whole AtomicAckETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), ATOMIC_ACK_ETH_LEN)?;
        Ok(AtomicAckEthPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The value at the remote address before the atomic operation.
    pub fn orig(&self) -> u64 {
        get_u64(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthPacket<T> {
    /// Sets the original remote data.
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }
}

/// The fields of an AtomicAckETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The value at the remote address before the operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Reads the field of an AtomicAckETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &AtomicAckEthPacket<&T>,
    ) -> Result<AtomicAckEthRepr, WireError> {
        Ok(AtomicAckEthRepr {
            orig: packet.orig(),
        })
    }

    /// Writes the field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut AtomicAckEthPacket<&mut T>,
    ) {
        packet.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ATOMIC ACKNOWLEDGE, ib_atomic_lat_cmp_swap_mtu1500.pcap frame 24 (after the AETH).
    const ORIG: [u8; 8] = [0x4b, 0xc4, 0x2c, 0xba, 0xa5, 0x61, 0x98, 0xf1];

    #[test]
    fn parse_and_emit_real_bytes() {
        let r =
            AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_checked(&ORIG[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicAckEthRepr {
                orig: 0x4bc4_2cba_a561_98f1
            }
        );
        let mut out = [0u8; 8];
        r.emit(&mut AtomicAckEthPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, ORIG);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            AtomicAckEthPacket::new_checked(&ORIG[..7]).unwrap_err(),
            WireError::Truncated { needed: 8, got: 7 }
        );
    }
}
