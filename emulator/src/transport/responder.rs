//! The responder: checks incoming requests against the expected PSN, executes them against
//! receive WQEs and memory, and answers with ACK / NAK / READ responses / atomic ACKs as rxe
//! does.
//!
//! What the responder tracks: the expected PSN, the message being received, the answers of
//! recent atomics and the ACK it owes. The fields are the responder's own; the QP reads
//! and resets them through the methods here.

mod access;
mod answers;
mod rd_atomic;
mod requests;

pub use answers::send_lazy_ack;
pub(crate) use rd_atomic::continue_read;
pub use rd_atomic::{RdAtomicResource, ReadStream, READ_RESPONSE_BURST};
pub use requests::on_request;

use std::collections::VecDeque;

use crate::transport::wqe::RecvWqe;
use crate::wire::Psn;

/// A SEND being received, between its FIRST and LAST packets.
#[derive(Debug, Clone)]
pub struct RecvInProgress {
    /// The receive WQE it lands in.
    wqe: RecvWqe,
    /// Bytes placed so far.
    offset: u64,
}

/// An RDMA WRITE being received, between its FIRST and LAST packets.
#[derive(Debug, Clone, Copy)]
pub struct WriteInProgress {
    /// Remote key of the target region.
    rkey: u32,
    /// Start address of the write.
    va: u64,
    /// Total length announced in the RETH.
    dma_len: u64,
    /// Bytes placed so far.
    offset: u64,
}

/// Where the responder stands with the request stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponderPhase {
    /// Requests are taken at the expected PSN.
    #[default]
    InSequence,
    /// RC: a PSN sequence error NAK was sent for `epsn` and not yet answered by a
    /// retransmission; rxe sends one per gap, not one per out-of-order packet.
    AwaitingRetransmission,
    /// UC: the current message lost a packet; everything up to the next FIRST / ONLY is
    /// dropped.
    DroppingMessage,
}

/// What the responder tracks.
#[derive(Debug, Clone, Default)]
pub struct ResponderState {
    /// Expected PSN of the next request.
    epsn: Psn,
    /// Message sequence number: requests completed (24 bits).
    msn: u32,
    /// The SEND being received.
    current: Option<RecvInProgress>,
    /// The RDMA WRITE being received.
    write: Option<WriteInProgress>,
    /// Taking requests in sequence, or (RC) waiting for the retransmission a PSN sequence
    /// NAK asked for, or (UC) dropping the rest of a message that lost a packet.
    phase: ResponderPhase,
    /// The latest READ / atomic requests, oldest first, at most `max_dest_rd_atomic` of them:
    /// the only past requests answered again (see `rd_atomic`).
    rd_atomic: VecDeque<RdAtomicResource>,
    /// The READ responses still to send (a READ is answered a burst at a time).
    read_out: Option<ReadStream>,
    /// RC: the newest request accepted without an ACK request and not acknowledged since,
    /// with the MSN after it. Its ACK leaves with [`send_lazy_ack`], when the driver has
    /// nothing more pressing (see `requester::asks_for_ack`).
    lazy_ack: Option<(Psn, u32)>,
}

impl ResponderState {
    /// Expected PSN of the next request.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// Takes the receive WQE of the SEND being received, if any (the QP flushes it).
    pub fn take_current_recv(&mut self) -> Option<RecvWqe> {
        self.current.take().map(|c| c.wqe)
    }

    /// Starts over at `psn` (modify with RQ_PSN).
    pub fn reset(&mut self, psn: Psn) {
        *self = ResponderState {
            epsn: psn,
            ..ResponderState::default()
        };
    }

    /// True while READ responses remain to be sent (see `TransportQp::continue_responses`).
    pub fn responses_pending(&self) -> bool {
        self.read_out.is_some()
    }

    fn in_message(&self) -> bool {
        self.current.is_some() || self.write.is_some()
    }
}
