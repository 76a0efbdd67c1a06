//! The peak bandwidth of a run: the best rate over a real interval, never over the instant a
//! CQ-moderated batch of completions happens to land in.
//!
//! The rate over an interval counts only messages that were both posted after its start and
//! completed by its end (as perftest's peak: from a WR's post to a later WR's completion).
//! Counting completions alone would credit a window with every message that one moderated
//! completion reports, though they took much longer: 100 messages of 8 MiB in a 10 ms
//! window "ran" at 80 GB/s.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Shortest interval a peak is measured over.
pub const PEAK_WINDOW: Duration = Duration::from_millis(10);
/// Least time between two evaluations (each looks at every kept interval start).
const EVAL_EVERY: Duration = Duration::from_millis(1);
/// How many interval starts are kept (one per [`PEAK_WINDOW`] at most): the longest interval
/// is this many windows, long enough to span a deep pipeline of large messages.
const ANCHORS: usize = 64;

/// Tracks the peak message rate of a run over several QPs.
pub struct PeakMeter {
    /// The run's start (nothing posted yet), always an interval start: the whole run so far
    /// is an interval too, however deep the pipeline.
    started: Instant,
    /// Later interval starts: when, and how many WRs each QP had posted by then.
    anchors: VecDeque<(Instant, Vec<u64>)>,
    peak_per_sec: f64,
    next_eval: Instant,
}

impl PeakMeter {
    /// A meter for a run that starts at `started` with nothing posted yet.
    pub fn new(started: Instant) -> PeakMeter {
        PeakMeter {
            started,
            anchors: VecDeque::with_capacity(ANCHORS),
            peak_per_sec: 0.0,
            next_eval: started,
        }
    }

    /// Records that at `now` the QPs had posted `posted` and completed `done` WRs (each
    /// QP's WRs complete in order). Call when the clock was read; cheap when called often.
    pub fn observe(&mut self, now: Instant, posted: &[u64], done: &[u64]) {
        if now < self.next_eval {
            return;
        }
        self.next_eval = now + EVAL_EVERY;
        let since_start = now.saturating_duration_since(self.started);
        if since_start >= PEAK_WINDOW {
            let all: u64 = done.iter().sum();
            self.peak_per_sec = self
                .peak_per_sec
                .max(all as f64 / since_start.as_secs_f64());
        }
        for (at, posted_then) in &self.anchors {
            let span = now.saturating_duration_since(*at);
            if span < PEAK_WINDOW {
                break;
            }
            let within: u64 = done
                .iter()
                .zip(posted_then)
                .map(|(d, p)| d.saturating_sub(*p))
                .sum();
            self.peak_per_sec = self.peak_per_sec.max(within as f64 / span.as_secs_f64());
        }
        let newest = self.anchors.back().map_or(self.started, |(at, _)| *at);
        if now.saturating_duration_since(newest) >= PEAK_WINDOW {
            if self.anchors.len() == ANCHORS {
                self.anchors.pop_front();
            }
            self.anchors.push_back((now, posted.to_vec()));
        }
    }

    /// The best rate seen, in messages per second (0 before an interval of
    /// [`PEAK_WINDOW`] has passed).
    pub fn peak_per_sec(&self) -> f64 {
        self.peak_per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 128 messages posted at once take a second; one moderated completion reports them
    /// all after idle checks: the peak is their real rate, not 128 messages in 10 ms.
    #[test]
    fn a_moderated_batch_does_not_make_a_peak() {
        let t0 = Instant::now();
        let mut m = PeakMeter::new(t0);
        m.observe(t0, &[128], &[0]);
        // Idle checks while the messages travel.
        for ms in (10..1000).step_by(10) {
            m.observe(t0 + Duration::from_millis(ms), &[128], &[0]);
        }
        m.observe(t0 + Duration::from_millis(1005), &[128], &[128]);
        let peak = m.peak_per_sec();
        assert!(peak <= 128.0 / 1.0, "peak {peak}/s for 128 messages in 1 s");
        assert!(peak > 100.0, "peak {peak}/s");
    }

    /// A run at a steady rate has that rate as its peak.
    #[test]
    fn a_steady_rate_is_its_own_peak() {
        let t0 = Instant::now();
        let mut m = PeakMeter::new(t0);
        // 1000 messages per second per QP, posted 20 ahead.
        for ms in 1..=500u64 {
            let done = ms;
            m.observe(
                t0 + Duration::from_millis(ms),
                &[done + 20, done + 20],
                &[done, done],
            );
        }
        let peak = m.peak_per_sec();
        assert!((1900.0..=2000.001).contains(&peak), "peak {peak}/s");
    }
}
