//! The completer: consumes ACKs, NAKs, READ responses and atomic ACKs, retires WQEs as
//! completions, and decides on retransmission (go-back-N) and retry exhaustion.
//!
//! What the completer tracks: the oldest unacknowledged PSN, the retry budgets and whether
//! a go-back-N retry is under way. The fields are the completer's own; the requester and
//! the QP use the narrow methods here.

mod responses;

pub use responses::{on_response, on_timer, INFINITE_RETRIES};

use crate::wire::Psn;

/// Where the completer stands with the requests in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompleterPhase {
    /// Responses and ACKs arrive as sent (or nothing is outstanding).
    #[default]
    Steady,
    /// A go-back-N retry is under way and no ACK has advanced since: further sequence NAKs
    /// for it neither cost a retry nor rewind again (rxe's `started_retry`).
    Retrying,
}

/// What the completer tracks.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompleterState {
    /// Oldest unacknowledged PSN.
    una: Psn,
    /// Transport retries left before RETRY_EXC_ERR.
    retries_left: u8,
    /// RNR retries left before RNR_RETRY_EXC_ERR.
    rnr_retries_left: u8,
    /// Steady, or retrying.
    phase: CompleterPhase,
}

impl CompleterState {
    /// Starts over at `psn` (modify with SQ_PSN); retry counters are kept.
    pub fn reset(&mut self, psn: Psn) {
        self.una = psn;
    }

    /// Oldest unacknowledged PSN.
    pub fn una(&self) -> Psn {
        self.una
    }

    /// Transport retries left before RETRY_EXC_ERR.
    pub fn retries_left(&self) -> u8 {
        self.retries_left
    }

    /// RNR retries left before RNR_RETRY_EXC_ERR.
    pub fn rnr_retries_left(&self) -> u8 {
        self.rnr_retries_left
    }

    /// Steady, or retrying.
    pub fn phase(&self) -> CompleterPhase {
        self.phase
    }

    /// A go-back-N retry is under way (see [`CompleterPhase::Retrying`]).
    pub fn retrying(&self) -> bool {
        self.phase == CompleterPhase::Retrying
    }

    /// A new transport retry budget (modify with RETRY_CNT).
    pub fn set_retries(&mut self, retry_cnt: u8) {
        self.retries_left = retry_cnt;
    }

    /// A new RNR retry budget (modify with RNR_RETRY).
    pub fn set_rnr_retries(&mut self, rnr_retry: u8) {
        self.rnr_retries_left = rnr_retry;
    }

    /// Everything before `psn` is done without an acknowledgement (UC / UD: a send is
    /// complete once its packets are out).
    pub fn unacknowledged_done_before(&mut self, psn: Psn) {
        self.una = psn;
    }
}
