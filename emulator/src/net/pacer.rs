//! A token-bucket pacer: how long to wait before sending the next frame so that a link never
//! carries more than `rate` bytes per second beyond a burst allowance.
//!
//! Why a link needs one: qemu's socket netdev reads its UDP socket only as fast as the guest
//! drains its NIC's ring, and a TCG guest drains slowly, so an unpaced burst (a 1 MiB message
//! is a thousand frames) overflows the socket's receive buffer and is lost. RC recovers by
//! retransmitting; UC cannot. The pacer keeps bursts under what that buffer holds.
//!
//! Clock-free: the caller passes `now`, so the arithmetic is tested with made-up instants.

use std::time::{Duration, Instant};

/// Paces bytes to `rate_bytes_per_s` with bursts of up to `burst_bytes`.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_bytes_per_s: u64,
    burst_bytes: u64,
    /// Bytes that may be sent at once now (may go negative after a frame larger than what
    /// was available: the debt delays the next one).
    tokens: f64,
    last: Option<Instant>,
}

impl Pacer {
    /// A pacer that starts with a full burst allowance. A zero rate means unpaced.
    pub fn new(rate_bytes_per_s: u64, burst_bytes: u64) -> Pacer {
        Pacer {
            rate_bytes_per_s,
            burst_bytes,
            tokens: burst_bytes as f64,
            last: None,
        }
    }

    /// Changes the rate and burst allowance from now on (a shared link's members split the
    /// one qemu socket buffer they all send into); tokens beyond the new burst are dropped.
    pub fn set_rate(&mut self, rate_bytes_per_s: u64, burst_bytes: u64) {
        self.rate_bytes_per_s = rate_bytes_per_s;
        self.burst_bytes = burst_bytes;
        self.tokens = self.tokens.min(burst_bytes as f64);
    }

    /// The rate paced to, in bytes per second (0: unpaced).
    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    /// Takes `bytes` from the bucket at `now` and returns how long the caller must wait
    /// before sending them (zero when the allowance covers them). Call once per frame, in
    /// sending order.
    pub fn delay(&mut self, now: Instant, bytes: usize) -> Duration {
        if self.rate_bytes_per_s == 0 {
            return Duration::ZERO;
        }
        if let Some(last) = self.last {
            let refill =
                now.saturating_duration_since(last).as_secs_f64() * self.rate_bytes_per_s as f64;
            self.tokens = (self.tokens + refill).min(self.burst_bytes as f64);
        }
        self.last = Some(now);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate_bytes_per_s as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_frames_wait_their_share_of_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1_000_000, 3000);
        assert_eq!(p.delay(t0, 1000), Duration::ZERO);
        assert_eq!(p.delay(t0, 1000), Duration::ZERO);
        assert_eq!(p.delay(t0, 1000), Duration::ZERO);
        // The bucket is empty: 1000 more bytes at 1 MB/s take 1 ms.
        assert_eq!(p.delay(t0, 1000), Duration::from_millis(1));
        // The caller waited that 1 ms: the next 1000 bytes wait another 1 ms.
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(p.delay(t1, 1000), Duration::from_millis(1));
    }

    #[test]
    fn an_idle_link_refills_only_up_to_the_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1_000_000, 2000);
        assert_eq!(p.delay(t0, 2000), Duration::ZERO);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(p.delay(later, 2000), Duration::ZERO);
        assert_eq!(p.delay(later, 500), Duration::from_micros(500));
    }

    #[test]
    fn a_lower_rate_set_later_slows_the_next_frames_and_caps_the_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2_000_000, 4000);
        p.set_rate(1_000_000, 2000);
        assert_eq!(p.rate_bytes_per_s(), 1_000_000);
        assert_eq!(p.delay(t0, 2000), Duration::ZERO);
        assert_eq!(p.delay(t0, 1000), Duration::from_millis(1));
    }

    #[test]
    fn zero_rate_never_waits() {
        let t0 = Instant::now();
        let mut p = Pacer::new(0, 0);
        assert_eq!(p.delay(t0, 1 << 20), Duration::ZERO);
    }
}
