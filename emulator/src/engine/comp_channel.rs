//! Completion channels (`ibv_comp_channel`): a queue of completion events, one per armed CQ
//! that got a completion, with a real file descriptor that is readable while events wait,
//! and the per-CQ counts of events handed out and not yet acknowledged.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::Duration;

use softverbs_api::{VerbsError, VerbsResult};

use super::event_queue::FdEventQueue;

/// Most events waiting on one channel: a CQ raises at most one event per
/// `req_notify_cq`, so at most one per CQ of the device waits.
const MAX_PENDING_CQ_EVENTS: usize = super::limits::MAX_CQ as usize;

/// The CQs attached to a channel and, for each, the events handed out by `get` and not yet
/// acknowledged.
type Attached = HashMap<u32, u64>;

/// A completion channel: the events are the ids of the CQs that raised them.
pub struct CompChannel {
    queue: FdEventQueue<u32, Attached>,
}

impl CompChannel {
    /// A channel with no CQ and its own descriptor.
    pub fn new() -> VerbsResult<CompChannel> {
        Ok(CompChannel {
            queue: FdEventQueue::new("completion channel", MAX_PENDING_CQ_EVENTS, Attached::new())?,
        })
    }

    /// The descriptor: readable while an event waits (one token per event).
    pub fn fd(&self) -> RawFd {
        self.queue.fd()
    }

    /// CQ `cq` now reports to this channel.
    pub fn attach(&self, cq: u32) {
        self.queue.with_state(|attached| attached.insert(cq, 0));
    }

    /// CQ `cq` is being destroyed: EBUSY while some of its events are handed out and not
    /// acknowledged (libibverbs would block in `ibv_destroy_cq` until they are); otherwise
    /// its waiting events are dropped (as the kernel drops them) and it is detached.
    pub fn detach(&self, cq: u32) -> VerbsResult<()> {
        self.queue.with_state_dropping(|attached, waiting| {
            let unacked = attached.get(&cq).copied().unwrap_or(0);
            if unacked > 0 {
                return Err(VerbsError::Busy(format!(
                    "CQ {cq} has {unacked} completion event(s) not acknowledged (ibv_ack_cq_events)"
                )));
            }
            waiting.retain(|&c| c != cq);
            attached.remove(&cq);
            Ok(())
        })
    }

    /// CQs attached.
    pub fn attached(&self) -> usize {
        self.queue.with_state(|attached| attached.len())
    }

    /// Queues one event for CQ `cq` and wakes a waiter.
    pub fn raise(&self, cq: u32) {
        self.queue
            .push_if(cq, |attached, cq| attached.contains_key(cq));
    }

    /// The CQ of the oldest event; waits up to `timeout` (`None`: without limit) for one.
    /// The event counts as handed out until acknowledged with [`CompChannel::ack`].
    pub fn get(&self, timeout: Option<Duration>) -> Option<u32> {
        self.queue.get(timeout, |attached, cq| {
            if let Some(n) = attached.get_mut(cq) {
                *n += 1;
            }
        })
    }

    /// Acknowledges `count` events of CQ `cq`: EINVAL if fewer are outstanding.
    pub fn ack(&self, cq: u32, count: u32) -> VerbsResult<()> {
        self.queue.with_state(|attached| {
            let Some(n) = attached.get_mut(&cq) else {
                return Err(VerbsError::inval(format!(
                    "CQ {cq} does not report to this channel"
                )));
            };
            if u64::from(count) > *n {
                return Err(VerbsError::inval(format!(
                    "acknowledging {count} event(s) of CQ {cq}, but only {n} were handed out and not acknowledged"
                )));
            }
            *n -= u64::from(count);
            Ok(())
        })
    }
}
