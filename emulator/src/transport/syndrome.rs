//! AETH syndromes as the responder sends them and the completer reads them, and the RNR
//! timer table of the IB spec.

use crate::wire::NakCode;
use softverbs_api::WcStatus;

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

/// The completion status a requester reports for a NAK of kind `code`.
pub fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::PsnSequenceError => WcStatus::RetryExcErr,
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
    }
}
