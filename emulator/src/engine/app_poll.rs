//! An application thread's poll of a CQ: when the CQ is empty it receives for the device
//! in this thread, and it decides when the ACKs its receives deferred leave.

use softverbs_api::{VerbsResult, WorkCompletion};

use super::device::Device;

/// `poll_cq` of a CQ of `dev` by an application thread; `poll_now` polls the CQ itself.
pub(crate) fn poll_cq(
    dev: &Device,
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
    if super::engine_thread::receive_if_free(dev) > 0 {
        super::poll_yield::poll_found_work();
        return poll_now(out);
    }
    dev.flush_deferred_acks();
    super::poll_yield::after_empty_poll(dev);
    Ok(0)
}
