//! The engine thread's timer slack during its naps (`prctl(PR_SET_TIMERSLACK)`).
//!
//! While an application polls, the engine thread only naps (see `engine_thread`), and each
//! nap's end is a timer interrupt of its own on a CPU the polling threads keep busy: on a
//! virtual machine an interrupt is an exit to the host, and with the wake-up and the switch
//! it lands in a round trip of a ping-pong as one of its slowest. With slack, the kernel ends
//! the nap at the first timer interrupt due anyway in `[end, end + slack]`: the scheduler's
//! tick (every 4 ms at 250 Hz) on a busy CPU. Measured (`softverbs perf send_lat --loopback
//! -s 8 -n 20000 -t 128`, six alternating runs of each build, 2026-11-28): timer interrupts
//! per run 112-121 against 155-208, t_99 6.7-7.1 us against 7.1-13.7 us, medians the same
//! (4.5 us). A trace had shown 63% of the round trips over 2.5x the median holding a timer
//! interrupt, and none of 2,000 ordinary ones.
//!
//! The slack never reaches past a transport deadline, so timers fire when they would have;
//! only the end of a nap moves, by at most [`NAP_SLACK_MAX`] (the nap's own length for the
//! short first naps).

use std::time::Duration;

/// The most a nap's end may move: one tick at 250 Hz, so that the window always holds one.
pub const NAP_SLACK_MAX: Duration = Duration::from_millis(4);

/// The slack of a nap of `nap` when the next deadline is `to_deadline` away: at most the
/// nap's length and [`NAP_SLACK_MAX`], and never past the deadline.
pub fn nap_slack(nap: Duration, to_deadline: Duration) -> Duration {
    nap.min(NAP_SLACK_MAX).min(to_deadline.saturating_sub(nap))
}

/// The calling thread's timer slack, changed only when it must be (each change is a
/// system call).
pub struct TimerSlack {
    /// The thread's own slack when this was made: what its other waits use.
    default_ns: u64,
    current_ns: u64,
}

impl TimerSlack {
    /// The calling thread's, as it is now.
    pub fn of_this_thread() -> TimerSlack {
        let default_ns = nix::sys::prctl::get_timerslack()
            .ok()
            .and_then(|ns| u64::try_from(ns).ok())
            .unwrap_or(50_000);
        TimerSlack {
            default_ns,
            current_ns: default_ns,
        }
    }

    /// Sets the slack to `slack` (not below the thread's default).
    pub fn set(&mut self, slack: Duration) {
        let ns = (slack.as_nanos() as u64).max(self.default_ns);
        self.apply(ns);
    }

    /// Back to the thread's default, for waits whose end must not move.
    pub fn restore(&mut self) {
        self.apply(self.default_ns);
    }

    fn apply(&mut self, ns: u64) {
        if ns != self.current_ns && nix::sys::prctl::set_timerslack(ns as _).is_ok() {
            self.current_ns = ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nap_slack_stays_within_the_nap_the_cap_and_the_deadline() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        // No deadline near: the nap's length, up to one tick.
        assert_eq!(nap_slack(us(100), ms(60_000)), us(100));
        assert_eq!(nap_slack(ms(5), ms(60_000)), NAP_SLACK_MAX);
        // A deadline 6 ms away: a 5 ms nap may end 1 ms late at most.
        assert_eq!(nap_slack(ms(5), ms(6)), ms(1));
        // The nap ends at the deadline: no slack at all.
        assert_eq!(nap_slack(ms(5), ms(5)), Duration::ZERO);
        assert_eq!(nap_slack(ms(5), ms(2)), Duration::ZERO);
    }

    #[test]
    fn the_thread_slack_is_set_and_restored() {
        std::thread::spawn(|| {
            let mut slack = TimerSlack::of_this_thread();
            let default = nix::sys::prctl::get_timerslack().unwrap() as u64;
            slack.set(Duration::from_millis(3));
            assert_eq!(nix::sys::prctl::get_timerslack().unwrap() as u64, 3_000_000);
            // Never below the thread's own.
            slack.set(Duration::ZERO);
            assert_eq!(nix::sys::prctl::get_timerslack().unwrap() as u64, default);
            slack.set(Duration::from_millis(1));
            slack.restore();
            assert_eq!(nix::sys::prctl::get_timerslack().unwrap() as u64, default);
        })
        .join()
        .unwrap();
    }
}
