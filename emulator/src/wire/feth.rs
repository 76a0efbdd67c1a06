//! FLUSH extended transport header (4 bytes, IBTA 1.5 memory placement extensions):
//! bits 3:0 placement type, bits 5:4 selectivity level, the rest reserved.
//! Precedes the RETH in RC FLUSH.

use super::field::{check_len, get_u32, set_u32};
use super::WireError;

/// Length of the FETH in bytes.
pub const FETH_LEN: usize = 4;

/// A typed view of a FETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FethPacket<T> {
    /// Wraps `buffer` after checking it holds a whole FETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), FETH_LEN)?;
        Ok(FethPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole 32-bit word.
    pub fn raw(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FethPacket<T> {
    /// Sets the whole 32-bit word.
    pub fn set_raw(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

/// The FETH word. Kept raw so reserved bits round-trip; the fields are accessors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// The 32-bit word as on the wire (host order).
    pub raw: u32,
}

impl FethRepr {
    /// Placement type 1: global visibility.
    pub const PLACEMENT_GLOBAL_VISIBILITY: u8 = 1;
    /// Placement type 2: persistence.
    pub const PLACEMENT_PERSISTENCE: u8 = 2;
    /// Selectivity level 0: the memory range named by the RETH.
    pub const SELECTIVITY_MEMORY_RANGE: u8 = 0;
    /// Selectivity level 1: the whole memory region.
    pub const SELECTIVITY_MEMORY_REGION: u8 = 1;

    /// A FETH from its two fields (each masked to its width).
    pub fn new(placement_type: u8, selectivity_level: u8) -> FethRepr {
        FethRepr {
            raw: u32::from(placement_type & 0xf) | (u32::from(selectivity_level & 0x3) << 4),
        }
    }

    /// Placement type (bits 3:0).
    pub fn placement_type(&self) -> u8 {
        (self.raw & 0xf) as u8
    }

    /// Selectivity level (bits 5:4).
    pub fn selectivity_level(&self) -> u8 {
        ((self.raw >> 4) & 0x3) as u8
    }

    /// Reads the word of a FETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &FethPacket<&T>) -> Result<FethRepr, WireError> {
        Ok(FethRepr { raw: packet.raw() })
    }

    /// Writes the word.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut FethPacket<&mut T>) {
        packet.set_raw(self.raw);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // No capture has a FLUSH (the guests' 6.1 rxe lacks it); bytes built from the layout in
    // rxe_hdr.h: persistence (2) at memory-region level (1) = 0x12, big-endian.
    #[test]
    fn fields_and_bytes() {
        let r = FethRepr::new(
            FethRepr::PLACEMENT_PERSISTENCE,
            FethRepr::SELECTIVITY_MEMORY_REGION,
        );
        let mut out = [0u8; 4];
        r.emit(&mut FethPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, [0, 0, 0, 0x12]);
        let back = FethRepr::parse(&FethPacket::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!((back.placement_type(), back.selectivity_level()), (2, 1));
        assert_eq!(FethRepr::new(0xff, 0xff).raw, 0x3f);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            FethPacket::new_checked(&[0u8; 3][..]).unwrap_err(),
            WireError::Truncated { needed: 4, got: 3 }
        );
    }
}
