//! Adaptive back-off of polling loops: spin while completions are coming, then yield the
//! CPU (the engine threads need it on a small machine), then sleep briefly, so an idle wait
//! does not burn a core.

use std::time::Duration;

/// Empty polls that only spin.
const SPIN_POLLS: u32 = 64;
/// Empty polls that yield before sleeping.
const YIELD_POLLS: u32 = 20_000;
/// Sleep of a long-idle poller.
const IDLE_SLEEP: Duration = Duration::from_micros(20);

/// The state of one polling loop.
#[derive(Default)]
pub struct Backoff {
    idle: u32,
}

impl Backoff {
    /// A fresh loop.
    pub fn new() -> Backoff {
        Backoff::default()
    }

    /// Something happened: spin again.
    pub fn reset(&mut self) {
        self.idle = 0;
    }

    /// Nothing happened: wait a little, more the longer nothing happens.
    pub fn idle(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= SPIN_POLLS {
            std::hint::spin_loop();
        } else if self.idle <= YIELD_POLLS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(IDLE_SLEEP);
        }
    }

    /// Nothing happened, and latency matters: spin, then yield, never sleep.
    pub fn idle_spin(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= SPIN_POLLS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
