//! The async event queue of one context (`ibv_context::async_fd`): events about the objects
//! the context created (QP errors, CQ errors, SRQ limit, last WQE reached) and about the
//! device's port, with a real file descriptor that is readable while events wait.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::Duration;

use softverbs_api::{AsyncElement, AsyncEvent, VerbsError, VerbsResult};

use super::event_queue::FdEventQueue;

/// Most events waiting in one queue. An application that never reads its events must not
/// make the engine grow without bound; past the limit, new events are counted in
/// [`AsyncEventQueue::lost`] and logged instead of queued.
pub const MAX_PENDING_ASYNC_EVENTS: usize = 4096;

/// Events handed out and not yet acknowledged, by event.
type Unacked = HashMap<AsyncEvent, u32>;

/// One context's async events.
pub struct AsyncEventQueue {
    queue: FdEventQueue<AsyncEvent, Unacked>,
}

impl AsyncEventQueue {
    /// An empty queue with its own descriptor.
    pub fn new() -> VerbsResult<AsyncEventQueue> {
        Ok(AsyncEventQueue {
            queue: FdEventQueue::new("async event", MAX_PENDING_ASYNC_EVENTS, Unacked::new())?,
        })
    }

    /// The descriptor: readable while an event waits (one token per event).
    pub fn fd(&self) -> RawFd {
        self.queue.fd()
    }

    /// Events dropped because the queue was full.
    pub fn lost(&self) -> u64 {
        self.queue.lost()
    }

    /// Queues `event` and wakes a waiter.
    pub fn push(&self, event: AsyncEvent) {
        if !self.queue.push_if(event, |_, _| true) {
            tracing::warn!(?event, "async event queue full: event dropped");
        }
    }

    /// The oldest event; waits up to `timeout` (`None`: without limit) for one.
    pub fn get(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.queue.get(timeout, |unacked, event| {
            *unacked.entry(*event).or_insert(0) += 1;
        })
    }

    /// Acknowledges one event handed out by [`AsyncEventQueue::get`]; EINVAL for an event
    /// that is not outstanding.
    pub fn ack(&self, event: &AsyncEvent) -> VerbsResult<()> {
        self.queue
            .with_state(|unacked| match unacked.get_mut(event) {
                Some(n) => {
                    *n -= 1;
                    if *n == 0 {
                        unacked.remove(event);
                    }
                    Ok(())
                }
                None => Err(VerbsError::inval(format!(
                    "async event {event:?} was not handed out or is already acknowledged"
                ))),
            })
    }

    /// Drops the waiting events about `element` (it was destroyed), as the kernel does when
    /// an object goes away; events already handed out stay to be acknowledged.
    pub fn forget(&self, element: AsyncElement) {
        self.queue
            .with_state_dropping(|_, waiting| waiting.retain(|e| e.element != element));
    }
}
