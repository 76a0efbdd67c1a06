//! Transport deadlines and the lengths the IB spec gives their codes (RNR timer, local ACK
//! timeout). They are plain numbers on the caller's clock: nothing here reads time.

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

/// How long a requester waits after an RNR NAK carrying timer `code` (IBTA table 45), in ns.
pub fn rnr_timer_ns(code: u8) -> u64 {
    // Microseconds per code; code 0 is the longest (655.36 ms).
    const TABLE_US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    TABLE_US[(code & 0x1f) as usize] * 1_000
}

/// The local ACK timeout for the QP attribute `timeout`: 4.096 µs × 2^timeout; `None` for 0,
/// which means wait forever.
pub fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        None
    } else {
        Some(4_096u64 << timeout.min(31))
    }
}
