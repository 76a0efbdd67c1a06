//! The engine's clock: monotonic nanoseconds since the device started. The transport only
//! ever sees these numbers.

use std::time::Instant;

/// A monotonic clock with its own epoch.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock reading 0 now.
    pub fn start() -> Self {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since start.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}
