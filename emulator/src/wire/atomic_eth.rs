//! Atomic extended transport header (28 bytes): VA, rkey, swap (or add) data, compare data.
//! Carried by COMPARE SWAP and FETCH ADD.

use super::field::{check_len, get_u32, get_u64, set_u32, set_u64};
use super::WireError;

/// Length of the AtomicETH in bytes.
pub const ATOMIC_ETH_LEN: usize = 28;

/// A typed view of an AtomicETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
    /// Wraps `buffer` after checking it holds a whole AtomicETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), ATOMIC_ETH_LEN)?;
        Ok(AtomicEthPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Remote virtual address (8-byte aligned for a valid request).
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 8)
    }

    /// Swap data (compare-swap) or add data (fetch-add).
    pub fn swap_add(&self) -> u64 {
        get_u64(self.buffer.as_ref(), 12)
    }

    /// Compare data (compare-swap only).
    pub fn compare(&self) -> u64 {
        get_u64(self.buffer.as_ref(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthPacket<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }

    /// Sets the swap / add data.
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 12, v);
    }

    /// Sets the compare data.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 20, v);
    }
}

/// The fields of an AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap data (compare-swap) or add data (fetch-add).
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads the fields of an AtomicETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &AtomicEthPacket<&T>,
    ) -> Result<AtomicEthRepr, WireError> {
        Ok(AtomicEthRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    /// Writes every field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut AtomicEthPacket<&mut T>,
    ) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // COMPARE SWAP, ib_atomic_lat_cmp_swap_mtu1500.pcap frame 23 (perftest swaps 0 for 0).
    const CMP_SWAP: [u8; 28] = [
        0x00, 0x00, 0x55, 0x5e, 0x08, 0xfb, 0xa0, 0x00, 0x00, 0x00, 0x1c, 0x8e, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn parse_and_emit_real_bytes() {
        let r =
            AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&CMP_SWAP[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicEthRepr {
                va: 0x555e_08fb_a000,
                rkey: 0x1c8e,
                swap_add: 0,
                compare: 0
            }
        );
        let mut out = [0xffu8; 28];
        r.emit(&mut AtomicEthPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, CMP_SWAP);
    }

    // The capture's operands are zero, so pin the operand offsets with distinct values.
    #[test]
    fn operand_offsets() {
        let r = AtomicEthRepr {
            va: 0x0102_0304_0506_0708,
            rkey: 0x090a_0b0c,
            swap_add: 0x1112_1314_1516_1718,
            compare: 0x2122_2324_2526_2728,
        };
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEthPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(
            &out[12..20],
            &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
        );
        assert_eq!(
            &out[20..28],
            &[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]
        );
        assert_eq!(
            AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&out[..]).unwrap()).unwrap(),
            r
        );
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            AtomicEthPacket::new_checked(&CMP_SWAP[..27]).unwrap_err(),
            WireError::Truncated {
                needed: 28,
                got: 27
            }
        );
    }
}
