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

use super::cq::CompletionQueue;

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

fn address(cq: &CompletionQueue) -> usize {
    std::ptr::from_ref(cq) as usize
}

/// Runs `receive` (a receive for the device of `cq`, by this thread) with the completions it
/// makes for `cq`, while the queue is empty and up to `out.len()` of them, handed straight to
/// `out`; returns what `receive` returned and how many completions `out` got, from index 0.
/// `receive` arms the hand-off through the [`HandOffOnData`] it gets once it has a datagram:
/// most receives of a polling application find none, and need not arm it.
pub(crate) fn receive_into(
    cq: &CompletionQueue,
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
    cq: &'a CompletionQueue,
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
    cq: &'a CompletionQueue,
    outer: (usize, usize, usize),
    finished: bool,
}

impl<'a> Armed<'a> {
    fn arm(cq: &'a CompletionQueue, room: usize) -> Armed<'a> {
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
            self.disarm(|taken| {
                for wc in taken {
                    self.cq.push(*wc, false);
                }
            });
        }
    }
}

/// Takes `wc`, a completion about to be pushed to `cq` whose queue is empty, if this thread
/// is receiving for a poll of `cq` whose output has room; false if it must be queued.
pub(crate) fn take(cq: &CompletionQueue, wc: &WorkCompletion) -> bool {
    HAND_OFF.with(|h| {
        let count = h.count.get();
        if h.cq.get() != address(cq) || count >= h.room.get() {
            return false;
        }
        h.taken.borrow_mut().push(*wc);
        h.count.set(count + 1);
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_api::{WcOpcode, WcStatus};

    fn wc(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 8,
            ..WorkCompletion::default()
        }
    }

    fn ids(wcs: &[WorkCompletion]) -> Vec<u64> {
        wcs.iter().map(|w| w.wr_id).collect()
    }

    #[test]
    fn completions_of_the_polled_cq_go_to_the_poll_in_order_until_its_output_is_full() {
        let (cq, other) = (CompletionQueue::new(16), CompletionQueue::new(16));
        let mut out = [WorkCompletion::default(); 2];
        let (received, handed) = receive_into(&cq, &mut out, |h| {
            h.arm();
            for id in 1..=3 {
                cq.push(wc(id), false);
            }
            other.push(wc(9), false);
            7
        });
        assert_eq!((received, handed), (7, 2));
        assert_eq!(ids(&out), [1, 2]);
        // The third found the output full: queued, and polled after them.
        let mut rest = [WorkCompletion::default(); 4];
        assert_eq!(cq.poll(&mut rest).unwrap(), 1);
        assert_eq!(rest[0].wr_id, 3);
        assert_eq!(other.poll(&mut rest).unwrap(), 1, "another CQ's is queued");
        assert_eq!(rest[0].wr_id, 9);
    }

    #[test]
    fn a_receive_that_has_not_armed_the_hand_off_queues() {
        let cq = CompletionQueue::new(16);
        let mut out = [WorkCompletion::default(); 4];
        let (_, handed) = receive_into(&cq, &mut out, |_| {
            cq.push(wc(1), false);
            0
        });
        assert_eq!((handed, cq.len()), (0, 1));
    }

    #[test]
    fn nothing_overtakes_a_completion_already_queued() {
        let cq = CompletionQueue::new(16);
        cq.push(wc(1), false);
        let mut out = [WorkCompletion::default(); 4];
        let (_, handed) = receive_into(&cq, &mut out, |h| {
            h.arm();
            cq.push(wc(2), false);
            1
        });
        assert_eq!(handed, 0);
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!(ids(&out[..2]), [1, 2]);
    }

    #[test]
    fn a_completion_handed_over_raises_the_event_its_arming_asks_for() {
        use super::super::comp_channel::CompChannel;
        use std::sync::Arc;
        use std::time::Duration;
        let channel = Arc::new(CompChannel::new().unwrap());
        channel.attach(7);
        let cq = CompletionQueue::for_context(16, 7, 1, Some(channel.clone()));
        cq.req_notify(false);
        let mut out = [WorkCompletion::default(); 4];
        let (_, handed) = receive_into(&cq, &mut out, |h| {
            h.arm();
            cq.push(wc(1), false);
            cq.push(wc(2), false);
            1
        });
        assert_eq!(handed, 2);
        assert_eq!(channel.get(Some(Duration::ZERO)), Some(7));
        assert_eq!(
            channel.get(Some(Duration::ZERO)),
            None,
            "one event per arming"
        );
        assert!(cq.is_empty());
    }

    #[test]
    fn a_poll_inside_another_keeps_its_own_and_a_receive_that_unwinds_queues_them() {
        let (outer_cq, inner_cq) = (CompletionQueue::new(16), CompletionQueue::new(16));
        let mut outer = [WorkCompletion::default(); 4];
        let (_, handed) = receive_into(&outer_cq, &mut outer, |h| {
            h.arm();
            outer_cq.push(wc(1), false);
            let mut inner = [WorkCompletion::default(); 4];
            let (_, inner_handed) = receive_into(&inner_cq, &mut inner, |h| {
                h.arm();
                inner_cq.push(wc(2), false);
                outer_cq.push(wc(3), false);
                1
            });
            assert_eq!((inner_handed, inner[0].wr_id), (1, 2));
            outer_cq.push(wc(4), false);
            1
        });
        // 3 came while the inner poll was armed: queued, and 4 followed it there.
        assert_eq!((handed, outer[0].wr_id), (1, 1));
        assert_eq!(outer_cq.poll(&mut outer).unwrap(), 2);
        assert_eq!(ids(&outer[..2]), [3, 4]);

        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            receive_into(&outer_cq, &mut outer, |h| {
                h.arm();
                outer_cq.push(wc(5), false);
                panic!("a receive that fails half-way");
            })
        }));
        assert!(unwound.is_err());
        outer_cq.push(wc(6), false);
        assert_eq!(outer_cq.poll(&mut outer).unwrap(), 2);
        assert_eq!(ids(&outer[..2]), [5, 6]);
    }

    #[test]
    fn only_the_receiving_thread_hands_over_and_only_while_it_receives() {
        let cq = std::sync::Arc::new(CompletionQueue::new(16));
        let mut out = [WorkCompletion::default(); 4];
        let (_, handed) = receive_into(&cq, &mut out, |h| {
            h.arm();
            let pusher = cq.clone();
            std::thread::spawn(move || pusher.push(wc(5), false))
                .join()
                .unwrap();
            1
        });
        assert_eq!(handed, 0, "another thread's push is queued");
        cq.push(wc(6), false);
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!(ids(&out[..2]), [5, 6]);
    }
}
