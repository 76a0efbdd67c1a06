//! What the transport hands back to its driver: packets to send and completions to queue.

use std::net::IpAddr;

use softverbs_api::{AsyncEvent, WorkCompletion};

use parking_lot::Mutex;

use super::address::{AhTable, NetHeader};
use super::srq::SharedRecvQueue;
use crate::memory::MrTable;

/// What a transport call may use besides the QP: the device's memory and address handles,
/// the QP's SRQ, the current time and, for a received packet, the IP header it came with.
pub struct Env<'a> {
    /// The device's memory regions.
    pub mem: &'a MrTable,
    /// Current time in nanoseconds on the driver's clock (monotonic; virtual in simulations).
    pub now_ns: u64,
    /// The SRQ of the QP, if it has one.
    pub srq: Option<&'a Mutex<SharedRecvQueue>>,
    /// The device's address handles (UD sends resolve theirs at post time).
    pub ahs: Option<&'a AhTable>,
    /// The network header of the packet being handled (UD receives report it in the GRH).
    pub rx: Option<NetHeader>,
}

impl<'a> Env<'a> {
    /// An environment with memory and time only (no SRQ, no AHs, no received header).
    pub fn new(mem: &'a MrTable, now_ns: u64) -> Env<'a> {
        Env {
            mem,
            now_ns,
            srq: None,
            ahs: None,
            rx: None,
        }
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

    fn to(path: &crate::transport::PathInfo, bytes: Vec<u8>) -> OutPacket {
        OutPacket {
            dst_ip: path.dst_ip,
            udp_dst_port: path.udp_dst_port,
            udp_src_port: path.udp_src_port,
            bytes,
        }
    }
}
