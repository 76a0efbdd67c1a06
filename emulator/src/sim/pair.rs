//! Two QPs, a virtual network between them and a virtual clock.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softverbs_api::{
    qp::AhAttr, AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendWr,
    WcOpcode, WcStatus,
};

use super::faults::{FaultConfig, SimRng};
use crate::engine::device_counters::RxDrop;
use crate::engine::receive::{check_datagram, check_for_qp};
use crate::memory::{MrTable, RdmaBuffer};
use crate::net::DatagramView;
use crate::transport::{payloads_in_memory, Completion, Env, Outputs, TransportQp};
use crate::wire::{write_icrc, IcrcContext, IpHeaderInfo, RoceRepr};

/// One-way delay of the virtual network, in ns.
const BASE_DELAY_NS: u64 = 10_000;
/// Extra delay of a reordered packet, at most, in ns.
const REORDER_DELAY_NS: u64 = 50_000;
/// Delay after which a duplicate copy arrives, at most, in ns.
const DUP_DELAY_NS: u64 = 30_000;

/// One end of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The first QP (address 127.0.0.1).
    A,
    /// The second QP (address 127.0.0.2).
    B,
}

impl Side {
    /// The other end.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    /// This end's IPv4 address (what the ICRC of a packet to or from it covers).
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Side::A => Ipv4Addr::new(127, 0, 0, 1),
            Side::B => Ipv4Addr::new(127, 0, 0, 2),
        }
    }
}

/// What happened, in order: the trace two runs of one seed must share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// A packet left `from` (its one-line decode).
    Sent {
        /// Virtual time.
        at_ns: u64,
        /// Sender.
        from: Side,
        /// Decoded packet.
        packet: String,
        /// The packet's bytes (BTH .. ICRC) as sent, before any fault.
        bytes: Vec<u8>,
    },
    /// The network dropped a packet.
    Dropped {
        /// Virtual time.
        at_ns: u64,
        /// Sender.
        from: Side,
    },
    /// A packet failed the ICRC check at the receiver.
    IcrcRejected {
        /// Virtual time.
        at_ns: u64,
        /// Receiver.
        to: Side,
    },
    /// A completion was produced.
    Completed {
        /// Virtual time.
        at_ns: u64,
        /// Where.
        side: Side,
        /// The completion.
        completion: Completion,
    },
}

/// One node: its memory and its QP.
pub struct SimNode {
    /// Memory regions.
    pub mem: MrTable,
    /// The QP under test.
    pub qp: TransportQp,
    /// Completions produced so far, oldest first (drained by the test as it likes).
    pub completions: Vec<Completion>,
    /// Buffers registered in `mem`, kept alive for the node's life.
    pub buffers: Vec<RdmaBuffer>,
}

impl SimNode {
    /// (wr_id, status, opcode) of every completion so far, oldest first: what tests compare.
    pub fn completion_summary(&self) -> Vec<(u64, WcStatus, WcOpcode)> {
        self.completions
            .iter()
            .map(|c| (c.wc.wr_id, c.wc.status, c.wc.opcode))
            .collect()
    }
}

/// Two connected RC QPs over a faulty virtual network.
pub struct SimPair {
    /// Node A.
    pub a: SimNode,
    /// Node B.
    pub b: SimNode,
    /// Virtual time, ns.
    pub now_ns: u64,
    rng: SimRng,
    faults: FaultConfig,
    /// Packets still to lose of the current loss burst, per sending side (A, B): each
    /// direction is its own faulty link.
    burst_left: [u32; 2],
    /// Packets on the wire: (arrival time, sequence for ties) -> (receiver, UDP source port,
    /// bytes).
    wire: BTreeMap<(u64, u64), (Side, u16, Vec<u8>)>,
    wire_seq: u64,
    /// Everything that happened.
    pub trace: Vec<TraceEvent>,
    /// The driver sends the ACKs a responder owes without being asked (see
    /// `Outputs::owes_lazy_ack`) once the wire is idle, as the engine does when the traffic
    /// pauses. Off, the responder behaves like rxe's, which never sends them.
    pub lazy_acks: bool,
    /// Which sides (A, B) owe such an ACK.
    owes_lazy_ack: [bool; 2],
    /// A link of limited rate: each packet of a direction arrives at least this long after
    /// the one before it (0: no limit), so that a burst takes a while to drain.
    pub packet_spacing_ns: u64,
    /// When the last packet of each direction (from A, from B) arrives.
    last_arrival: [u64; 2],
    /// Packets lost on purpose, as (sender, index of the packet among those it sent, from 0).
    pub lose: Vec<(Side, u64)>,
    /// Packets each side (A, B) has sent.
    sent_count: [u64; 2],
}

/// PD every simulated QP and MR uses.
pub const SIM_PD: u32 = 1;

impl SimPair {
    /// Two RC QPs in RTS, connected, with `faults` on both directions.
    pub fn new_rc(seed: u64, faults: FaultConfig, mtu: Mtu, attrs: &QpAttr) -> SimPair {
        SimPair::new(QpType::Rc, seed, faults, mtu, attrs)
    }

    /// Two connected QPs of `qp_type` (RC or UC) in RTS, otherwise as [`SimPair::new_rc`].
    pub fn new(
        qp_type: QpType,
        seed: u64,
        faults: FaultConfig,
        mtu: Mtu,
        attrs: &QpAttr,
    ) -> SimPair {
        let cap = QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 8,
            max_recv_sge: 8,
            max_inline_data: 64,
        };
        let node = |qpn| SimNode {
            mem: MrTable::new(64),
            qp: TransportQp::new(qpn, qp_type, SIM_PD, false, cap),
            completions: Vec::new(),
            buffers: Vec::new(),
        };
        let mut pair = SimPair {
            a: node(0x11),
            b: node(0x12),
            now_ns: 0,
            rng: SimRng::new(seed),
            faults,
            burst_left: [0, 0],
            wire: BTreeMap::new(),
            wire_seq: 0,
            trace: Vec::new(),
            lazy_acks: true,
            owes_lazy_ack: [false; 2],
            packet_spacing_ns: 0,
            last_arrival: [0; 2],
            lose: Vec::new(),
            sent_count: [0; 2],
        };
        pair.connect(Side::A, 0x12, mtu, attrs);
        pair.connect(Side::B, 0x11, mtu, attrs);
        pair
    }

    /// The node of `side`.
    pub fn node(&mut self, side: Side) -> &mut SimNode {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn connect(&mut self, side: Side, dest_qpn: u32, mtu: Mtu, attrs: &QpAttr) {
        let peer_ip = IpAddr::V4(side.other().ip());
        let attr = QpAttr {
            qp_state: QpState::Rts,
            path_mtu: mtu,
            dest_qp_num: dest_qpn,
            rq_psn: attrs.rq_psn,
            sq_psn: attrs.sq_psn,
            timeout: attrs.timeout,
            retry_cnt: attrs.retry_cnt,
            rnr_retry: attrs.rnr_retry,
            min_rnr_timer: attrs.min_rnr_timer,
            max_rd_atomic: attrs.max_rd_atomic,
            max_dest_rd_atomic: attrs.max_dest_rd_atomic,
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC
                | AccessFlags::FLUSH_GLOBAL,
            ah_attr: AhAttr {
                dgid: Gid::from_ip(peer_ip),
                port_num: 1,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MIN_RNR_TIMER
            | QpAttrMask::MAX_QP_RD_ATOMIC
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::ACCESS_FLAGS;
        let mut out = Outputs::default();
        self.node(side).qp.apply_modify(&attr, mask, &mut out);
    }

    /// Registers a zeroed buffer of `len` bytes on `side`; returns (address, lkey, rkey).
    pub fn register(&mut self, side: Side, len: usize, access: AccessFlags) -> (u64, u32, u32) {
        let node = self.node(side);
        let buf = RdmaBuffer::new(len).expect("allocation");
        let keys = node
            .mem
            .register(SIM_PD, buf.addr(), len as u64, access)
            .expect("registration");
        let addr = buf.addr();
        node.buffers.push(buf);
        (addr, keys.lkey, keys.rkey)
    }

    /// Posts send WRs on `side`.
    pub fn post_send(
        &mut self,
        side: Side,
        wrs: &[SendWr],
    ) -> Result<(), softverbs_api::PostError> {
        self.drive(side, |qp, env, out| qp.post_send(wrs, env, out))
    }

    /// Posts receive WRs on `side`.
    pub fn post_recv(
        &mut self,
        side: Side,
        wrs: &[RecvWr],
    ) -> Result<(), softverbs_api::PostError> {
        let mut out = Outputs::default();
        let r = self.node(side).qp.post_recv(wrs, &mut out);
        self.absorb(side, out);
        r
    }

    /// Runs one transport call on `side`'s QP at the current virtual time and handles what it
    /// produced; then, as the engine does, the calls that send the rest of a READ's
    /// responses, a burst each.
    fn drive<R>(
        &mut self,
        side: Side,
        call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> R,
    ) -> R {
        let result = self.drive_once(side, call);
        while self.node(side).qp.responses_pending() {
            self.drive_once(side, |qp, env, out| qp.continue_responses(env, out));
        }
        result
    }

    fn drive_once<R>(
        &mut self,
        side: Side,
        call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> R,
    ) -> R {
        let mut out = Outputs::default();
        let now_ns = self.now_ns;
        let node = self.node(side);
        // As the engine does: payloads stay in the MR until the packets leave (absorb).
        let env = Env {
            payload_by_reference: true,
            ..Env::new(&node.mem, now_ns)
        };
        let result = call(&mut node.qp, &env, &mut out);
        self.absorb(side, out);
        result
    }

    /// Handles the transport's outputs: packets onto the (faulty) wire, completions recorded.
    fn absorb(&mut self, from: Side, mut out: Outputs) {
        let now = self.now_ns;
        self.owes_lazy_ack[from as usize] |= out.owes_lazy_ack;
        for c in out.completions.drain(..) {
            self.trace.push(TraceEvent::Completed {
                at_ns: now,
                side: from,
                completion: c,
            });
            self.node(from).completions.push(c);
        }
        {
            // The payloads are read from the sender's memory as they leave.
            let reader = self.node(from).mem.reader();
            let (payloads, _gone) = payloads_in_memory(&mut out.packets, &reader);
            for (packet, payload) in out.packets.iter_mut().zip(payloads) {
                packet.fill_payload(payload);
            }
        }
        for mut packet in out.packets.drain(..) {
            let ctx = IcrcContext {
                udp_dst_port: packet.udp_dst_port,
                ..SimPair::icrc_context(from.other(), packet.udp_src_port)
            };
            write_icrc(&ctx, &mut packet.bytes);
            let decoded = RoceRepr::parse(&packet.bytes)
                .map(|(r, _)| r.to_string())
                .unwrap_or_else(|e| format!("unparsable: {e}"));
            self.trace.push(TraceEvent::Sent {
                at_ns: now,
                from,
                packet: decoded,
                bytes: packet.bytes.clone(),
            });
            self.transmit(from, packet.bytes, packet.udp_src_port);
        }
    }

    fn transmit(&mut self, from: Side, mut bytes: Vec<u8>, src_port: u16) {
        let f = self.faults;
        let direction = from as usize;
        let index = self.sent_count[direction];
        self.sent_count[direction] += 1;
        if self.lose.contains(&(from, index)) || self.lost_at_random(direction) {
            self.trace.push(TraceEvent::Dropped {
                at_ns: self.now_ns,
                from,
            });
            return;
        }
        if !bytes.is_empty() && self.rng.chance(f.corrupt_per_mille) {
            let i = self.rng.below(bytes.len() as u64) as usize;
            bytes[i] ^= 1 << self.rng.below(8);
        }
        let mut at = self.now_ns + BASE_DELAY_NS;
        if self.packet_spacing_ns > 0 {
            at = at.max(self.last_arrival[direction] + self.packet_spacing_ns);
            self.last_arrival[direction] = at;
        }
        if self.rng.chance(f.reorder_per_mille) {
            at += 1 + self.rng.below(REORDER_DELAY_NS);
        }
        if self.rng.chance(f.dup_per_mille) {
            let dup_at = at + 1 + self.rng.below(DUP_DELAY_NS);
            self.enqueue(dup_at, from.other(), src_port, bytes.clone());
        }
        self.enqueue(at, from.other(), src_port, bytes);
    }

    /// Whether the faults lose the next packet of `direction`: the rest of a loss burst, or
    /// a new loss (which may start a burst).
    fn lost_at_random(&mut self, direction: usize) -> bool {
        let f = self.faults;
        if self.burst_left[direction] > 0 {
            self.burst_left[direction] -= 1;
            return true;
        }
        if !self.rng.chance(f.loss_per_mille) {
            return false;
        }
        if f.burst_max > 0 && self.rng.chance(f.burst_per_mille) {
            self.burst_left[direction] = 1 + self.rng.below(f.burst_max as u64) as u32;
        }
        true
    }

    fn enqueue(&mut self, at: u64, to: Side, src_port: u16, bytes: Vec<u8>) {
        self.wire_seq += 1;
        self.wire.insert((at, self.wire_seq), (to, src_port, bytes));
    }

    /// Moves `side`'s QP to ERR, which flushes its queued WRs into its completions.
    pub fn modify_to_error(&mut self, side: Side) {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.drive(side, |qp, _, out| {
            qp.apply_modify(&attr, QpAttrMask::STATE, out)
        });
    }

    /// Stops injecting faults (for "once faults stop, everything completes").
    pub fn heal(&mut self) {
        self.faults = FaultConfig::none();
        self.burst_left = [0, 0];
    }

    /// Runs the next event (an owed ACK once the wire is idle, a packet arrival or a QP
    /// deadline), advancing the clock to it.
    /// Returns false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        if self.lazy_acks && self.wire.is_empty() {
            for side in [Side::A, Side::B] {
                if std::mem::take(&mut self.owes_lazy_ack[side as usize]) {
                    self.drive(side, |qp, _env, out| qp.send_lazy_ack(out));
                    return true;
                }
            }
        }
        let next_packet = self.wire.keys().next().map(|k| k.0);
        let deadlines = [
            (Side::A, self.a.qp.next_deadline_ns()),
            (Side::B, self.b.qp.next_deadline_ns()),
        ];
        let next_timer = deadlines
            .iter()
            .filter_map(|(s, d)| d.map(|d| (d, *s)))
            .min();
        match (next_packet, next_timer) {
            (None, None) => false,
            (Some(p), t) if t.is_none_or(|(d, _)| p <= d) => {
                let Some(((at, _), (to, src_port, bytes))) = self.wire.pop_first() else {
                    return false;
                };
                self.now_ns = self.now_ns.max(at);
                // A drop is the pipeline's business; the trace shows what arrived.
                let _ = self.deliver(to, src_port, &bytes);
                true
            }
            (_, Some((d, side))) => {
                self.now_ns = self.now_ns.max(d);
                self.drive(side, |qp, env, out| qp.on_timer(env, out));
                true
            }
            _ => false,
        }
    }

    /// Hands `to` a packet forged by a third party as if its peer had sent it (the peer's
    /// address, UDP source port `src_port`): emitted from `repr` with a valid ICRC, so it
    /// meets the receive pipeline as an attacker's packet would. Returns the pipeline's
    /// drop reason, if it dropped the packet; what the QP answers goes onto the wire.
    pub fn inject(&mut self, to: Side, src_port: u16, repr: &RoceRepr<'_>) -> Result<(), RxDrop> {
        let mut bytes = vec![0u8; repr.buffer_len()];
        repr.emit(&mut bytes)
            .expect("a packet the opcode table can lay out");
        let ctx = SimPair::icrc_context(to, src_port);
        write_icrc(&ctx, &mut bytes);
        self.deliver(to, src_port, &bytes)
    }

    /// Delivers `bytes` (a UDP payload: BTH .. ICRC) to `to` now, as if the other side had
    /// sent it from UDP port `src_port` with IP ID 0 and DF, through the same receive
    /// checks as every simulated packet; what `to` answers goes onto the wire. For fuzzers
    /// that play a broken peer (compute the ICRC with [`SimPair::icrc_context`] to get past
    /// the ICRC check). Returns the pipeline's drop reason, if it dropped the packet.
    pub fn inject_bytes(&mut self, to: Side, src_port: u16, bytes: &[u8]) -> Result<(), RxDrop> {
        self.deliver(to, src_port, bytes)
    }

    /// The ICRC context of a packet from `to`'s peer to `to` sent from UDP port `src_port`,
    /// as the simulated network frames it.
    pub fn icrc_context(to: Side, src_port: u16) -> IcrcContext {
        IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: to.other().ip(),
                dst: to.ip(),
                identification: 0,
                flags_fragment: 0x4000,
            },
            udp_src_port: src_port,
            udp_dst_port: 4791,
        }
    }

    fn deliver(&mut self, to: Side, src_port: u16, bytes: &[u8]) -> Result<(), RxDrop> {
        let from = to.other();
        // The engine's receive pipeline; the simulated senders are softverbs ones (IP ID 0).
        let datagram = DatagramView {
            src: SocketAddr::new(IpAddr::V4(from.ip()), src_port),
            dst: SocketAddr::new(IpAddr::V4(to.ip()), 4791),
            payload: bytes,
            ipv4_identification: Some(0),
        };
        let repr = match check_datagram(datagram) {
            Ok(repr) => repr,
            Err(RxDrop::IcrcError) => {
                self.trace.push(TraceEvent::IcrcRejected {
                    at_ns: self.now_ns,
                    to,
                });
                return Err(RxDrop::IcrcError);
            }
            Err(reason) => return Err(reason),
        };
        let qp = &self.node(to).qp;
        let peer = qp.path.map(|p| p.dst_ip);
        check_for_qp(&repr, qp.qp_type, peer, datagram.src.ip())?;
        self.drive(to, |qp, env, out| qp.on_packet(&repr, env, out));
        Ok(())
    }

    /// The bytes (BTH .. ICRC) of every packet `side` sent so far, in order, as sent (before
    /// any fault of the network).
    pub fn sent_by(&self, side: Side) -> Vec<Vec<u8>> {
        self.trace
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Sent { from, bytes, .. } if *from == side => Some(bytes.clone()),
                _ => None,
            })
            .collect()
    }

    /// Steps until nothing is left or `max_steps` ran; returns the steps taken.
    pub fn run(&mut self, max_steps: usize) -> usize {
        let mut n = 0;
        while n < max_steps && self.step() {
            n += 1;
        }
        n
    }

    /// Reads `len` bytes at `addr` of a buffer registered on `side`.
    pub fn read(&mut self, side: Side, addr: u64, len: usize) -> Vec<u8> {
        let node = self.node(side);
        for b in &node.buffers {
            if addr >= b.addr() && addr + len as u64 <= b.addr() + b.len() as u64 {
                let mut v = vec![0u8; len];
                let _ = b.read((addr - b.addr()) as usize, &mut v);
                return v;
            }
        }
        Vec::new()
    }

    /// Writes bytes at `addr` of a buffer registered on `side`.
    pub fn write(&mut self, side: Side, addr: u64, data: &[u8]) {
        let node = self.node(side);
        for b in &node.buffers {
            if addr >= b.addr() && addr + data.len() as u64 <= b.addr() + b.len() as u64 {
                let _ = b.write((addr - b.addr()) as usize, data);
                return;
            }
        }
    }
}
