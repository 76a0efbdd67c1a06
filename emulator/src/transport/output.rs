//! What the transport hands back to its driver: packets to send and completions to queue.

use std::cell::Cell;
use std::net::IpAddr;

use softverbs_api::{AsyncEvent, WorkCompletion};

use parking_lot::Mutex;

use super::address::{AhTable, NetHeader};
use super::srq::SharedRecvQueue;
use crate::memory::{LocalSlice, MrReader, MrTable};

/// What a transport call may use besides the QP: the device's memory and address handles,
/// the QP's SRQ, the current time and, for a received packet, the IP header it came with.
pub struct Env<'a> {
    /// The device's memory regions.
    pub mem: &'a MrTable,
    /// Current time on the driver's clock (monotonic; virtual in simulations): see
    /// [`Env::now_ns`].
    pub now: CallTime<'a>,
    /// The SRQ of the QP, if it has one.
    pub srq: Option<&'a Mutex<SharedRecvQueue>>,
    /// The device's address handles (UD sends resolve theirs at post time).
    pub ahs: Option<&'a AhTable>,
    /// The network header of the packet being handled (UD receives report it in the GRH).
    pub rx: Option<NetHeader>,
    /// Packets may name their payload in registered memory ([`OutPacket::payload`]) instead
    /// of carrying a copy: set by a driver that reads it at send time.
    pub payload_by_reference: bool,
}

impl<'a> Env<'a> {
    /// An environment with memory and time only (no SRQ, no AHs, no received header).
    pub fn new(mem: &'a MrTable, now_ns: u64) -> Env<'a> {
        Env {
            mem,
            now: CallTime::at(now_ns),
            srq: None,
            ahs: None,
            rx: None,
            payload_by_reference: false,
        }
    }

    /// The time of this call in nanoseconds; the same for the whole call.
    pub fn now_ns(&self) -> u64 {
        self.now.ns()
    }
}

/// The time of a transport call: given, or read from the driver's clock when the call first
/// needs it. Most calls arm no timer (a ping-pong's SENDs, their receipt) and then read no
/// clock: a read cost 25-50 ns of a ping-pong's half round trip on a virtual machine.
pub struct CallTime<'a> {
    known: Cell<Option<u64>>,
    read: Option<&'a dyn Fn() -> u64>,
}

impl<'a> CallTime<'a> {
    /// The time `ns`.
    pub fn at(ns: u64) -> CallTime<'a> {
        CallTime {
            known: Cell::new(Some(ns)),
            read: None,
        }
    }

    /// The time `read` returns, read at most once, when first asked for.
    pub fn when_needed(read: &'a dyn Fn() -> u64) -> CallTime<'a> {
        CallTime {
            known: Cell::new(None),
            read: Some(read),
        }
    }

    /// The time, in nanoseconds.
    pub fn ns(&self) -> u64 {
        if let Some(ns) = self.known.get() {
            return ns;
        }
        let ns = self.read.map_or(0, |read| read());
        self.known.set(Some(ns));
        ns
    }
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
    /// registered memory when it sends the packet (see [`Env::payload_by_reference`]).
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

/// Which CQ of the QP a completion goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionTarget {
    /// The QP's send CQ.
    Send,
    /// The QP's receive CQ.
    Recv,
}

/// A work completion and the CQ it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Send or receive CQ.
    pub target: CompletionTarget,
    /// The completion.
    pub wc: WorkCompletion,
}

/// Collects the outputs of transport calls; the driver drains it after each call.
#[derive(Debug, Default)]
pub struct Outputs {
    /// Packets to send, in order.
    pub packets: Vec<OutPacket>,
    /// Completions to queue, in order.
    pub completions: Vec<Completion>,
    /// Set when the QP entered the error state during the call (an async event for the driver).
    pub entered_error: bool,
    /// The packet the call handled carried the SE (solicited event) bit: the receive
    /// completion it produced, if any, is solicited (it fires a solicited-only CQ arming).
    pub solicited: bool,
    /// Async events the call raised (QP errors, SRQ limit, last WQE reached ...), in order;
    /// the driver queues them on the device's async event channel.
    pub events: Vec<AsyncEvent>,
    /// The call left the QP owing an ACK that no request asked for (its requester coalesces
    /// ACKs), and none was owed before: the driver calls `TransportQp::send_lazy_ack` once
    /// its traffic pauses.
    pub owes_lazy_ack: bool,
}

impl Outputs {
    /// True if nothing was produced.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
            && self.completions.is_empty()
            && !self.entered_error
            && !self.owes_lazy_ack
            && self.events.is_empty()
    }
}

/// Stands in for a payload that is read from registered memory rather than copied from
/// the repr: only its length is used.
static PAYLOAD_STAND_IN: [u8; 4096] = [0; 4096];

/// A `len`-byte stand-in for a repr's payload (see [`OutPacket::build_filled`] and
/// [`OutPacket::build_by_reference`]); `None` beyond 4096 bytes, the largest MTU.
pub(crate) fn payload_stand_in(len: usize) -> Option<&'static [u8]> {
    PAYLOAD_STAND_IN.get(..len)
}

impl OutPacket {
    /// Emits `repr` for `path`, leaving room for the ICRC. `None` only if the repr is
    /// inconsistent with the opcode table (a transport bug, counted by the caller).
    pub fn build(
        path: &crate::transport::PathInfo,
        repr: &crate::wire::RoceRepr<'_>,
    ) -> Option<Self> {
        // emit writes every byte (headers, payload, pad, zeroed ICRC): no need to zero.
        let mut bytes = super::packet_pool::take_for_overwrite(repr.buffer_len());
        repr.emit(&mut bytes).ok()?;
        Some(OutPacket::to(path, bytes))
    }

    /// Like [`OutPacket::build`], but the payload is written by `fill` into the packet
    /// (straight from registered memory) instead of copied from `repr.payload`, of which only
    /// the length counts. `Err` carries what `fill` returned; `Ok(None)` is `build`'s `None`.
    pub fn build_filled<E>(
        path: &crate::transport::PathInfo,
        repr: &crate::wire::RoceRepr<'_>,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Option<Self>, E> {
        let mut bytes = super::packet_pool::take_for_overwrite(repr.buffer_len());
        let Ok(at) = repr.emit_headers(&mut bytes) else {
            return Ok(None);
        };
        if let Err(e) = fill(&mut bytes[at..at + repr.payload.len()]) {
            super::packet_pool::give(bytes);
            return Err(e);
        }
        Ok(Some(OutPacket::to(path, bytes)))
    }

    /// Like [`OutPacket::build`], but the payload stays in registered memory at `slice`
    /// (already checked): headers, pad and ICRC room are written, the payload bytes are not.
    pub fn build_by_reference(
        path: &crate::transport::PathInfo,
        repr: &crate::wire::RoceRepr<'_>,
        slice: LocalSlice,
    ) -> Option<Self> {
        let mut bytes = super::packet_pool::take_for_overwrite(repr.buffer_len());
        let at = repr.emit_headers(&mut bytes).ok()?;
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

    fn to(path: &crate::transport::PathInfo, bytes: Vec<u8>) -> OutPacket {
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
                super::packet_pool::give(packets.remove(i).bytes);
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
    use softverbs_api::AccessFlags;
    use std::net::Ipv4Addr;

    const PD: u32 = 3;

    #[test]
    fn a_call_reads_the_clock_once_and_only_when_it_needs_the_time() {
        let reads = Cell::new(0u32);
        let clock = || {
            reads.set(reads.get() + 1);
            1_000 * reads.get() as u64
        };
        let _unused = CallTime::when_needed(&clock);
        assert_eq!(reads.get(), 0);
        let time = CallTime::when_needed(&clock);
        assert_eq!((time.ns(), time.ns()), (1_000, 1_000));
        assert_eq!(reads.get(), 1);
        assert_eq!(CallTime::at(7).ns(), 7);
    }

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
