//! Completion queues: bounded FIFOs of work completions filled by the engine, with the
//! arming state of `ibv_req_notify_cq` when they report to a completion channel.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult, WcStatus, WorkCompletion};

use super::comp_channel::CompChannel;

/// What the next completion must be to raise a completion event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// Not armed: completions raise no event.
    Off,
    /// The next solicited completion (or unsuccessful one, as the IB spec adds).
    Solicited,
    /// The next completion of any kind.
    Next,
}

struct CqState {
    entries: VecDeque<WorkCompletion>,
    arm: Arm,
}

/// A completion queue of fixed capacity. On overrun the CQ enters an error state (as a real
/// CQ does) instead of dropping completions silently: every later poll fails with EIO, and
/// the engine raises `IBV_EVENT_CQ_ERR` for it.
pub struct CompletionQueue {
    state: Mutex<CqState>,
    /// The number of queued completions, written under `state`'s lock: a poll of an empty
    /// CQ (the common case of a busy-polling application) reads it instead of locking.
    queued: AtomicUsize,
    capacity: usize,
    overrun: AtomicBool,
    id: u32,
    /// The context that created it (whose async queue gets its CQ_ERR event).
    owner: u64,
    channel: Option<Arc<CompChannel>>,
}

impl CompletionQueue {
    /// A CQ holding up to `capacity` completions, on no channel.
    pub fn new(capacity: usize) -> Self {
        Self::for_context(capacity, 0, 0, None)
    }

    /// CQ `id` of context `owner`, reporting to `channel` if given (attached by the caller).
    pub(crate) fn for_context(
        capacity: usize,
        id: u32,
        owner: u64,
        channel: Option<Arc<CompChannel>>,
    ) -> Self {
        CompletionQueue {
            state: Mutex::new(CqState {
                entries: VecDeque::with_capacity(capacity.min(4096)),
                arm: Arm::Off,
            }),
            queued: AtomicUsize::new(0),
            capacity,
            overrun: AtomicBool::new(false),
            id,
            owner,
            channel,
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The id the device gave it.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The context that created it.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// The completion channel it reports to.
    pub(crate) fn channel(&self) -> Option<&Arc<CompChannel>> {
        self.channel.as_ref()
    }

    /// Appends one completion; `solicited` says that it came from a request with the SE bit.
    /// If the CQ is armed and the completion qualifies, raises one event on the channel and
    /// disarms. Returns true if this completion found the CQ full, so that the CQ has just
    /// entered the error state (the caller raises CQ_ERR); the completion is then lost, as
    /// on a real overrun, and the error is what polls report from now on.
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> bool {
        if self.overrun.load(Ordering::Acquire) {
            return false;
        }
        let mut state = self.state.lock();
        if state.entries.len() >= self.capacity {
            let first = !self.overrun.swap(true, Ordering::AcqRel);
            // An armed waiter is woken too, so that it polls and sees the error rather
            // than wait for an event that can no longer come.
            if state.arm != Arm::Off {
                state.arm = Arm::Off;
                self.raise();
            }
            return first;
        }
        state.entries.push_back(wc);
        self.queued.store(state.entries.len(), Ordering::Release);
        // IB spec: a solicited-only arming fires on a solicited completion and on any
        // unsuccessful one (flushes included).
        let fire = match state.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => solicited || wc.status != WcStatus::Success,
        };
        if fire {
            state.arm = Arm::Off;
            self.raise();
        }
        false
    }

    fn raise(&self) {
        if let Some(channel) = &self.channel {
            channel.raise(self.id);
        }
    }

    /// `ibv_req_notify_cq`: the next completion (or, with `solicited_only`, the next
    /// solicited or unsuccessful one) raises one event. Completions already queued raise
    /// none, so a consumer arms, then polls once more before it waits. Asking for both
    /// keeps the wider `Next`. Without a channel the arming has no effect, as on hardware.
    pub fn req_notify(&self, solicited_only: bool) {
        let mut state = self.state.lock();
        state.arm = match (state.arm, solicited_only) {
            (_, false) | (Arm::Next, true) => Arm::Next,
            _ => Arm::Solicited,
        };
    }

    /// True once the CQ has overrun (it is in error).
    pub fn is_overrun(&self) -> bool {
        self.overrun.load(Ordering::Acquire)
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. Never blocks.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        if self.overrun.load(Ordering::Acquire) {
            return Err(VerbsError::Io {
                errno: libc::EIO,
                message: format!("completion queue overrun (capacity {})", self.capacity),
            });
        }
        // A completion pushed concurrently with this load is found by the next poll, as if
        // it had come just after this one.
        if self.queued.load(Ordering::Acquire) == 0 || out.is_empty() {
            return Ok(0);
        }
        let mut state = self.state.lock();
        let n = out.len().min(state.entries.len());
        for (slot, wc) in out.iter_mut().zip(state.entries.drain(..n)) {
            *slot = wc;
        }
        self.queued.store(state.entries.len(), Ordering::Release);
        Ok(n)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// True if none wait.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            ..WorkCompletion::default()
        }
    }

    fn cq_on_channel(capacity: usize) -> (CompletionQueue, Arc<CompChannel>) {
        let channel = Arc::new(CompChannel::new().unwrap());
        channel.attach(7);
        let cq = CompletionQueue::for_context(capacity, 7, 1, Some(channel.clone()));
        (cq, channel)
    }

    const NOW: Option<Duration> = Some(Duration::ZERO);

    #[test]
    fn only_armed_completions_raise_one_event_each() {
        let (cq, ch) = cq_on_channel(8);
        cq.push(wc(1, WcStatus::Success), false);
        assert_eq!(ch.get(NOW), None, "unarmed CQ raised an event");
        cq.req_notify(false);
        assert_eq!(
            ch.get(NOW),
            None,
            "arming over a queued completion raised an event"
        );
        cq.push(wc(2, WcStatus::Success), false);
        cq.push(wc(3, WcStatus::Success), false);
        assert_eq!(ch.get(NOW), Some(7));
        assert_eq!(ch.get(NOW), None, "one arming raised two events");
        assert_eq!(cq.len(), 3);
    }

    #[test]
    fn solicited_arming_skips_plain_completions() {
        let (cq, ch) = cq_on_channel(8);
        cq.req_notify(true);
        cq.push(wc(1, WcStatus::Success), false);
        assert_eq!(ch.get(NOW), None);
        cq.push(wc(2, WcStatus::Success), true);
        assert_eq!(ch.get(NOW), Some(7));
        cq.req_notify(true);
        cq.push(wc(3, WcStatus::WrFlushErr), false);
        assert_eq!(
            ch.get(NOW),
            Some(7),
            "an error completion must fire a solicited arming"
        );
        // Solicited then next: next wins.
        cq.req_notify(true);
        cq.req_notify(false);
        cq.push(wc(4, WcStatus::Success), false);
        assert_eq!(ch.get(NOW), Some(7));
    }

    #[test]
    fn overrun_reports_once_wakes_the_armed_waiter_and_poll_fails() {
        let (cq, ch) = cq_on_channel(2);
        assert!(!cq.push(wc(1, WcStatus::Success), false));
        assert!(!cq.push(wc(2, WcStatus::Success), false));
        cq.req_notify(false);
        assert!(
            cq.push(wc(3, WcStatus::Success), false),
            "first overrun not reported"
        );
        assert!(
            !cq.push(wc(4, WcStatus::Success), false),
            "overrun reported twice"
        );
        assert_eq!(ch.get(NOW), Some(7));
        let mut out = [WorkCompletion::default(); 4];
        assert_eq!(cq.poll(&mut out).unwrap_err().errno(), libc::EIO);
    }
}
