//! The packet that crosses from the transport to the link: a RoCE packet (BTH .. ICRC
//! room) and where it goes, built in a buffer of the packet pool (`packet_pool`), with
//! its payload possibly left in registered memory until the link sends it. The transport
//! builds these; links send them and give the buffers back.

use std::net::IpAddr;

use super::packet_pool;
use crate::memory::{LocalSlice, MrReader};
use crate::wire::EmitHeaders;

/// Where the QP's packets go (RC/UC), fixed at RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// The peer's IP address (from the destination GID).
    pub dst_ip: IpAddr,
    /// UDP destination port.
    pub udp_dst_port: u16,
    /// UDP source port (from both QP numbers, as rxe computes it).
    pub udp_src_port: u16,
}

/// A RoCE packet ready to go out, except for its ICRC (which depends on the IP header the
/// link builds): the last four bytes of `bytes` are left for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutPacket {
    /// Destination IP address.
    pub dst_ip: IpAddr,
    /// UDP destination port (4791 unless configured for emulator-to-emulator use).
    pub udp_dst_port: u16,
    /// UDP source port (from the QP numbers, as rxe computes it).
    pub udp_src_port: u16,
    /// BTH .. ICRC.
    pub bytes: Vec<u8>,
    /// Where the payload is, if `bytes` does not hold it: the driver reads it from
    /// registered memory when it sends the packet (see `transport::Env::payload_by_reference`).
    pub payload: Option<PayloadRef>,
}

/// A packet's payload left in registered memory: `bytes[at..at + slice.len]` stands for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    /// Offset of the payload in the packet (after its headers).
    pub at: usize,
    /// The memory it is read from.
    pub slice: LocalSlice,
}

/// Stands in for a payload that is read from registered memory rather than copied from
/// the repr: only its length is used.
static PAYLOAD_STAND_IN: [u8; 4096] = [0; 4096];

/// A `len`-byte stand-in for a repr's payload (see [`OutPacket::build_filled`] and
/// [`OutPacket::build_by_reference`]); `None` beyond 4096 bytes, the largest MTU.
pub fn payload_stand_in(len: usize) -> Option<&'static [u8]> {
    PAYLOAD_STAND_IN.get(..len)
}

impl OutPacket {
    /// Emits `repr` for `path`, leaving room for the ICRC. `None` only if the repr is
    /// inconsistent with the opcode table (a transport bug, counted by the caller).
    pub fn build(path: &PathInfo, repr: &impl EmitHeaders) -> Option<Self> {
        // Every byte is written (headers, payload, pad, zeroed ICRC): no need to zero.
        let mut bytes = packet_pool::take_for_overwrite(repr.buffer_len());
        let Ok(at) = repr.emit_headers(&mut bytes) else {
            packet_pool::give(bytes);
            return None;
        };
        let payload = repr.payload();
        bytes[at..at + payload.len()].copy_from_slice(payload);
        Some(OutPacket::to(path, bytes))
    }

    /// Like [`OutPacket::build`], but the payload is written by `fill` into the packet
    /// (straight from registered memory) instead of copied from `repr.payload`, of which only
    /// the length counts. `Err` carries what `fill` returned; `Ok(None)` is `build`'s `None`.
    pub fn build_filled<E>(
        path: &PathInfo,
        repr: &impl EmitHeaders,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Option<Self>, E> {
        let mut bytes = packet_pool::take_for_overwrite(repr.buffer_len());
        let Ok(at) = repr.emit_headers(&mut bytes) else {
            packet_pool::give(bytes);
            return Ok(None);
        };
        if let Err(e) = fill(&mut bytes[at..at + repr.payload().len()]) {
            packet_pool::give(bytes);
            return Err(e);
        }
        Ok(Some(OutPacket::to(path, bytes)))
    }

    /// Like [`OutPacket::build`], but the payload stays in registered memory at `slice`
    /// (already checked): headers, pad and ICRC room are written, the payload bytes are not.
    pub fn build_by_reference(
        path: &PathInfo,
        repr: &impl EmitHeaders,
        slice: LocalSlice,
    ) -> Option<Self> {
        let mut bytes = packet_pool::take_for_overwrite(repr.buffer_len());
        let Ok(at) = repr.emit_headers(&mut bytes) else {
            packet_pool::give(bytes);
            return None;
        };
        let mut packet = OutPacket::to(path, bytes);
        packet.payload = Some(PayloadRef { at, slice });
        Some(packet)
    }

    /// Copies `payload` (the bytes of [`OutPacket::payload`]) into the packet, which then
    /// carries its payload like any other.
    pub fn fill_payload(&mut self, payload: &[u8]) {
        if let Some(r) = self.payload.take() {
            self.bytes[r.at..r.at + payload.len()].copy_from_slice(payload);
        }
    }

    fn to(path: &PathInfo, bytes: Vec<u8>) -> OutPacket {
        OutPacket {
            dst_ip: path.dst_ip,
            udp_dst_port: path.udp_dst_port,
            udp_src_port: path.udp_src_port,
            bytes,
            payload: None,
        }
    }
}

/// The payloads of one send call, held inline up to a 64 KiB message at MTU 4096: a send
/// allocates nothing for them.
pub type Payloads<'r> = smallvec::SmallVec<[&'r [u8]; 16]>;

/// The payloads `packets` left in registered memory, read through `reader`: entry `i` is
/// packet `i`'s (empty for a packet carrying its own). A packet whose memory is gone
/// (deregistered since it was built) is taken out of `packets`, its buffer back to the pool,
/// and counted in the second value: it is lost, and the requester's retry reports the SGE.
pub fn payloads_in_memory<'r>(
    packets: &mut Vec<OutPacket>,
    reader: &'r MrReader<'_>,
) -> (Payloads<'r>, usize) {
    let mut payloads = Payloads::with_capacity(packets.len());
    let mut gone = 0;
    let mut i = 0;
    while i < packets.len() {
        match packets[i].payload.map(|r| reader.bytes(&r.slice)) {
            None => payloads.push(&[]),
            Some(Ok(bytes)) => payloads.push(bytes),
            Some(Err(_)) => {
                packet_pool::give(packets.remove(i).bytes);
                gone += 1;
                continue;
            }
        }
        i += 1;
    }
    (payloads, gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MrTable;
    use softverbs_api::AccessFlags;
    use std::net::Ipv4Addr;

    const PD: u32 = 3;

    fn packet(payload: Option<LocalSlice>) -> OutPacket {
        OutPacket {
            dst_ip: Ipv4Addr::LOCALHOST.into(),
            udp_dst_port: 4791,
            udp_src_port: 49152,
            bytes: vec![0xee; 40],
            payload: payload.map(|slice| PayloadRef { at: 28, slice }),
        }
    }

    #[test]
    fn payloads_are_read_in_place_and_a_packet_whose_region_went_is_dropped() {
        let mem = MrTable::new(4);
        let a: Vec<u8> = (0..64).collect();
        let b: Vec<u8> = (100..164).collect();
        let ka = mem
            .register(PD, a.as_ptr() as u64, 64, AccessFlags::empty())
            .unwrap();
        let kb = mem
            .register(PD, b.as_ptr() as u64, 64, AccessFlags::empty())
            .unwrap();
        let slice = |buf: &[u8], lkey, from: usize| LocalSlice {
            pd: PD,
            lkey,
            addr: buf.as_ptr() as u64 + from as u64,
            len: 8,
        };
        let mut packets = vec![
            packet(Some(slice(&a, ka.lkey, 4))),
            packet(None),
            packet(Some(slice(&b, kb.lkey, 56))),
        ];
        {
            let reader = mem.reader();
            let (payloads, gone) = payloads_in_memory(&mut packets, &reader);
            assert_eq!(gone, 0);
            assert_eq!(payloads[..], [&a[4..12], &[][..], &b[56..64]]);
        }
        mem.deregister(kb.lkey).unwrap();
        let reader = mem.reader();
        let (payloads, gone) = payloads_in_memory(&mut packets, &reader);
        assert_eq!(gone, 1);
        assert_eq!(packets.len(), 2);
        assert_eq!(payloads[..], [&a[4..12], &[][..]]);
        // Filled, a packet carries its payload like any other.
        let mut first = packets[0].clone();
        first.fill_payload(payloads[0]);
        assert_eq!(first.payload, None);
        assert_eq!(&first.bytes[28..36], &a[4..12]);
        assert!(first.bytes[..28]
            .iter()
            .chain(&first.bytes[36..])
            .all(|&x| x == 0xee));
    }
}
