//! What a run's faults and retries were, for the commands that run traffic (`demo`,
//! `pingpong`, `perf`): whether `SOFTVERBS_FAULTS` was in effect (and what it did on each
//! device) and how often the QPs retransmitted, timed out or were told RNR, so that a slow
//! or lossy run says why.

use softverbs::Context;
use softverbs_emu::engine::device_list::FAULTS_ENV;
use softverbs_emu::engine::registry::fault_counters;

/// Retries and NAKs of a run, summed over its QPs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retries {
    /// Request packets sent again.
    pub retransmitted: u64,
    /// ACK timeouts that fired.
    pub ack_timeouts: u64,
    /// RNR NAKs received.
    pub rnr_naks: u64,
    /// PSN sequence error NAKs received.
    pub seq_err_naks: u64,
    /// Duplicate requests the responders saw.
    pub duplicates: u64,
}

impl Retries {
    /// The sums over QPs `qpns` of `ctx` (emulated devices; zero for others).
    pub fn of(ctx: &Context, qpns: impl IntoIterator<Item = u32>) -> Retries {
        let mut r = Retries::default();
        let Some(emu) = ctx.emulator() else {
            return r;
        };
        for qpn in qpns {
            if let Ok(c) = emu.qp_counters(qpn) {
                r.retransmitted += c.retransmitted_packets;
                r.ack_timeouts += c.ack_timeouts;
                r.rnr_naks += c.rnr_naks_received;
                r.seq_err_naks += c.seq_err_naks_received;
                r.duplicates += c.duplicate_requests;
            }
        }
        r
    }

    /// The sum of two.
    pub fn plus(self, o: Retries) -> Retries {
        Retries {
            retransmitted: self.retransmitted + o.retransmitted,
            ack_timeouts: self.ack_timeouts + o.ack_timeouts,
            rnr_naks: self.rnr_naks + o.rnr_naks,
            seq_err_naks: self.seq_err_naks + o.seq_err_naks,
            duplicates: self.duplicates + o.duplicates,
        }
    }

    /// One line: `retries: 12 packets retransmitted, 3 ACK timeouts, ...`.
    pub fn line(&self) -> String {
        format!(
            "retries: {} packets retransmitted, {} ACK timeouts, {} RNR NAKs, {} sequence-error NAKs received; {} duplicate requests seen",
            self.retransmitted, self.ack_timeouts, self.rnr_naks, self.seq_err_naks, self.duplicates
        )
    }
}

/// `SOFTVERBS_FAULTS=...` and what it did on each of `devices`, when it is set.
pub fn faults_line(devices: &[&str]) -> Option<String> {
    let spec = std::env::var(FAULTS_ENV).ok()?;
    let per_device: Vec<String> = devices
        .iter()
        .filter_map(|d| {
            let c = fault_counters(d)?.snapshot();
            Some(format!(
                "{d}: {} sent, {} dropped, {} duplicated, {} reordered, {} corrupted",
                c.sent, c.dropped, c.duplicated, c.reordered, c.corrupted
            ))
        })
        .collect();
    Some(format!(
        "faults: {FAULTS_ENV}={spec} in effect ({})",
        if per_device.is_empty() {
            "no counts".to_string()
        } else {
            per_device.join("; ")
        }
    ))
}
