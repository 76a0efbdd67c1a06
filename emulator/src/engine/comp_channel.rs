//! Completion channels (`ibv_comp_channel`): a queue of completion events, one per armed CQ
//! that got a completion, with a real file descriptor that is readable while events wait,
//! and the per-CQ counts of events handed out and not yet acknowledged.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use softverbs_api::{VerbsError, VerbsResult};

use super::event_fd::EventFd;
use super::wait::take_within;

#[derive(Default)]
struct State {
    /// CQ ids of the events waiting, oldest first. A CQ raises at most one event per
    /// `req_notify_cq`, so this is bounded by the application's arming calls.
    pending: VecDeque<u32>,
    /// The CQs attached to this channel and, for each, the events handed out by `get` and
    /// not yet acknowledged.
    unacked: HashMap<u32, u64>,
}

/// A completion channel.
pub struct CompChannel {
    state: Mutex<State>,
    arrived: Condvar,
    fd: EventFd,
}

impl CompChannel {
    /// A channel with no CQ and its own descriptor.
    pub fn new() -> VerbsResult<CompChannel> {
        let fd = EventFd::for_verbs("completion channel")?;
        Ok(CompChannel {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
            fd,
        })
    }

    /// The descriptor: readable while an event waits (one token per event).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// CQ `cq` now reports to this channel.
    pub fn attach(&self, cq: u32) {
        self.state.lock().unacked.insert(cq, 0);
    }

    /// CQ `cq` is being destroyed: EBUSY while some of its events are handed out and not
    /// acknowledged (libibverbs would block in `ibv_destroy_cq` until they are); otherwise
    /// its waiting events are dropped (as the kernel drops them) and it is detached.
    pub fn detach(&self, cq: u32) -> VerbsResult<()> {
        let mut state = self.state.lock();
        let unacked = state.unacked.get(&cq).copied().unwrap_or(0);
        if unacked > 0 {
            return Err(VerbsError::Busy(format!(
                "CQ {cq} has {unacked} completion event(s) not acknowledged (ibv_ack_cq_events)"
            )));
        }
        let before = state.pending.len();
        state.pending.retain(|&c| c != cq);
        self.fd.take((before - state.pending.len()) as u64);
        state.unacked.remove(&cq);
        Ok(())
    }

    /// CQs attached.
    pub fn attached(&self) -> usize {
        self.state.lock().unacked.len()
    }

    /// Queues one event for CQ `cq` and wakes a waiter.
    pub fn raise(&self, cq: u32) {
        let mut state = self.state.lock();
        if !state.unacked.contains_key(&cq) || self.fd.add(1).is_err() {
            return;
        }
        state.pending.push_back(cq);
        self.arrived.notify_one();
    }

    /// The CQ of the oldest event; waits up to `timeout` (`None`: without limit) for one.
    /// The event counts as handed out until acknowledged with [`CompChannel::ack`].
    pub fn get(&self, timeout: Option<Duration>) -> Option<u32> {
        let mut state = self.state.lock();
        take_within(&self.arrived, &mut state, timeout, |state| {
            let cq = state.pending.pop_front()?;
            self.fd.take(1);
            if let Some(n) = state.unacked.get_mut(&cq) {
                *n += 1;
            }
            Some(cq)
        })
    }

    /// Acknowledges `count` events of CQ `cq`: EINVAL if fewer are outstanding.
    pub fn ack(&self, cq: u32, count: u32) -> VerbsResult<()> {
        let mut state = self.state.lock();
        let Some(n) = state.unacked.get_mut(&cq) else {
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
    }
}
