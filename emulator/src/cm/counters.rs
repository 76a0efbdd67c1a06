//! Named counters of the connection manager: what arrived, what was dropped and why, what
//! was resent, how connections ended.

/// CM counters (monotonic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs handed to `handle_mad`.
    pub mads_received: u64,
    /// MADs that failed to parse (typed error returned, MAD dropped).
    pub malformed: u64,
    /// Well-formed MADs that match no connection or come from the wrong peer (dropped).
    pub unmatched: u64,
    /// Well-formed MADs not valid in the connection's state (dropped).
    pub out_of_state: u64,
    /// MADs handed to the engine to send.
    pub mads_sent: u64,
    /// Sends dropped because the output queue was full (the protocol resends them).
    pub sends_dropped: u64,
    /// REQ/REP/DREQ/SIDR_REQ resent on timeout.
    pub retransmits: u64,
    /// Duplicate REQs answered (REP, MRA or stale REJ).
    pub duplicate_reqs: u64,
    /// Duplicate REPs answered with the RTU again.
    pub duplicate_reps: u64,
    /// Duplicate DREQs answered with the DREP again.
    pub duplicate_dreqs: u64,
    /// DREQs for no connection (also counted as unmatched) answered with a DREP, as the
    /// kernel's CM answers them.
    pub dreps_for_unknown: u64,
    /// REJs sent.
    pub rejects_sent: u64,
    /// REQs for a service nobody listened on yet, held for a listener (see `held_reqs.rs`).
    pub reqs_held: u64,
    /// REJs received.
    pub rejects_received: u64,
    /// Connections created (either side).
    pub connections_created: u64,
    /// Connections freed (after time-wait, rejection, timeout or reject).
    pub connections_freed: u64,
    /// Connections that reached ESTABLISHED.
    pub established: u64,
    /// Attempts or disconnects given up after the last retry.
    pub retries_exhausted: u64,
    /// SIDR requests created (either side).
    pub sidr_created: u64,
    /// SIDR requests freed.
    pub sidr_freed: u64,
    /// Get/Set requests (ClassPortInfo or any other attribute) answered with GetResp
    /// "unsupported method/attribute", as the kernel's MAD layer answers them.
    pub gets_answered: u64,
    /// GetResps received (answers to a Get this side sent); otherwise ignored.
    pub get_responses_received: u64,
}
