//! Completions handed straight to the poll that made them: an application thread that polls
//! an empty CQ receives for its device (`app_poll`), and the completions that receive
//! produces for that CQ go into the poll's own output instead of through the queue.
//!
//! Why: the CQ's queue is lock-free between its pushers and its pollers, and a completion
//! that goes through it costs seven locked instructions (three to push, four to poll), each
//! waiting for the stores before it, plus the channel's own work: a SEND ping-pong's every
//! message paid that on its critical path, between the datagram's arrival and the answer.
//!
//! The queue's order holds: a completion is handed over only while the queue is empty, so
//! nothing queued before it is overtaken, and those pushed after the poll's output is full
//! (or after anything else was queued) go to the queue, which the poll reads after them. A
//! completion handed over was added to the CQ and polled at once: it raises the completion
//! event an arming asks for as one that was queued does, and it cannot overrun the CQ.

use std::cell::{Cell, RefCell};

use softverbs_api::WorkCompletion;

/// What completions are handed over from: a CQ, which takes back those of a receive that
/// unwound.
pub(crate) trait HandOffTarget {
    /// Queues `wc` as a push does.
    fn requeue(&self, wc: WorkCompletion);
}

/// The poll a thread is receiving for, if any. Cells, so that arming it and finding nothing
/// taken (what most polls do: they find nothing to receive) touch no borrow flag.
struct HandOff {
    /// The CQ polled (its address: identity only, never dereferenced), 0 for none.
    cq: Cell<usize>,
    /// Completions the poll's output has room for.
    room: Cell<usize>,
    /// How many were handed over so far.
    count: Cell<usize>,
    /// Those, in order.
    taken: RefCell<Vec<WorkCompletion>>,
}

thread_local! {
    static HAND_OFF: HandOff = const {
        HandOff {
            cq: Cell::new(0),
            room: Cell::new(0),
            count: Cell::new(0),
            taken: RefCell::new(Vec::new()),
        }
    };
}

/// The identity of `target`: its address, never dereferenced.
pub(crate) fn address<T: ?Sized>(target: &T) -> usize {
    std::ptr::from_ref(target).cast::<()>() as usize
}

/// Runs `receive` (a receive for the device of `cq`, by this thread) with the completions it
/// makes for `cq`, while the queue is empty and up to `out.len()` of them, handed straight to
/// `out`; returns what `receive` returned and how many completions `out` got, from index 0.
/// `receive` arms the hand-off through the [`HandOffOnData`] it gets once it has a datagram:
/// most receives of a polling application find none, and need not arm it.
pub(crate) fn receive_into(
    cq: &dyn HandOffTarget,
    out: &mut [WorkCompletion],
    receive: impl FnOnce(&mut HandOffOnData<'_>) -> usize,
) -> (usize, usize) {
    let mut hand_off = HandOffOnData {
        cq,
        room: out.len(),
        armed: None,
    };
    let received = receive(&mut hand_off);
    let handed = hand_off.armed.map_or(0, |armed| armed.finish(out));
    (received, handed)
}

/// A poll's hand-off, armed by the receive once it has a datagram.
pub(crate) struct HandOffOnData<'a> {
    cq: &'a dyn HandOffTarget,
    room: usize,
    armed: Option<Armed<'a>>,
}

impl HandOffOnData<'_> {
    /// Arms the hand-off, if it is not yet.
    pub(crate) fn arm(&mut self) {
        if self.armed.is_none() {
            self.armed = Some(Armed::arm(self.cq, self.room));
        }
    }
}

/// One poll's hand-off, armed on this thread; whatever was armed before (a poll inside the
/// receive of another) comes back when it ends.
struct Armed<'a> {
    cq: &'a dyn HandOffTarget,
    outer: (usize, usize, usize),
    finished: bool,
}

impl<'a> Armed<'a> {
    fn arm(cq: &'a dyn HandOffTarget, room: usize) -> Armed<'a> {
        let outer = HAND_OFF.with(|h| {
            (
                h.cq.replace(address(cq)),
                h.room.replace(room),
                h.count.replace(0),
            )
        });
        Armed {
            cq,
            outer,
            finished: false,
        }
    }

    /// Disarms and moves what was handed over to `out`; returns how many.
    fn finish(mut self, out: &mut [WorkCompletion]) -> usize {
        self.finished = true;
        self.disarm(|taken| out[..taken.len()].copy_from_slice(taken))
    }

    /// Restores the outer state and gives this poll's completions to `to`; returns how many.
    fn disarm(&self, to: impl FnOnce(&[WorkCompletion])) -> usize {
        HAND_OFF.with(|h| {
            let (cq, room, count) = self.outer;
            h.cq.set(cq);
            h.room.set(room);
            let handed = h.count.replace(count);
            if handed > 0 {
                let mut taken = h.taken.borrow_mut();
                let first = taken.len() - handed;
                to(&taken[first..]);
                taken.truncate(first);
            }
            handed
        })
    }
}

impl Drop for Armed<'_> {
    /// A receive that unwound: what it handed over goes to the queue after all, rather than
    /// be lost or go to a later poll.
    fn drop(&mut self) {
        if !self.finished {
            // Copied out first: a requeue is a push, which looks at the hand-off again.
            let mut left = Vec::new();
            self.disarm(|taken| left.extend_from_slice(taken));
            for wc in left {
                self.cq.requeue(wc);
            }
        }
    }
}

/// Takes `wc`, a completion about to be pushed to the CQ at `cq` (its [`address`]) whose
/// queue is empty, if this thread is receiving for a poll of it whose output has room;
/// false if it must be queued.
///
/// Any push calls this, a thread's last ones included: once the thread's storage is gone
/// (its destructors may drop QPs, which flush their work) nothing is taken.
pub(crate) fn take(cq: usize, wc: &WorkCompletion) -> bool {
    HAND_OFF
        .try_with(|h| {
            let count = h.count.get();
            if h.cq.get() != cq || count >= h.room.get() {
                return false;
            }
            h.taken.borrow_mut().push(*wc);
            h.count.set(count + 1);
            true
        })
        .unwrap_or(false)
}
