//! The async event queue of one context (`ibv_context::async_fd`): events about the objects
//! the context created (QP errors, CQ errors, SRQ limit, last WQE reached) and about the
//! device's port, with a real file descriptor that is readable while events wait.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use softverbs_api::{AsyncElement, AsyncEvent, VerbsError, VerbsResult};

use super::event_fd::EventFd;
use super::wait::take_within;

/// Most events waiting in one queue. An application that never reads its events must not
/// make the engine grow without bound; past the limit, new events are counted in
/// [`AsyncEventQueue::lost`] and logged instead of queued.
pub const MAX_PENDING_ASYNC_EVENTS: usize = 4096;

#[derive(Default)]
struct State {
    pending: VecDeque<AsyncEvent>,
    /// Events handed out and not yet acknowledged, by event.
    unacked: HashMap<AsyncEvent, u32>,
}

/// One context's async events.
pub struct AsyncEventQueue {
    state: Mutex<State>,
    arrived: Condvar,
    fd: EventFd,
    lost: AtomicU64,
}

impl AsyncEventQueue {
    /// An empty queue with its own descriptor.
    pub fn new() -> VerbsResult<AsyncEventQueue> {
        let fd = EventFd::for_verbs("async event")?;
        Ok(AsyncEventQueue {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
            fd,
            lost: AtomicU64::new(0),
        })
    }

    /// The descriptor: readable while an event waits (one token per event).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Events dropped because the queue was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Queues `event` and wakes a waiter.
    pub fn push(&self, event: AsyncEvent) {
        let mut state = self.state.lock();
        if state.pending.len() >= MAX_PENDING_ASYNC_EVENTS || self.fd.add(1).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(?event, "async event queue full: event dropped");
            return;
        }
        state.pending.push_back(event);
        self.arrived.notify_one();
    }

    /// The oldest event; waits up to `timeout` (`None`: without limit) for one.
    pub fn get(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        let mut state = self.state.lock();
        take_within(&self.arrived, &mut state, timeout, |state| {
            let event = state.pending.pop_front()?;
            self.fd.take(1);
            *state.unacked.entry(event).or_insert(0) += 1;
            Some(event)
        })
    }

    /// Acknowledges one event handed out by [`AsyncEventQueue::get`]; EINVAL for an event
    /// that is not outstanding.
    pub fn ack(&self, event: &AsyncEvent) -> VerbsResult<()> {
        let mut state = self.state.lock();
        match state.unacked.get_mut(event) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    state.unacked.remove(event);
                }
                Ok(())
            }
            None => Err(VerbsError::inval(format!(
                "async event {event:?} was not handed out or is already acknowledged"
            ))),
        }
    }

    /// Drops the waiting events about `element` (it was destroyed), as the kernel does when
    /// an object goes away; events already handed out stay to be acknowledged.
    pub fn forget(&self, element: AsyncElement) {
        let mut state = self.state.lock();
        let before = state.pending.len();
        state.pending.retain(|e| e.element != element);
        let removed = (before - state.pending.len()) as u64;
        self.fd.take(removed);
    }
}
