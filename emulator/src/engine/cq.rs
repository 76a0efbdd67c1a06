//! Completion queues: bounded FIFOs of work completions filled by the engine, with the
//! arming state of `ibv_req_notify_cq` when they report to a completion channel.
//!
//! Lock-free: whoever completes work (the engine thread, or an application thread receiving
//! for its device) pushes and applications poll without a lock between them. The entries go
//! through a crossbeam channel whose unbounded flavour allocates blocks of slots as
//! completions come and go (a 64k-entry CQ costs nothing until it fills), with a counter
//! that enforces the capacity; the arming is one atomic. A completion made by the receive
//! of an application's own poll of the CQ skips the queue while it is empty
//! (`cq_hand_off`).
//!
//! A QP moved to RESET takes its completions out of its CQs, as mlx5's provider does
//! (`purge`): each completion carries the number of resets its QP had gone through when it
//! was queued, and polls skip those of an older reset count, so no completion is reordered
//! and pushes stay lock-free.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crossbeam_channel::{Receiver, Sender};
use softverbs_api::{VerbsError, VerbsResult, WcStatus, WorkCompletion};

use super::comp_channel::CompChannel;

/// What the next completion must be to raise a completion event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Arm {
    /// Not armed: completions raise no event.
    Off = 0,
    /// The next solicited completion (or unsuccessful one, as the IB spec adds).
    Solicited = 1,
    /// The next completion of any kind.
    Next = 2,
}

impl Arm {
    fn from_u8(v: u8) -> Arm {
        match v {
            1 => Arm::Solicited,
            2 => Arm::Next,
            _ => Arm::Off,
        }
    }

    /// Whether a completion fires this arming. IB spec: a solicited-only arming fires on a
    /// solicited completion and on any unsuccessful one (flushes included).
    fn fired_by(self, wc: &WorkCompletion, solicited: bool) -> bool {
        match self {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => solicited || wc.status != WcStatus::Success,
        }
    }
}

/// A completion queue of fixed capacity. On overrun the CQ enters an error state (as a real
/// CQ does) instead of dropping completions silently: every later poll fails with EIO, and
/// the engine raises `IBV_EVENT_CQ_ERR` for it.
pub struct CompletionQueue {
    sender: Sender<Queued>,
    receiver: Receiver<Queued>,
    /// Completions queued, or being queued: a push takes its place here before it sends, so
    /// the capacity holds however many threads push at once, and a poll of an empty CQ (what
    /// a busy-polling application does most) is one load.
    queued: AtomicUsize,
    /// An [`Arm`].
    arm: AtomicU8,
    /// Completions it holds at most (`ibv_resize_cq` changes it).
    capacity: AtomicUsize,
    overrun: AtomicBool,
    id: u32,
    /// The context that created it (whose async queue gets its CQ_ERR event).
    owner: u64,
    channel: Option<Arc<CompChannel>>,
    /// Set while `purged` has entries: the one load a poll pays when nothing was purged.
    purging: AtomicBool,
    /// QP number -> its reset count at its last purge: its completions queued with a lower
    /// count are skipped. At most one entry per QP that uses the CQ; emptied whenever the
    /// queue is (nothing older can be left then).
    purged: Mutex<HashMap<u32, u32>>,
}

/// A completion and the reset count of its QP when it was queued.
struct Queued {
    wc: WorkCompletion,
    resets: u32,
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
        let (sender, receiver) = crossbeam_channel::unbounded();
        CompletionQueue {
            sender,
            receiver,
            queued: AtomicUsize::new(0),
            arm: AtomicU8::new(Arm::Off as u8),
            capacity: AtomicUsize::new(capacity),
            overrun: AtomicBool::new(false),
            id,
            owner,
            channel,
            purging: AtomicBool::new(false),
            purged: Mutex::new(HashMap::new()),
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Acquire)
    }

    /// `ibv_resize_cq`: the CQ now holds up to `capacity` completions, keeping those queued;
    /// EINVAL below the number queued (as rxe's `rxe_cq_chk_attr`), EIO once overrun. A
    /// push racing with a shrink may find the CQ full: it overruns, as it would after.
    pub fn resize(&self, capacity: usize) -> VerbsResult<()> {
        if self.is_overrun() {
            return Err(VerbsError::Io {
                errno: libc::EIO,
                message: "resizing a completion queue that overran".into(),
            });
        }
        let queued = self.len();
        if capacity < queued {
            return Err(VerbsError::inval(format!(
                "resize_cq to {capacity}: {queued} completions are queued"
            )));
        }
        self.capacity.store(capacity, Ordering::Release);
        Ok(())
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
        self.push_after_resets(wc, solicited, 0)
    }

    /// [`CompletionQueue::push`] of a completion whose QP had been reset `resets` times
    /// (see [`CompletionQueue::purge`]).
    pub(crate) fn push_after_resets(
        &self,
        wc: WorkCompletion,
        solicited: bool,
        resets: u32,
    ) -> bool {
        if self.overrun.load(Ordering::Acquire) {
            return false;
        }
        // Straight to the poll this thread receives for, if it polls this CQ and nothing is
        // queued ahead (see cq_hand_off); queued otherwise.
        if self.queued.load(Ordering::Acquire) == 0
            && super::cq_hand_off::take(super::cq_hand_off::address(self), &wc)
        {
            self.raise_if_armed(&wc, solicited);
            return false;
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            let first = !self.overrun.swap(true, Ordering::AcqRel);
            // An armed waiter is woken too, so that it polls and sees the error rather
            // than wait for an event that can no longer come.
            if self.arm.swap(Arm::Off as u8, Ordering::SeqCst) != Arm::Off as u8 {
                self.raise();
            }
            return first;
        }
        // Cannot fail: the CQ holds the receiving end.
        let _ = self.sender.send(Queued { wc, resets });
        self.raise_if_armed(&wc, solicited);
        false
    }

    /// After `wc` was added: raises the completion event if the CQ is armed for it.
    fn raise_if_armed(&self, wc: &WorkCompletion, solicited: bool) {
        if self.channel.is_none() {
            // Nobody can arm it (see req_notify): no fence, no event.
            return;
        }
        // The completion is visible before the arming is read, as `req_notify` arms before
        // its caller polls again: either this push sees the arming, or that poll sees the
        // completion (a fence on both sides; at worst an event for a completion the poll
        // already took, which the consumer's next poll finds empty).
        fence(Ordering::SeqCst);
        let armed = self.arm.load(Ordering::SeqCst);
        // One event per arming, however many pushes see it at once.
        if Arm::from_u8(armed).fired_by(wc, solicited)
            && self
                .arm
                .compare_exchange(armed, Arm::Off as u8, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.raise();
        }
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
        let _ = self
            .arm
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                let wider = match (Arm::from_u8(now), solicited_only) {
                    (_, false) | (Arm::Next, true) => Arm::Next,
                    _ => Arm::Solicited,
                };
                Some(wider as u8)
            });
        // Pairs with the fence in `push`: the caller's next poll sees every completion whose
        // push did not see this arming.
        fence(Ordering::SeqCst);
    }

    /// Takes out the completions of QP `qpn` queued before its reset number `resets`: the QP
    /// went to RESET (ibv_modify_qp), which empties its CQs of it on mlx5. The caller holds
    /// the QP's lock, under which its completions are pushed, so none older can follow.
    /// They leave at the next polls (until then they still count in [`Self::len`] and
    /// against the capacity).
    pub(crate) fn purge(&self, qpn: u32, resets: u32) {
        let mut purged = self.purged.lock();
        purged.insert(qpn, resets);
        self.purging.store(true, Ordering::Release);
    }

    /// True if `q` was purged (see [`Self::purge`]).
    fn is_purged(&self, q: &Queued) -> bool {
        self.purged
            .lock()
            .get(&q.wc.qp_num)
            .is_some_and(|&resets| q.resets < resets)
    }

    /// Forgets the purges once the queue is empty: nothing they apply to is left.
    fn end_purges_if_empty(&self) {
        let mut purged = self.purged.lock();
        if self.queued.load(Ordering::Acquire) == 0 {
            purged.clear();
            self.purging.store(false, Ordering::Release);
        }
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
                message: format!("completion queue overrun (capacity {})", self.capacity()),
            });
        }
        let queued = self.queued.load(Ordering::Acquire);
        if queued == 0 {
            return Ok(0);
        }
        let purging = self.purging.load(Ordering::Acquire);
        let mut n = 0;
        let mut skipped = 0;
        // No more receives than were counted: a receive that finds the channel empty costs
        // a full fence (crossbeam's), which every poll that emptied the CQ paid.
        while n < out.len() && n + skipped < queued {
            // A push between its count and its send is found by the next poll, as if it
            // had come just after this one.
            let Ok(q) = self.receiver.try_recv() else {
                break;
            };
            if purging && self.is_purged(&q) {
                skipped += 1;
                continue;
            }
            out[n] = q.wc;
            n += 1;
        }
        if n + skipped > 0 {
            self.queued.fetch_sub(n + skipped, Ordering::AcqRel);
        }
        if purging {
            self.end_purges_if_empty();
        }
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

impl super::cq_hand_off::HandOffTarget for CompletionQueue {
    fn requeue(&self, wc: WorkCompletion) {
        // Past the hand-off: this thread no longer receives for a poll of it.
        self.push(wc, false);
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

    fn of_qp(qpn: u32, wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            qp_num: qpn,
            ..wc(wr_id, WcStatus::WrFlushErr)
        }
    }

    #[test]
    fn a_purge_takes_out_the_older_completions_of_one_qp_and_keeps_the_order_of_the_rest() {
        let cq = CompletionQueue::new(16);
        for (qpn, wr_id) in [(5, 1), (6, 2), (5, 3), (6, 4)] {
            assert!(!cq.push_after_resets(of_qp(qpn, wr_id), false, 0));
        }
        cq.purge(5, 1);
        // Queued after the reset: stays.
        assert!(!cq.push_after_resets(of_qp(5, 5), false, 1));
        let mut out = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!([out[0].wr_id, out[1].wr_id], [2, 4]);
        assert_eq!(cq.poll(&mut out).unwrap(), 1);
        assert_eq!(out[0].wr_id, 5);
        assert!(cq.is_empty());
        // The queue emptied: the purge is forgotten, and a later one works again.
        assert!(cq.purged.lock().is_empty());
        assert!(!cq.push_after_resets(of_qp(5, 6), false, 1));
        cq.purge(5, 2);
        assert_eq!(cq.poll(&mut out).unwrap(), 0);
        assert!(cq.is_empty());
    }

    #[test]
    fn completions_pushed_from_many_threads_all_arrive_once_in_each_threads_order() {
        const THREADS: u64 = 4;
        const EACH: u64 = 20_000;
        let cq = Arc::new(CompletionQueue::new((THREADS * EACH) as usize));
        let pushers: Vec<_> = (0..THREADS)
            .map(|t| {
                let cq = cq.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        assert!(!cq.push(wc(t << 32 | i, WcStatus::Success), false));
                    }
                })
            })
            .collect();
        let mut next = [0u64; THREADS as usize];
        let mut out = [WorkCompletion::default(); 16];
        let started = std::time::Instant::now();
        while next.iter().sum::<u64>() < THREADS * EACH {
            assert!(started.elapsed() < Duration::from_secs(30), "{next:?}");
            let n = cq.poll(&mut out).unwrap();
            for w in &out[..n] {
                let (t, i) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
                assert_eq!(i, next[t], "thread {t}'s completions out of order");
                next[t] += 1;
            }
        }
        for p in pushers {
            p.join().unwrap();
        }
        assert_eq!(cq.poll(&mut out).unwrap(), 0);
        assert!(cq.is_empty());
    }

    #[test]
    fn a_consumer_that_arms_then_polls_never_misses_a_completion() {
        // The consumer's loop of ibv_req_notify_cq(3): poll to empty, arm, poll once more,
        // and only then wait for the event. A lost wake-up hangs the wait (bounded here).
        const ROUNDS: u64 = 20_000;
        let (cq, ch) = cq_on_channel(4);
        let cq = Arc::new(cq);
        let producer = {
            let cq = cq.clone();
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    // Each push lands while the consumer drains, arms and polls again.
                    while !cq.is_empty() {
                        std::hint::spin_loop();
                    }
                    assert!(!cq.push(wc(i, WcStatus::Success), false));
                }
            })
        };
        let mut out = [WorkCompletion::default(); 4];
        let mut got = 0;
        while got < ROUNDS {
            let n = cq.poll(&mut out).unwrap();
            if n > 0 {
                got += n as u64;
                continue;
            }
            cq.req_notify(false);
            let n = cq.poll(&mut out).unwrap();
            if n > 0 {
                got += n as u64;
                continue;
            }
            assert_eq!(
                ch.get(Some(Duration::from_secs(10))),
                Some(7),
                "no event after {got} completions"
            );
        }
        producer.join().unwrap();
    }

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
