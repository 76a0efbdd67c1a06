//! Named per-QP counters, for tests, logs and `softverbs` tools.

/// What one QP has seen and done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Request packets sent (first transmissions and retransmissions).
    pub sent_requests: u64,
    /// Response packets (ACK / NAK / read responses) sent.
    pub sent_responses: u64,
    /// Packets received for this QP.
    pub received_packets: u64,
    /// Request packets retransmitted.
    pub retransmitted_packets: u64,
    /// Local ACK timeouts that fired.
    pub ack_timeouts: u64,
    /// RNR NAKs sent by the responder.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received by the requester.
    pub rnr_naks_received: u64,
    /// PSN sequence error NAKs sent.
    pub seq_err_naks_sent: u64,
    /// PSN sequence error NAKs received.
    pub seq_err_naks_received: u64,
    /// Duplicate requests seen by the responder.
    pub duplicate_requests: u64,
    /// Packets dropped as invalid for the QP's state or sequence (and UC / UD messages that
    /// could not be received).
    pub dropped_packets: u64,
    /// READ responses dropped because their opcode was not the one their place in the
    /// READ calls for (a FIRST completing a one-packet READ, say).
    pub out_of_sequence_responses: u64,
    /// UD packets dropped because their Q_Key did not match the QP's.
    pub qkey_violations: u64,
    /// Send WQEs that completed successfully, signaled or not: they left the send queue.
    pub completed_sends: u64,
}

impl Counters {
    /// Adds `other`'s counts to these (a device's totals over its QPs).
    pub fn add(&mut self, other: &Counters) {
        let Counters {
            sent_requests,
            sent_responses,
            received_packets,
            retransmitted_packets,
            ack_timeouts,
            rnr_naks_sent,
            rnr_naks_received,
            seq_err_naks_sent,
            seq_err_naks_received,
            duplicate_requests,
            dropped_packets,
            out_of_sequence_responses,
            qkey_violations,
            completed_sends,
        } = *other;
        self.sent_requests += sent_requests;
        self.sent_responses += sent_responses;
        self.received_packets += received_packets;
        self.retransmitted_packets += retransmitted_packets;
        self.ack_timeouts += ack_timeouts;
        self.rnr_naks_sent += rnr_naks_sent;
        self.rnr_naks_received += rnr_naks_received;
        self.seq_err_naks_sent += seq_err_naks_sent;
        self.seq_err_naks_received += seq_err_naks_received;
        self.duplicate_requests += duplicate_requests;
        self.dropped_packets += dropped_packets;
        self.out_of_sequence_responses += out_of_sequence_responses;
        self.qkey_violations += qkey_violations;
        self.completed_sends += completed_sends;
    }
}
