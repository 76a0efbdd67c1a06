//! Adaptive back-off of polling loops: spin while the next completion is likely to come
//! soon, then block until traffic reaches the device (`Context::wait_for_traffic`: the
//! kernel wakes the thread as it would a UDP receiver, and the next poll does the device's
//! receive work in this thread), so an idle wait neither burns a core for long nor sleeps
//! past the next packet.
//!
//! How long to spin is learned: a wake-up from a blocking wait costs tens of microseconds on
//! a virtual machine, several times a loopback round trip, so a loop whose waits are short
//! (a ping-pong) should spin through them, and one whose waits are long (an idle server)
//! should block early. The budget follows twice a moving average of the waits seen.

use std::time::{Duration, Instant};

use softverbs::Context;

/// Empty polls before the clock is first read: most waits of a busy loop end within them.
const FREE_POLLS: u32 = 4;
/// After those, the clock is read on one empty poll in this many. On a VM whose clock
/// source is not the TSC (qemu TCG's is the HPET) a read is a system call of microseconds:
/// reading it on every poll made a ping-pong there 3x slower than rxe's on the same VM.
pub const CLOCK_EVERY: u32 = 16;
/// Least and most time spent spinning before blocking.
const SPIN_MIN: Duration = Duration::from_micros(20);
const SPIN_MAX: Duration = Duration::from_micros(500);
/// Least spin of a latency test's loops (see [`Backoff::for_latency`]).
const LATENCY_SPIN_MIN: Duration = Duration::from_millis(2);
/// Longest wait for traffic in one back-off.
const WAIT: Duration = Duration::from_micros(100);

/// Counts a call in `calls`; true for one call in `every`: the one that may read the clock
/// (see [`CLOCK_EVERY`]).
pub fn clock_due(calls: &mut u32, every: u32) -> bool {
    *calls = calls.wrapping_add(1);
    calls.is_multiple_of(every)
}

/// The state of one polling loop.
pub struct Backoff {
    ctx: Context,
    /// Empty polls in the current wait.
    idle: u32,
    /// When the current wait began (read after [`FREE_POLLS`] empty polls).
    idle_since: Option<Instant>,
    /// Moving average of the waits, in nanoseconds.
    typical_wait_ns: u64,
    /// The current wait blocked at least once.
    blocked: bool,
    /// The least spin before blocking.
    spin_min: Duration,
}

impl Backoff {
    /// A fresh loop polling the CQs of `ctx`.
    pub fn new(ctx: &Context) -> Backoff {
        Backoff {
            ctx: ctx.clone(),
            idle: 0,
            idle_since: None,
            typical_wait_ns: SPIN_MIN.as_nanos() as u64 / 2,
            blocked: false,
            spin_min: SPIN_MIN,
        }
    }

    /// The loop of a latency test: it spins at least [`LATENCY_SPIN_MIN`] before it
    /// blocks, as perftest's latency loops never block.
    ///
    /// Why: a wait that blocks ends with a wake-up, and the kernel wakes a thread on its
    /// waker's CPU when it can, so the two polling threads of a ping-pong shared one CPU
    /// after a hiccup of 20 us (the least spin of [`Backoff::new`]) for tens of
    /// milliseconds at a time. In six alternating `send_lat --loopback -s 8 -n 20000 -t
    /// 128` runs of each build: round trips over 20 us 200-734 (median 273) against
    /// 230-987 (median 556), and a lower t_99.9 in all six pairs (34-51 against 52-71 us).
    pub fn for_latency(ctx: &Context) -> Backoff {
        Backoff {
            spin_min: LATENCY_SPIN_MIN,
            ..Backoff::new(ctx)
        }
    }

    /// Something happened: the wait is over; learn from its length and spin again.
    pub fn reset(&mut self) {
        if let Some(since) = self.idle_since.take() {
            let waited = since.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.typical_wait_ns = learn(self.typical_wait_ns, waited, self.blocked);
        }
        self.idle = 0;
        self.blocked = false;
    }

    /// How long a wait spins before it blocks.
    fn spin_budget(&self) -> Duration {
        spin_budget(self.typical_wait_ns, self.spin_min)
    }

    /// Nothing happened: spin while the wait is within the budget, then wait for traffic.
    /// Traffic that wakes the wait starts a new spin: what follows a packet (the answer after
    /// an ACK) tends to come soon.
    pub fn idle(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= FREE_POLLS {
            std::hint::spin_loop();
            return;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        if !(self.idle - FREE_POLLS).is_multiple_of(CLOCK_EVERY)
            || since.elapsed() < self.spin_budget()
        {
            std::hint::spin_loop();
        } else {
            self.blocked = true;
            if self.ctx.wait_for_traffic(WAIT) {
                self.idle = 0;
            }
        }
    }
}

/// How long a wait spins: twice the typical wait, within `spin_min` and [`SPIN_MAX`] (or
/// exactly `spin_min` where that is longer).
fn spin_budget(typical_wait_ns: u64, spin_min: Duration) -> Duration {
    let budget = Duration::from_nanos(typical_wait_ns.saturating_mul(2));
    budget.clamp(spin_min, SPIN_MAX.max(spin_min))
}

/// The moving average of the waits (about 8 of them) after a wait of `waited_ns`, which
/// `blocked` or ended while spinning.
///
/// A wait that ended only after the loop blocked does not raise the average: spinning did
/// not end it, and it may have lasted because of the spinning. On a two-core machine a
/// spinning thread can keep the kernel's deferred network work (ksoftirqd) off its CPU, so
/// the datagram it waits for arrives once it blocks; learning from such waits made the next
/// spin longer, and a loopback ping-pong ramped from 5 us to 1 ms per round trip (twice
/// `SPIN_MAX`) for dozens of round trips at a time.
fn learn(typical_ns: u64, waited_ns: u64, blocked: bool) -> u64 {
    let waited_ns = if blocked {
        waited_ns.min(typical_ns)
    } else {
        waited_ns
    };
    typical_ns - typical_ns / 8 + waited_ns / 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_is_twice_the_typical_wait_within_bounds_and_a_latency_loop_spins_longer() {
        assert_eq!(spin_budget(50_000, SPIN_MIN), Duration::from_micros(100));
        assert_eq!(spin_budget(1_000, SPIN_MIN), SPIN_MIN);
        assert_eq!(spin_budget(10_000_000, SPIN_MIN), SPIN_MAX);
        // A latency loop: never less than its floor, which is above SPIN_MAX.
        assert_eq!(spin_budget(1_000, LATENCY_SPIN_MIN), LATENCY_SPIN_MIN);
        assert_eq!(spin_budget(10_000_000, LATENCY_SPIN_MIN), LATENCY_SPIN_MIN);
    }

    #[test]
    fn waits_that_blocked_never_lengthen_the_spin_and_spun_out_waits_do() {
        let start = 10_000;
        // Waits of ten times the budget, each ended after blocking: no ramp.
        let mut typical = start;
        for _ in 0..50 {
            typical = learn(typical, 10 * 2 * typical, true);
        }
        assert_eq!(typical, start);
        // Short blocked waits still shorten it.
        assert!(learn(start, 1_000, true) < start);
        // Waits that spinning ended are learned as they are.
        let mut typical = start;
        for _ in 0..50 {
            typical = learn(typical, 100_000, false);
        }
        assert!(typical > 95_000, "{typical}");
    }
}
