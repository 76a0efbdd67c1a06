//! Blocking until a queue behind a mutex yields something, with an optional time limit.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, MutexGuard};

/// Calls `take` on the locked state until it yields a value, waiting on `arrived` between
/// tries; gives `None` once `timeout` has passed (`None`: no limit; zero: one try only).
pub(crate) fn take_within<S, T>(
    arrived: &Condvar,
    state: &mut MutexGuard<'_, S>,
    timeout: Option<Duration>,
    mut take: impl FnMut(&mut S) -> Option<T>,
) -> Option<T> {
    // A timeout too large to add to now is no limit.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        if let Some(value) = take(state) {
            return Some(value);
        }
        match deadline {
            None => arrived.wait(state),
            Some(deadline) => {
                if arrived.wait_until(state, deadline).timed_out() {
                    return take(state);
                }
            }
        }
    }
}
