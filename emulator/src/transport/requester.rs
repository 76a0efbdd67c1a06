//! The requester: turns queued send WRs into request packets within the PSN window, the
//! `max_rd_atomic` limit and fences.
//!
//! What the requester tracks: where it is in the send queue and which PSNs it has used.
//! The fields are the requester's own; the completer and the QP tell it what changed
//! through the narrow methods here ("retransmit from PSN x", "the front WQE retired").

mod segment;

pub use segment::{
    run, COALESCED_PACKETS_PER_ACK, COALESCE_MIN_TIMEOUT, COPY_PAYLOADS_UP_TO, MAX_PACKETS_PER_ACK,
    MAX_UNACKED_PSNS,
};

use crate::transport::wqe::{SendWqe, WorkQueue};
use crate::wire::Psn;

/// Where the requester is in the send queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequesterState {
    /// PSN of the next packet to send.
    next_psn: Psn,
    /// The first PSN never sent before (anything earlier that goes out is a retransmission).
    high_psn: Psn,
    /// Send-queue index of the WQE being segmented.
    wqe_index: usize,
    /// Next packet within that WQE.
    packet_index: u32,
    /// Packets sent since the last one that asked for an ACK.
    packets_since_ack_req: u32,
}

impl RequesterState {
    /// Starts over at `psn` (modify with SQ_PSN).
    pub fn reset(&mut self, psn: Psn) {
        *self = RequesterState {
            next_psn: psn,
            high_psn: psn,
            ..RequesterState::default()
        };
    }

    /// PSN of the next packet to send: everything before it has been sent.
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// Whether the oldest WQE has had all its packets sent.
    pub fn sent_front_whole(&self) -> bool {
        self.wqe_index > 0
    }

    /// The oldest WQE left the send queue (completed): indexes move down by one.
    pub fn front_retired(&mut self) {
        self.wqe_index = self.wqe_index.saturating_sub(1);
    }

    /// Forgets progress on queued WQEs: the next packet is the first of the queue's front,
    /// at `psn`.
    pub fn rewind_to_front(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.wqe_index = 0;
        self.packet_index = 0;
    }

    /// Go-back-N: the next packet sent is the one at `psn` (of the WQEs of `sq` sent so
    /// far); a READ is asked again from its first missing response, an atomic whole. A PSN
    /// outside what was sent changes nothing.
    pub fn retransmit_from(&mut self, psn: Psn, sq: &WorkQueue<SendWqe>) {
        for i in 0..(self.wqe_index + 1).min(sq.len()) {
            let Some(wqe) = sq.get(i) else { break };
            if wqe.packet_count == 0 {
                break;
            }
            let into = psn.diff(wqe.first_psn);
            if into >= 0 && (into as u32) < wqe.psn_count.max(1) {
                let whole = wqe.expects_response();
                let restart = wqe.first_psn.add(wqe.resp_packets);
                self.wqe_index = i;
                self.packet_index = if whole { 0 } else { into as u32 };
                self.next_psn = if whole { restart } else { psn };
                return;
            }
        }
    }
}
