//! The engine thread of a device: receives datagrams (handing each to the receive
//! pipeline, `receive`), fires per-QP transport deadlines and device-level timers, and
//! shares the link with polling applications. It is what makes the responder progress
//! while the application sleeps. `DeviceRuntime` owns the thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use std::thread::JoinHandle;

use softverbs_api::{VerbsError, VerbsResult};

use super::cq_hand_off::HandOffOnData;
use super::device::Device;
use super::receive_batch::LastReceive;
use super::timer_slack::{nap_slack, TimerSlack};

/// Longest the thread sleeps in one receive: bounds how late a deadline armed by another
/// thread (a post) can fire, and how long shutdown takes.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// Datagrams taken off the link per receive call.
const RX_BATCH: usize = 64;
/// Receive calls per wake-up before deadlines are looked at again.
const RX_ROUNDS: usize = 8;

/// The engine's first nap while an application polls. When an application polled during
/// the engine's last nap or wait, the engine leaves the link to it and only naps and fires
/// timers: on a small machine a woken engine thread would take the CPU from the very thread
/// that is doing its work. Once a nap passes without a poll (the application went to sleep),
/// or the application arms a CQ to sleep on, the engine waits on the link again, so the
/// responder progresses without the application.
const APP_POLL_NAP: Duration = Duration::from_micros(100);
/// The longest nap: each nap the application polled through doubles the next one up to
/// this, the bound of any wait of this thread (`MAX_SLEEP`), so timers fire no later than
/// they would otherwise. Each wake-up takes the CPU from a polling thread for a context
/// switch (at 100 us naps, a 64 KiB WRITE stream lost 8% of a core to them), and on a
/// two-core machine it lands in a round trip of a ping-pong: at 1 ms the two engine threads'
/// 2,000 wake-ups a second reached 1 in 100 of a loopback SEND ping-pong's round trips,
/// which made its t_99 2-4 times its median. The price is a later take-over of the link
/// by an application that stops polling without arming a CQ first: up to this plus the
/// nap's timer slack (`timer_slack`, at most 4 ms), 9 ms in all.
const APP_POLL_NAP_MAX: Duration = MAX_SLEEP;

/// The thread body; returns when the device shuts down.
pub(crate) fn run(dev: &Arc<Device>) {
    let _ = dev.engine_thread.set(std::thread::current());
    let mut slack = TimerSlack::of_this_thread();
    let mut next_deadline_ns = u64::MAX;
    let mut seen_polls = dev.app_polls.load(Ordering::Relaxed);
    let mut nap = NapBackoff::default();
    let mut last_traffic_ns: Option<u64> = None;
    // A blocking link's one receiver is this thread, without `rx_lock`.
    let mut last_qp = super::qp_entry::LastQp::default();
    while !dev.shutdown.load(Ordering::Acquire) {
        let now = dev.clock.now_ns();
        let hint = dev.deadline_hint_ns.swap(u64::MAX, Ordering::AcqRel);
        next_deadline_ns = next_deadline_ns.min(hint);
        let to_deadline = Duration::from_nanos(next_deadline_ns.saturating_sub(now));
        let sleep = to_deadline.min(MAX_SLEEP);
        let polls = dev.app_polls.load(Ordering::Relaxed);
        let app_sleeping = dev.app_sleeping.swap(false, Ordering::SeqCst);
        let app_polling = polls != seen_polls && !app_sleeping;
        seen_polls = polls;
        // A pollable link is polled for a while after its last datagram (see
        // Link::poll_before_sleep): a stream's next datagram then finds this thread awake.
        let streaming = last_traffic_ns.is_some_and(|t| {
            now.saturating_sub(t) < dev.link.poll_before_sleep().as_nanos() as u64
        });
        let received = if dev.link.pollable() && app_polling {
            dev.engine_napping.store(true, Ordering::SeqCst);
            // Checked again after raising the flag: an application arming a CQ either sees
            // the flag (and unparks) or stored its own before this load (SeqCst both).
            if !dev.app_sleeping.load(Ordering::SeqCst) {
                let this_nap = sleep.min(nap.next());
                // Its end may wait for a timer interrupt due anyway (see timer_slack).
                slack.set(nap_slack(this_nap, to_deadline));
                std::thread::park_timeout(this_nap);
            }
            // Cleared before the flush: an application that defers ACKs after this sees the
            // flag down and sends them itself (SeqCst with DeferredAcks' pending flag).
            dev.engine_napping.store(false, Ordering::SeqCst);
            // ACKs the application deferred and has not sent since (it went quiet), and
            // those nobody asked for.
            dev.flush_owed_acks();
            Ok(0)
        } else if dev.link.pollable() && streaming {
            nap.reset();
            slack.restore();
            let mut last = dev.rx_lock.lock();
            let got = receive_ready(dev, AckTiming::Now, &mut last, None);
            drop(last);
            match got {
                Ok(0) => {
                    super::poll_yield::after_empty_receive();
                }
                Ok(_) => super::poll_yield::poll_found_work(),
                Err(_) => {}
            }
            got
        } else if dev.link.pollable() {
            nap.reset();
            slack.restore();
            // The traffic paused: nothing may wait for this thread's sleep.
            dev.flush_lazy_acks();
            dev.link.wait_readable(sleep).and_then(|ready| {
                if ready {
                    let mut last = dev.rx_lock.lock();
                    receive_ready(dev, AckTiming::Now, &mut last, None)
                } else {
                    Ok(0)
                }
            })
        } else {
            // A blocking link: the ACKs nobody asked for leave when it has nothing waiting.
            let wait = if dev.lazy_acks.pending() {
                Duration::ZERO
            } else {
                sleep
            };
            dev.link.recv(wait).map(|got| match got {
                Some(datagram) => {
                    dev.receive(datagram.view(), &mut last_qp);
                    1
                }
                None => {
                    dev.flush_lazy_acks();
                    0
                }
            })
        };
        let got_traffic = matches!(received, Ok(n) if n > 0);
        if let Err(e) = received {
            tracing::warn!(device = %dev.config.name, error = %e, "receive failed");
            std::thread::sleep(MAX_SLEEP);
        }
        // One clock read for both: the end of this round's traffic, and the deadline check.
        let after = dev.clock.now_ns();
        if got_traffic {
            last_traffic_ns = Some(after);
        }
        if after >= next_deadline_ns {
            next_deadline_ns = fire_timers(dev);
        }
    }
    // The device closes: the ACKs its peers are owed leave first.
    dev.flush_owed_acks();
}

/// The lengths of the engine's successive naps while an application keeps polling: from
/// [`APP_POLL_NAP`], doubling up to [`APP_POLL_NAP_MAX`].
struct NapBackoff {
    coming: Duration,
}

impl Default for NapBackoff {
    fn default() -> Self {
        NapBackoff {
            coming: APP_POLL_NAP,
        }
    }
}

impl NapBackoff {
    /// The length of this nap; the next one is twice as long, within the bound.
    fn next(&mut self) -> Duration {
        let this = self.coming;
        self.coming = (this * 2).min(APP_POLL_NAP_MAX);
        this
    }

    /// The application stopped polling: the next nap is the shortest again.
    fn reset(&mut self) {
        self.coming = APP_POLL_NAP;
    }
}

/// When the ACKs of a receive batch leave.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AckTiming {
    /// At the end of the batch (the engine thread received it).
    Now,
    /// With the device's next send (an application thread received it: the completions
    /// reach it first; see `ack_hold`).
    Deferred,
}

impl LastReceive {
    /// The datagrams the first round of the next receive asks for: for an application
    /// thread after an empty receive one, or two while datagrams come in pairs (no more
    /// rounds), else a full batch.
    fn first_batch(&self, acks_leave: AckTiming) -> usize {
        match (acks_leave, self.found_nothing) {
            (AckTiming::Deferred, true) if self.pairs => 2,
            (AckTiming::Deferred, true) => 1,
            _ => RX_BATCH,
        }
    }

    /// Notes a receive that asked for `asked` datagrams first and got `total`.
    fn received(&mut self, asked: usize, total: usize) {
        if self.after_lone {
            self.pairs = total > 0;
        }
        self.after_lone = self.found_nothing && asked < RX_BATCH && total == 1;
        if asked == 2 && total >= 2 {
            // Both came in one call, as predicted.
            self.pairs = true;
        }
        self.found_nothing = total == 0;
    }
}

/// Hands what a pollable link has waiting to the QPs, up to [`RX_ROUNDS`] batches. The
/// caller holds `dev.rx_lock`, which guards `last`.
///
/// An application thread that finds a datagram after finding none (a ping-pong, or the
/// first datagram of a stream) receives just that one and returns to its CQ: a batch
/// receive would look for a second datagram, and finding none costs the kernel another
/// receive attempt (0.2 us of a ping-pong's half round trip). The application's next poll
/// takes whatever followed, in a full batch.
///
/// `hand_off`, for an application's poll: armed at the first datagram (see `cq_hand_off`).
fn receive_ready(
    dev: &Device,
    acks_leave: AckTiming,
    last: &mut LastReceive,
    mut hand_off: Option<&mut HandOffOnData<'_>>,
) -> std::io::Result<usize> {
    let mut total = 0;
    let mut result = Ok(());
    let first_batch = last.first_batch(acks_leave);
    // ACKs are held from the first datagram on: most receives of a polling application
    // find nothing, and need not set up the hold.
    let mut holding = false;
    for round in 0..RX_ROUNDS {
        let batch = if round == 0 { first_batch } else { RX_BATCH };
        // One clock read per batch of datagrams, not per datagram (see batch_now), begun by
        // the batch's first datagram: most receives of a polling application find none.
        let mut batch_begun = false;
        match dev.link.recv_ready(batch, &mut |d| {
            if !batch_begun {
                batch_begun = true;
                super::receive_batch::BATCH_NOW
                    .with(|n| n.set(super::receive_batch::BatchClock::Unread));
            }
            if !holding {
                super::ack_hold::begin();
                holding = true;
                if let Some(hand_off) = hand_off.as_deref_mut() {
                    hand_off.arm();
                }
            }
            dev.receive(d, &mut last.qp);
            // Whoever received the batch: a stream's window must not wait for its end.
            if let Some(mut due) = super::ack_hold::datagram_handled() {
                if dev.port_active() {
                    dev.send_packets(&mut due);
                }
            }
        }) {
            Ok(n) => {
                total += n;
                if n < batch || batch < RX_BATCH {
                    break;
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    last.received(first_batch, total);
    if holding {
        super::receive_batch::BATCH_NOW.with(|n| n.set(super::receive_batch::BatchClock::Outside));
    } else if total == 0 && acks_leave == AckTiming::Deferred {
        // Nothing came and nothing is held: the polling application's caller sends what
        // earlier receives deferred (`app_poll::poll_cq`), as below.
        return result.map(|()| 0);
    }
    // The newest ACK of each connection the batch acknowledged.
    let mut acks = if holding {
        super::ack_hold::end()
    } else {
        Vec::new()
    };
    if acks_leave == AckTiming::Deferred {
        dev.deferred_acks.defer(acks);
        // Only a napping engine thread is sure to send them soon if the application does
        // not: otherwise (it waits on the link, which this thread just emptied) send now.
        if !dev.engine_napping.load(Ordering::SeqCst) {
            dev.flush_deferred_acks();
        }
    } else if dev.port_active() {
        dev.send_packets(&mut acks);
    }
    result.map(|()| total)
}

/// Receives in the calling (application) thread if the link is pollable and nobody else
/// is receiving; returns the datagrams handled. Never waits. With `hand_off`, completions
/// for the CQ it names go to it (see `cq_hand_off`).
pub(crate) fn receive_if_free(dev: &Device, hand_off: Option<&mut HandOffOnData<'_>>) -> usize {
    if !dev.link.pollable() {
        return 0;
    }
    super::app_wait::note_app_poll(dev);
    let Some(mut last) = dev.rx_lock.try_lock() else {
        return 0;
    };
    match receive_ready(dev, AckTiming::Deferred, &mut last, hand_off) {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(device = %dev.config.name, error = %e, "receive failed");
            0
        }
    }
}

/// Fires every expired QP deadline and device timer; returns the earliest deadline still
/// armed.
fn fire_timers(dev: &Device) -> u64 {
    let entries: Vec<_> = dev.qps.read().values().cloned().collect();
    let mut earliest = u64::MAX;
    for entry in entries {
        let next = dev
            .on_qp(&entry, None, |qp, env, out| {
                if qp.next_deadline_ns().is_some_and(|d| d <= env.now_ns()) {
                    qp.on_timer(env, out);
                }
                qp.next_deadline_ns()
            })
            .flatten();
        if let Some(d) = next {
            earliest = earliest.min(d);
        }
    }
    if let Some(d) = dev.timers.fire_due(dev.clock.now_ns()) {
        earliest = earliest.min(d);
    }
    earliest
}

/// Owns the engine thread of a device; dropping the last context stops it.
pub(crate) struct DeviceRuntime {
    pub(crate) device: Arc<Device>,
    worker: Option<JoinHandle<()>>,
}

impl DeviceRuntime {
    pub(crate) fn start(device: Arc<Device>) -> VerbsResult<DeviceRuntime> {
        let worker_device = device.clone();
        let worker = std::thread::Builder::new()
            .name(format!("softverbs-{}", device.config.name))
            .spawn(move || run(&worker_device))
            .map_err(|e| VerbsError::Io {
                errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                message: format!("spawning the engine thread: {e}"),
            })?;
        Ok(DeviceRuntime {
            device,
            worker: Some(worker),
        })
    }
}

impl Drop for DeviceRuntime {
    fn drop(&mut self) {
        if !self.device.opened_here() {
            // A forked child: the engine thread is the parent's (there is none here to
            // join), and the device's socket and slot are the parent's too. The device
            // stays as it is (the missing thread keeps its reference forever).
            std::mem::forget(self.worker.take());
            return;
        }
        self.device.shutdown.store(true, Ordering::Release);
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_application_receives_one_datagram_after_an_empty_receive_and_a_batch_after_a_full_one() {
        let idle = LastReceive {
            found_nothing: true,
            ..LastReceive::default()
        };
        let busy = LastReceive {
            found_nothing: false,
            ..LastReceive::default()
        };
        assert_eq!(idle.first_batch(AckTiming::Deferred), 1);
        assert_eq!(busy.first_batch(AckTiming::Deferred), RX_BATCH);
        // The engine thread always takes what is there.
        assert_eq!(idle.first_batch(AckTiming::Now), RX_BATCH);
        assert_eq!(busy.first_batch(AckTiming::Now), RX_BATCH);
    }

    #[test]
    fn after_a_lone_datagram_with_another_right_behind_it_the_application_asks_for_two() {
        let mut last = LastReceive {
            found_nothing: true,
            ..LastReceive::default()
        };
        let receive = |last: &mut LastReceive, available: usize| {
            let asked = last.first_batch(AckTiming::Deferred);
            last.received(asked, asked.min(available));
            asked
        };
        // A ping-pong of one datagram each way: one at a time.
        for _ in 0..3 {
            assert_eq!(receive(&mut last, 0), 1);
            assert_eq!(receive(&mut last, 1), 1);
            assert_eq!(receive(&mut last, 0), RX_BATCH, "the look after a lone one");
        }
        // An ACK and an answer each time: the look after the lone ACK finds the answer...
        assert_eq!(receive(&mut last, 0), 1);
        assert_eq!(receive(&mut last, 2), 1);
        assert_eq!(receive(&mut last, 1), RX_BATCH);
        // ...so from then on both are asked for at once.
        assert!(last.pairs);
        assert_eq!(receive(&mut last, 0), RX_BATCH, "the look after the answer");
        assert_eq!(receive(&mut last, 2), 2);
        assert_eq!(receive(&mut last, 0), RX_BATCH);
        assert_eq!(receive(&mut last, 2), 2, "pairs again");
        // The second not there yet, but right behind: still pairs.
        assert_eq!(receive(&mut last, 0), RX_BATCH);
        assert_eq!(receive(&mut last, 1), 2);
        assert_eq!(receive(&mut last, 1), RX_BATCH);
        assert!(last.pairs);
        // Lone datagrams again: back to one.
        assert_eq!(receive(&mut last, 0), RX_BATCH);
        assert_eq!(receive(&mut last, 1), 2);
        assert_eq!(receive(&mut last, 0), RX_BATCH);
        assert!(!last.pairs);
        assert_eq!(receive(&mut last, 1), 1);
    }

    #[test]
    fn naps_double_while_the_application_polls_and_restart_short_when_it_stops() {
        let mut nap = NapBackoff::default();
        let lengths: Vec<u128> = (0..9).map(|_| nap.next().as_micros()).collect();
        assert_eq!(lengths, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        nap.reset();
        assert_eq!(nap.next(), APP_POLL_NAP);
        assert_eq!(nap.next(), APP_POLL_NAP * 2);
    }
}
