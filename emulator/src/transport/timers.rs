//! Transport deadlines. They are plain numbers on the caller's clock: nothing here reads time.

/// The deadlines one QP may have armed, in ns on the driver's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpTimers {
    /// Local ACK timeout: when outstanding requests are retransmitted.
    pub retransmit_at_ns: Option<u64>,
    /// End of an RNR wait: when the NAKed request is sent again.
    pub rnr_retry_at_ns: Option<u64>,
}

impl QpTimers {
    /// The earliest armed deadline.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        match (self.retransmit_at_ns, self.rnr_retry_at_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// True if `deadline` is armed and has passed at `now_ns`.
pub fn expired(deadline: Option<u64>, now_ns: u64) -> bool {
    deadline.is_some_and(|d| d <= now_ns)
}
