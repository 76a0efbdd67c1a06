//! An application thread's poll of a CQ: when the CQ is empty it receives for the device
//! in this thread, and it decides when the ACKs its receives deferred leave.

use softverbs_api::{VerbsResult, WorkCompletion};

use super::cq::CompletionQueue;
use super::device::Device;

/// `poll_cq` of a CQ of `dev` by an application thread; `poll_now` polls the CQ itself.
/// With the CQ at hand (`cq`), what the poll's own receive completes on it is handed
/// straight to `out` (see `cq_hand_off`).
pub(crate) fn poll_cq(
    dev: &Device,
    cq: Option<&CompletionQueue>,
    out: &mut [WorkCompletion],
    poll_now: impl Fn(&mut [WorkCompletion]) -> VerbsResult<usize>,
) -> VerbsResult<usize> {
    // A forked child polling would take its parent's datagrams off the shared socket.
    dev.check_opened_here()?;
    let n = poll_now(out)?;
    if n > 0 {
        super::poll_yield::poll_found_work();
        return Ok(n);
    }
    // ACKs deferred by this thread's receives leave with its next post, or once it waits
    // (see `DeferredAcks`): a poll that finds completions keeps them, so that an application
    // that polls one CQ, then another that has its answer, then posts (perftest's latency
    // loops poll the send CQ, then the receive CQ) sends its ACK with the post, not in a
    // send call of its own. So does an empty poll whose receive below finds work, once.
    if out.is_empty() {
        dev.flush_deferred_acks();
        return Ok(0);
    }
    if dev.deferred_acks.carry_through_empty_poll() {
        dev.flush_deferred_acks();
    }
    // An empty CQ: receive what is waiting on the link in this thread rather than wait for
    // the engine thread to be scheduled (it wakes too, and finds the work done); with
    // nothing there either, the thread waits: its ACKs leave, and a thread queued on this
    // CPU may run.
    let receive = super::engine_thread::receive_if_free;
    let (received, handed) = match cq {
        Some(cq) => super::cq_hand_off::receive_into(cq, out, |h| receive(dev, Some(h))),
        None => (receive(dev, None), 0),
    };
    if handed > 0 {
        super::poll_yield::poll_found_work();
        // What was queued meanwhile came after them; an error shows at the next poll.
        return Ok(handed + poll_now(&mut out[handed..]).unwrap_or(0));
    }
    if received > 0 {
        super::poll_yield::poll_found_work();
        return poll_now(out);
    }
    dev.flush_deferred_acks();
    super::poll_yield::after_empty_poll(dev);
    Ok(0)
}
