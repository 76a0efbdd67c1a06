//! The floor under a RoCE sender on this path, for `udp-baseline`: a verb's packets sent
//! the way the engine's UDP link lays them out (headers from a buffer of their own, a
//! payload over [`COPY_PAYLOADS_UP_TO`] bytes read in place from the message's memory, the ICRC
//! behind it), their ICRC computed for every send by the engine's own function, and nothing
//! else: no queues, window, ACKs or completions. What softverbs costs beyond this is its
//! own overhead; what this costs beyond raw UDP is the price of RoCE's format here.

use std::net::{IpAddr, SocketAddr};

use softverbs_emu::net::batch_sys::{parts_around, Datagram, PARTS};
use softverbs_emu::transport::requester::COPY_PAYLOADS_UP_TO;
use softverbs_emu::wire::{
    write_icrc, write_icrc_with_payload, IcrcContext, IpHeaderInfo, ICRC_LEN, IPV4_FLAG_DF,
};

/// Enough copies of one message's packets to fill a send call, ready to have their ICRCs
/// computed and be sent.
pub struct RocePackets {
    /// Each packet's buffer: headers, the payload (or stand-in bytes where it is read in
    /// place), ICRC.
    buffers: Vec<Vec<u8>>,
    /// Each packet's header length and the range of `memory` its payload is read from
    /// (empty where it travels in the buffer).
    layout: Vec<(usize, std::ops::Range<usize>)>,
    /// The message's memory (one copy, which every copy of the message reads, as a
    /// perftest buffer is sent again and again).
    memory: Vec<u8>,
    ctx: IcrcContext,
    dst: SocketAddr,
}

/// One packet as the kernel gets it: up to three pieces.
pub struct Piece<'a> {
    buffer: &'a [u8],
    at: usize,
    payload: &'a [u8],
    dst: SocketAddr,
}

impl Datagram for Piece<'_> {
    fn bytes(&self) -> &[u8] {
        self.buffer
    }
    fn destination(&self) -> SocketAddr {
        self.dst
    }
    fn parts(&self) -> [&[u8]; PARTS] {
        parts_around(self.buffer, self.at, self.payload)
    }
}

impl RocePackets {
    /// `copies` messages of `packets` (header bytes, padded payload bytes) from `src` to
    /// `dst`; `None` unless both are IPv4 (the path `udp-baseline` measures).
    pub fn new(
        packets: &[(usize, usize)],
        copies: usize,
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Option<Self> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (src.ip(), dst.ip()) else {
            return None;
        };
        let ctx = IcrcContext {
            // An unconnected UDP socket sends with DF set and identification 0.
            ip: IpHeaderInfo::V4 {
                src: s,
                dst: d,
                identification: 0,
                flags_fragment: IPV4_FLAG_DF,
            },
            udp_src_port: src.port(),
            udp_dst_port: dst.port(),
        };
        let mut layout = Vec::new();
        let mut offset = 0;
        for &(headers, payload) in packets {
            let range = if payload > COPY_PAYLOADS_UP_TO {
                offset..offset + payload
            } else {
                0..0
            };
            offset += payload;
            layout.push((headers, range));
        }
        let memory = (0..offset).map(|i| i as u8).collect();
        let buffers = (0..copies)
            .flat_map(|_| packets.iter().map(|&(h, p)| vec![0x5a; h + p + ICRC_LEN]))
            .collect();
        let layout = layout
            .iter()
            .cycle()
            .take(copies * packets.len())
            .cloned()
            .collect();
        Some(RocePackets {
            buffers,
            layout,
            memory,
            ctx,
            dst,
        })
    }

    /// Computes every packet's ICRC (as the sender must before every send of them).
    pub fn seal(&mut self) {
        for (buffer, (at, payload)) in self.buffers.iter_mut().zip(&self.layout) {
            if payload.is_empty() {
                write_icrc(&self.ctx, buffer);
            } else {
                write_icrc_with_payload(&self.ctx, buffer, *at, &self.memory[payload.clone()]);
            }
        }
    }

    /// The packets as the kernel gets them.
    pub fn pieces(&self) -> Vec<Piece<'_>> {
        self.buffers
            .iter()
            .zip(&self.layout)
            .map(|(buffer, (at, payload))| Piece {
                buffer,
                at: *at,
                payload: &self.memory[payload.clone()],
                dst: self.dst,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_emu::wire::verify_icrc;

    #[test]
    fn sealed_packets_carry_the_icrc_of_what_the_kernel_sends() {
        let src: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        // A 4196-byte WRITE at MTU 4096: the RETH packet by reference, a short tail copied.
        let mut p = RocePackets::new(&[(28, 4096), (12, 100)], 2, src, dst).unwrap();
        p.seal();
        assert_eq!(p.pieces().len(), 4);
        let ctx = p.ctx;
        for piece in p.pieces() {
            let wire: Vec<u8> = piece.parts().concat();
            assert_eq!(wire.len(), piece.bytes().len());
            assert!(verify_icrc(&ctx, &wire), "the ICRC covers the bytes sent");
        }
        let pieces = p.pieces();
        assert_eq!(pieces[0].parts()[1].len(), 4096, "read in place");
        assert_eq!(pieces[0].parts()[1], &p.memory[..4096]);
        assert!(pieces[1].parts()[1].is_empty(), "a short payload is copied");
        assert!(RocePackets::new(&[(12, 8)], 1, "[::1]:1".parse().unwrap(), dst).is_none());
    }
}
