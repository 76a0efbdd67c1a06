//! One fd-backed event queue for every kind of event channel the verbs hand out: the
//! completion channel, the async events of a context (and later the CM's event channel).
//! A bounded FIFO behind a mutex, a condition variable for blocking readers, and an
//! eventfd holding one token per waiting event, so that the descriptor is readable (poll,
//! epoll, tokio's `AsyncFd`) exactly while an event waits.
//!
//! Each kind keeps its own bookkeeping (which events are handed out and not acknowledged,
//! which CQs are attached) as the queue's `extra` state, under the same lock as the events.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use softverbs_api::VerbsResult;

use super::event_fd::EventFd;

/// The waiting events and the kind's own state, as a queue's callers see them under its
/// lock.
pub struct Queued<T, S> {
    pending: VecDeque<T>,
    /// The kind's own bookkeeping.
    pub extra: S,
}

impl<T, S> Queued<T, S> {
    /// Events waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True if no event waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A bounded queue of events of type `T` with a readable descriptor; `S` is the kind's
/// own state, kept under the queue's lock.
pub struct FdEventQueue<T, S = ()> {
    state: Mutex<Queued<T, S>>,
    arrived: Condvar,
    fd: EventFd,
    limit: usize,
    lost: AtomicU64,
}

impl<T, S> FdEventQueue<T, S> {
    /// An empty queue holding at most `limit` events, with its own descriptor; `what`
    /// names the queue in the error of a failed descriptor.
    pub fn new(what: &str, limit: usize, extra: S) -> VerbsResult<FdEventQueue<T, S>> {
        Ok(FdEventQueue {
            state: Mutex::new(Queued {
                pending: VecDeque::new(),
                extra,
            }),
            arrived: Condvar::new(),
            fd: EventFd::for_verbs(what)?,
            limit,
            lost: AtomicU64::new(0),
        })
    }

    /// The descriptor: readable while an event waits (one token per event).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Events not queued because the queue was full (or refused by `admit`, see
    /// [`FdEventQueue::push_if`], never).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Queues `event` if `admit` (given the kind's state) says so, and wakes a waiter.
    /// Returns whether it was queued: false if `admit` refused it, or if the queue was
    /// full (then it counts in [`FdEventQueue::lost`]).
    pub fn push_if(&self, event: T, admit: impl FnOnce(&mut S, &T) -> bool) -> bool {
        let mut state = self.state.lock();
        if !admit(&mut state.extra, &event) {
            return false;
        }
        if state.pending.len() >= self.limit || self.fd.add(1).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        state.pending.push_back(event);
        self.arrived.notify_one();
        true
    }

    /// The oldest event; waits up to `timeout` (`None`: without limit; zero: no wait) for
    /// one. `taken` records it in the kind's state (handed out, to be acknowledged).
    pub fn get(&self, timeout: Option<Duration>, mut taken: impl FnMut(&mut S, &T)) -> Option<T> {
        let mut state = self.state.lock();
        take_within(&self.arrived, &mut state, timeout, |state| {
            let event = state.pending.pop_front()?;
            self.fd.take(1);
            taken(&mut state.extra, &event);
            Some(event)
        })
    }

    /// Runs `f` on the kind's state under the queue's lock.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.state.lock().extra)
    }

    /// Runs `f` under the queue's lock with the kind's state; `f` may then drop waiting
    /// events with the [`Dropper`] it is given (their tokens leave the descriptor).
    pub fn with_state_dropping<R>(&self, f: impl FnOnce(&mut S, &mut Dropper<'_, T>) -> R) -> R {
        let mut state = self.state.lock();
        let Queued { pending, extra } = &mut *state;
        let mut dropper = Dropper {
            pending,
            fd: &self.fd,
        };
        f(extra, &mut dropper)
    }
}

/// Drops waiting events of a queue whose lock is held (see
/// [`FdEventQueue::with_state_dropping`]).
pub struct Dropper<'a, T> {
    pending: &'a mut VecDeque<T>,
    fd: &'a EventFd,
}

impl<T> Dropper<'_, T> {
    /// Keeps only the waiting events for which `keep` is true; returns how many went.
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) -> usize {
        let before = self.pending.len();
        self.pending.retain(keep);
        let removed = before - self.pending.len();
        self.fd.take(removed as u64);
        removed
    }
}

/// Calls `take` on the locked state until it yields a value, waiting on `arrived` between
/// tries; gives `None` once `timeout` has passed (`None`: no limit; zero: one try only).
fn take_within<S, T>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_order_and_the_kind_records_each_taken() {
        let q: FdEventQueue<u32, u32> = FdEventQueue::new("test", 8, 0).unwrap();
        assert!(q.push_if(1, |_, _| true));
        assert!(q.push_if(2, |_, _| true));
        assert!(!q.push_if(3, |_, &e| e != 3), "refused by the kind");
        let count = |s: &mut u32, _: &u32| *s += 1;
        assert_eq!(q.get(Some(Duration::ZERO), count), Some(1));
        assert_eq!(q.get(None, count), Some(2));
        assert_eq!(q.get(Some(Duration::from_millis(1)), count), None);
        assert_eq!(q.with_state(|s| *s), 2, "two handed out");
        assert_eq!(q.lost(), 0);
    }

    #[test]
    fn a_full_queue_counts_what_it_loses_and_dropped_events_never_come_out() {
        let q: FdEventQueue<u32> = FdEventQueue::new("test", 2, ()).unwrap();
        assert!(q.push_if(1, |_, _| true));
        assert!(q.push_if(2, |_, _| true));
        assert!(!q.push_if(3, |_, _| true));
        assert_eq!(q.lost(), 1);
        let gone = q.with_state_dropping(|_, d| d.retain(|&e| e != 1));
        assert_eq!(gone, 1);
        assert_eq!(q.get(Some(Duration::ZERO), |_, _| {}), Some(2));
    }
}
