//! When an empty `ibv_poll_cq` blocks. Applications spin on `ibv_poll_cq`; the emulator's
//! work (segmenting, ICRC, copies) needs the same CPUs. An empty poll returns at once while
//! the current wait is short, so a ping-pong spins through its round trips; once the wait
//! has lasted [`SPIN_BUDGET`], empty polls block until traffic reaches the device (or
//! [`WAIT`] passes), so a bandwidth test waiting for its next signaled completion leaves the
//! CPU to the engine instead of spinning. The clock is read on one empty poll in
//! [`CLOCK_EVERY`] only.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a wait spins before empty polls block.
pub const SPIN_BUDGET: Duration = Duration::from_micros(50);
/// Longest block of one empty poll (it ends earlier when traffic arrives).
pub const WAIT: Duration = Duration::from_micros(20);
/// Empty polls between two readings of the clock.
const CLOCK_EVERY: u32 = 16;

/// The polling state of one CQ.
#[derive(Default)]
pub struct PollBackoff {
    /// Consecutive empty polls.
    empty: AtomicU32,
    /// When the current wait was first seen by a clock reading (0: not yet), in
    /// nanoseconds since [`now_ns`]'s base.
    idle_since_ns: AtomicU64,
}

impl PollBackoff {
    /// A poll found completions: the wait is over.
    pub fn found(&self) {
        if self.empty.swap(0, Ordering::Relaxed) != 0 {
            self.idle_since_ns.store(0, Ordering::Relaxed);
        }
    }

    /// A poll found nothing: true when the caller should now block for traffic.
    pub fn should_block(&self) -> bool {
        let empty = self.empty.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if !empty.is_multiple_of(CLOCK_EVERY) {
            return false;
        }
        let now = now_ns();
        match self.idle_since_ns.load(Ordering::Relaxed) {
            0 => {
                self.idle_since_ns.store(now, Ordering::Relaxed);
                false
            }
            since => now.saturating_sub(since) >= SPIN_BUDGET.as_nanos() as u64,
        }
    }
}

/// Nanoseconds since the first call, never 0.
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    (base.elapsed().as_nanos() as u64).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_first_blocks_after_the_budget_and_starts_over_on_a_completion() {
        let b = PollBackoff::default();
        // The first clock reading only starts the wait.
        for _ in 0..CLOCK_EVERY {
            assert!(!b.should_block());
        }
        std::thread::sleep(SPIN_BUDGET * 2);
        // Between readings it keeps spinning; the next reading sees the budget spent.
        for _ in 0..CLOCK_EVERY - 1 {
            assert!(!b.should_block());
        }
        assert!(b.should_block());
        // A completion ends the wait: spinning again.
        b.found();
        for _ in 0..CLOCK_EVERY * 2 {
            assert!(!b.should_block());
        }
    }
}
