//! Device-level timers: work that belongs to no QP (a connection manager's retries, any
//! device-wide protocol) scheduled on the device's clock and run by its engine thread.
//!
//! Per-QP deadlines stay with the transport (`TransportQp::next_deadline_ns`); these are
//! the others. Jobs run on the engine thread, in deadline order (ties in scheduling
//! order), without any device lock held: a job may schedule or cancel timers and call the
//! device's verbs.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

/// Most timers armed on one device at a time: scheduling past it fails, so that a peer
/// that makes a protocol arm timers cannot make the device grow without bound.
pub const MAX_DEVICE_TIMERS: usize = 4096;

/// What a device timer runs when it fires: it gets the time it fired at, in ns on the
/// device's clock.
pub type TimerJob = Box<dyn FnOnce(u64) + Send>;

/// Names an armed timer, to cancel it. Never reused within a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

/// [`DeviceTimers::schedule`] failed: [`MAX_DEVICE_TIMERS`] are armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_DEVICE_TIMERS} device timers are armed already")]
pub struct TimersFull;

#[derive(Default)]
struct Armed {
    /// (deadline, id) -> job: the order they fire in.
    by_deadline: BTreeMap<(u64, TimerId), TimerJob>,
    /// id -> deadline, to cancel.
    deadline_of: HashMap<TimerId, u64>,
    next_id: u64,
}

/// The device-level timers of one device.
#[derive(Default)]
pub struct DeviceTimers {
    armed: Mutex<Armed>,
}

impl DeviceTimers {
    /// Arms a timer that runs `job` once the clock reaches `at_ns`. The caller tells the
    /// engine thread about a deadline earlier than its next one (see
    /// `Device::schedule_timer`).
    pub fn schedule(&self, at_ns: u64, job: TimerJob) -> Result<TimerId, TimersFull> {
        let mut armed = self.armed.lock();
        if armed.deadline_of.len() >= MAX_DEVICE_TIMERS {
            return Err(TimersFull);
        }
        let id = TimerId(armed.next_id);
        armed.next_id += 1;
        armed.by_deadline.insert((at_ns, id), job);
        armed.deadline_of.insert(id, at_ns);
        Ok(id)
    }

    /// Disarms timer `id`; false if it already fired or was cancelled.
    pub fn cancel(&self, id: TimerId) -> bool {
        let mut armed = self.armed.lock();
        match armed.deadline_of.remove(&id) {
            Some(at_ns) => armed.by_deadline.remove(&(at_ns, id)).is_some(),
            None => false,
        }
    }

    /// Timers armed.
    pub fn len(&self) -> usize {
        self.armed.lock().deadline_of.len()
    }

    /// True if no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earliest deadline armed.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.armed
            .lock()
            .by_deadline
            .keys()
            .next()
            .map(|&(at_ns, _)| at_ns)
    }

    /// Runs every job due at `now_ns`, earliest first, each without the lock held (a job
    /// may arm or cancel timers; one armed already due runs in this call too). Returns
    /// the earliest deadline still armed. Call when the clock reaches
    /// [`DeviceTimers::next_deadline_ns`].
    pub fn fire_due(&self, now_ns: u64) -> Option<u64> {
        loop {
            let job = {
                let mut armed = self.armed.lock();
                let first = armed.by_deadline.first_key_value().map(|(&key, _)| key);
                match first {
                    Some((at_ns, id)) if at_ns <= now_ns => {
                        armed.deadline_of.remove(&id);
                        armed.by_deadline.remove(&(at_ns, id))
                    }
                    _ => return first.map(|(at_ns, _)| at_ns),
                }
            };
            if let Some(job) = job {
                job(now_ns);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// (tag, fired at) of each job run.
    type Log = Arc<Mutex<Vec<(u32, u64)>>>;

    fn recorder() -> (Log, impl Fn(u32) -> TimerJob) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let make = {
            let log = log.clone();
            move |tag: u32| -> TimerJob {
                let log = log.clone();
                Box::new(move |now| log.lock().push((tag, now)))
            }
        };
        (log, make)
    }

    #[test]
    fn due_timers_fire_in_deadline_order_and_the_rest_wait() {
        let timers = DeviceTimers::default();
        let (log, job) = recorder();
        timers.schedule(300, job(3)).unwrap();
        timers.schedule(100, job(1)).unwrap();
        timers.schedule(100, job(2)).unwrap();
        timers.schedule(900, job(9)).unwrap();
        assert_eq!(timers.next_deadline_ns(), Some(100));
        assert_eq!(timers.fire_due(50), Some(100), "nothing is due yet");
        assert!(log.lock().is_empty());
        assert_eq!(timers.fire_due(300), Some(900));
        assert_eq!(*log.lock(), [(1, 300), (2, 300), (3, 300)]);
        assert_eq!(timers.len(), 1);
    }

    #[test]
    fn a_cancelled_timer_never_fires_and_cancels_once() {
        let timers = DeviceTimers::default();
        let (log, job) = recorder();
        let a = timers.schedule(10, job(1)).unwrap();
        let b = timers.schedule(20, job(2)).unwrap();
        assert!(timers.cancel(a));
        assert!(!timers.cancel(a));
        assert_eq!(timers.fire_due(100), None);
        assert_eq!(*log.lock(), [(2, 100)]);
        assert!(!timers.cancel(b), "it fired already");
        assert!(timers.is_empty());
    }

    #[test]
    fn a_job_may_arm_the_next_timer() {
        let timers = Arc::new(DeviceTimers::default());
        let fired = Arc::new(Mutex::new(Vec::new()));
        let (t, f) = (timers.clone(), fired.clone());
        timers
            .schedule(
                10,
                Box::new(move |now| {
                    f.lock().push(now);
                    let f2 = f.clone();
                    t.schedule(now + 5, Box::new(move |n| f2.lock().push(n)))
                        .unwrap();
                }),
            )
            .unwrap();
        assert_eq!(timers.fire_due(12), Some(17));
        assert_eq!(timers.fire_due(17), None);
        assert_eq!(*fired.lock(), [12, 17]);
    }

    #[test]
    fn scheduling_past_the_limit_fails() {
        let timers = DeviceTimers::default();
        for i in 0..MAX_DEVICE_TIMERS {
            timers.schedule(i as u64, Box::new(|_| {})).unwrap();
        }
        assert_eq!(timers.schedule(0, Box::new(|_| {})), Err(TimersFull));
        assert_eq!(timers.fire_due(u64::MAX), None);
        assert!(timers.schedule(0, Box::new(|_| {})).is_ok());
    }
}
