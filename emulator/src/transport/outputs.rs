//! What a transport call hands back to its driver: packets to send, completions to queue,
//! async events to raise.

use softverbs_api::{AsyncEvent, WorkCompletion};

use crate::net::OutPacket;

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
    /// The responder accepted the first request since the QP moved to RTR (RC / UC): the
    /// peer is sending, so the connection is established even if the CM's RTU got lost.
    /// The driver tells the device's connection manager (once per connection).
    pub first_request_accepted: bool,
}

impl Outputs {
    /// True if nothing was produced.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
            && self.completions.is_empty()
            && !self.entered_error
            && !self.owes_lazy_ack
            && !self.first_request_accepted
            && self.events.is_empty()
    }
}
