//! RDMA extended transport header (16 bytes): virtual address, rkey, DMA length.
//! Carried by RDMA WRITE FIRST/ONLY, READ REQUEST, ATOMIC WRITE and FLUSH.

use super::field::{check_len, get_u32, get_u64, set_u32, set_u64};
use super::WireError;

/// Length of the RETH in bytes.
pub const RETH_LEN: usize = 16;

/// A typed view of a RETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    /// Wraps `buffer` after checking it holds a whole RETH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), RETH_LEN)?;
        Ok(RethPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 8)
    }

    /// DMA length of the whole message in bytes.
    pub fn dma_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 12, v);
    }
}

/// The fields of a RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads the fields of a RETH view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &RethPacket<&T>) -> Result<RethRepr, WireError> {
        Ok(RethRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            dma_len: packet.dma_len(),
        })
    }

    /// Writes every field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut RethPacket<&mut T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC RDMA WRITE ONLY, ib_write_lat_mtu1500.pcap frame 23 (64 B write).
    const WRITE_ONLY: [u8; 16] = [
        0x00, 0x00, 0x55, 0x7f, 0x22, 0x8f, 0x30, 0x00, 0x00, 0x00, 0x14, 0x5f, 0x00, 0x00, 0x00,
        0x40,
    ];
    // RC RDMA READ REQUEST, ib_read_bw_4096_mtu1500.pcap frame 21 (4096 B read).
    const READ_REQ: [u8; 16] = [
        0x00, 0x00, 0x56, 0x51, 0xb1, 0x76, 0x20, 0x00, 0x00, 0x00, 0x1f, 0xa3, 0x00, 0x00, 0x10,
        0x00,
    ];

    #[test]
    fn parse_and_emit_real_bytes() {
        for (bytes, want) in [
            (
                WRITE_ONLY,
                RethRepr {
                    va: 0x557f_228f_3000,
                    rkey: 0x145f,
                    dma_len: 64,
                },
            ),
            (
                READ_REQ,
                RethRepr {
                    va: 0x5651_b176_2000,
                    rkey: 0x1fa3,
                    dma_len: 4096,
                },
            ),
        ] {
            let r = RethRepr::parse(&RethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
            assert_eq!(r, want);
            let mut out = [0u8; RETH_LEN];
            r.emit(&mut RethPacket::new_checked(&mut out[..]).unwrap());
            assert_eq!(out, bytes);
        }
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            RethPacket::new_checked(&WRITE_ONLY[..15]).unwrap_err(),
            WireError::Truncated {
                needed: 16,
                got: 15
            }
        );
    }
}
