//! Adaptive back-off of polling loops: spin while completions are coming, then block until
//! traffic reaches the device (`Context::wait_for_traffic`: the kernel wakes the thread as
//! it would a UDP receiver, and the next poll does the device's receive work in this
//! thread), so an idle wait neither burns a core nor sleeps past the next packet.

use std::time::Duration;

use softverbs::Context;

/// Empty polls that only spin.
const SPIN_POLLS: u32 = 4;
/// Longest wait for traffic in one back-off.
const WAIT: Duration = Duration::from_micros(100);

/// The state of one polling loop.
pub struct Backoff {
    idle: u32,
    ctx: Context,
}

impl Backoff {
    /// A fresh loop polling the CQs of `ctx`.
    pub fn new(ctx: &Context) -> Backoff {
        Backoff {
            idle: 0,
            ctx: ctx.clone(),
        }
    }

    /// Something happened: spin again.
    pub fn reset(&mut self) {
        self.idle = 0;
    }

    /// Nothing happened: spin a little, then wait for traffic. Traffic that wakes the wait
    /// starts a new spin: what follows a packet (the answer after an ACK) tends to come soon.
    pub fn idle(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= SPIN_POLLS {
            std::hint::spin_loop();
        } else if self.ctx.wait_for_traffic(WAIT) {
            self.idle = 0;
        }
    }
}
