//! Completion-channel and async events of the hardware backend: waiting for them with a
//! timeout on the (non-blocking) descriptors, and counting unacknowledged CQ events so
//! that destroying a CQ with events outstanding is EBUSY rather than a hang in libibverbs.

use std::time::{Duration, Instant};

use softverbs_api::{AsyncElement, AsyncEvent, VerbsError, VerbsResult};

use super::super::convert::{self, error};
use super::super::ffi;
use super::super::ffi::context::RawElement;
use super::super::table::inval;
use super::HwContext;

/// How long a wait may still last: `Ok(None)` without limit, `Ok(Some(left))`, or `Err(())`
/// once the timeout is over (a zero timeout is over at once: a poll without waiting).
fn time_left(timeout: Option<Duration>, deadline: Option<Instant>) -> Result<Option<Duration>, ()> {
    match (timeout, deadline) {
        (Some(t), _) if t.is_zero() => Err(()),
        (None, _) | (Some(_), None) => Ok(None),
        (Some(_), Some(d)) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(())
            } else {
                Ok(Some(left))
            }
        }
    }
}

impl HwContext {
    /// `get_cq_event` of the contract: the next CQ event of `channel`, waiting up to
    /// `timeout`; counted as unacknowledged on its CQ.
    pub(super) fn wait_cq_event(
        &self,
        channel: u32,
        timeout: Option<Duration>,
    ) -> VerbsResult<Option<u32>> {
        let ch = self.channels.get(channel, inval)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(id) = ch
                .take_cq_event()
                .map_err(|e| error(e, "ibv_get_cq_event"))?
            {
                if let Ok(cq) = self.cqs.get(id, inval) {
                    *cq.unacked.lock() += 1;
                }
                return Ok(Some(id));
            }
            let Ok(left) = time_left(timeout, deadline) else {
                return Ok(None);
            };
            // Another waiter may take the event between readiness and the read: loop.
            ffi::wait_readable(ch.fd(), left).map_err(|e| error(e, "poll"))?;
        }
    }

    /// `ack_cq_events` of the contract: at most as many as were handed out.
    pub(super) fn ack_cq(&self, cq: u32, count: u32) -> VerbsResult<()> {
        let c = self.cqs.get(cq, inval)?;
        let mut unacked = c.unacked.lock();
        if count > *unacked {
            return Err(VerbsError::inval(format!(
                "acknowledging {count} events of CQ {cq:#x}, {} outstanding",
                *unacked
            )));
        }
        c.raw.ack_events(count);
        *unacked -= count;
        Ok(())
    }

    /// `get_async_event` of the contract: the next event the contract knows, waiting up to
    /// `timeout` (already acknowledged to libibverbs when taken).
    pub(super) fn wait_async_event(
        &self,
        timeout: Option<Duration>,
    ) -> VerbsResult<Option<AsyncEvent>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            while let Some(ev) = self
                .ctx
                .take_async_event()
                .map_err(|e| error(e, "ibv_get_async_event"))?
            {
                // Event types the contract lacks (e.g. WQ events) are dropped.
                if let Some(kind) = convert::async_kind(ev.event_type) {
                    let element = match ev.element {
                        RawElement::Cq(id) => AsyncElement::Cq(id),
                        RawElement::Qp(n) => AsyncElement::Qp(n),
                        RawElement::Srq(id) => AsyncElement::Srq(id),
                        RawElement::Port(p) => AsyncElement::Port(p),
                        RawElement::Device => AsyncElement::Device,
                    };
                    return Ok(Some(AsyncEvent { kind, element }));
                }
            }
            let Ok(left) = time_left(timeout, deadline) else {
                return Ok(None);
            };
            ffi::wait_readable(self.ctx.async_fd(), left).map_err(|e| error(e, "poll"))?;
        }
    }
}
