//! Waiting for completions, async events and CM events inside tokio (cargo feature
//! `tokio`): the channels' and the context's descriptors are watched with `AsyncFd`.
//!
//! Each wait registers its own duplicate of the descriptor (epoll tells duplicates apart),
//! so waits may run concurrently, on any runtime, and be cancelled at any point. Several
//! CQs may share one channel: whichever waiter drains the channel hands each event to its
//! CQ's count and wakes that CQ's waiter, so no wakeup is lost.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use softverbs_api::{AsyncEvent, VerbsError, VerbsResult, WorkCompletion};
use tokio::io::unix::AsyncFd;

use crate::context::Context;
use crate::cq::{CompChannel, Cq};
use crate::events::AsyncEvents;
use crate::fd::register_readable;

fn io_error(what: &str, e: std::io::Error) -> VerbsError {
    VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("{what}: {e}"),
    }
}

/// Registers a duplicate of `fd` with the current tokio runtime, for readability.
fn watch(fd: BorrowedFd<'_>) -> VerbsResult<AsyncFd<OwnedFd>> {
    let owned = fd
        .try_clone_to_owned()
        .map_err(|e| io_error("duplicating the event descriptor", e))?;
    register_readable(owned)
}

/// Takes every waiting event off `channel`, acknowledges it and hands it to its CQ.
fn dispatch(channel: &CompChannel) -> VerbsResult<()> {
    while let Some(cq) = channel.get_event(Some(Duration::ZERO))? {
        cq.ack_events(1)?;
        cq.inner.async_wait.give();
    }
    Ok(())
}

/// Waits until an event of `cq` arrives on `channel` (watched by `watcher`).
async fn wait_for_event(
    channel: &CompChannel,
    cq: &Cq,
    watcher: &AsyncFd<OwnedFd>,
) -> VerbsResult<()> {
    let state = &cq.inner.async_wait;
    loop {
        // Created before the check: an event handed over after the check still wakes it.
        let handed_over = state.arrived.notified();
        if state.take() {
            return Ok(());
        }
        tokio::select! {
            ready = watcher.readable() => {
                let mut guard = ready.map_err(|e| io_error("waiting on the channel", e))?;
                dispatch(channel)?;
                // Only what was there when readiness was reported is cleared: an event
                // raised since then keeps the descriptor ready.
                guard.clear_ready();
            }
            () = handed_over => {}
        }
    }
}

impl Cq {
    /// The next completion of this CQ, waiting without blocking the thread (feature
    /// `tokio`; the CQ must report to a completion channel). Polls; if the CQ is empty,
    /// arms it, polls again (a completion that arrived just before the arming raises no
    /// event), then waits for the channel's event, acknowledges it and polls again. An
    /// error of the CQ (overrun) is returned as the poll returns it.
    ///
    /// Cancel-safe: dropping the future loses no completion. Several CQs may share the
    /// channel and wait at once; the channel should then not be read with
    /// [`CompChannel::get_event`] at the same time.
    pub async fn next_completion(&self) -> VerbsResult<WorkCompletion> {
        let channel = self
            .channel()
            .ok_or_else(|| {
                VerbsError::inval(format!(
                    "CQ {} has no completion channel to wait on",
                    self.id()
                ))
            })?
            .clone();
        let mut wc = [WorkCompletion::default()];
        let mut watcher = None;
        loop {
            if self.poll(&mut wc)? == 1 {
                return Ok(wc[0]);
            }
            self.req_notify(false)?;
            if self.poll(&mut wc)? == 1 {
                return Ok(wc[0]);
            }
            let w = match &watcher {
                Some(w) => w,
                None => watcher.insert(watch(channel.as_fd())?),
            };
            wait_for_event(&channel, self, w).await?;
        }
    }
}

impl AsyncEvents {
    /// The next async event (acknowledged), waiting without blocking the thread (feature
    /// `tokio`). Cancel-safe.
    pub async fn next(&self) -> VerbsResult<AsyncEvent> {
        next_ready(self.as_fd(), "async events", || {
            self.get(Some(Duration::ZERO))
        })
        .await
    }
}

impl crate::cm::EventChannel {
    /// `rdma_get_cm_event` without blocking the thread (feature `tokio`): the next CM event,
    /// waiting on the channel's descriptor. Cancel-safe.
    pub async fn next_async(&self) -> VerbsResult<crate::cm::CmEvent> {
        next_ready(self.as_fd(), "CM events", || {
            self.get_event(Some(Duration::ZERO))
        })
        .await
    }
}

/// The first value `try_get` gives, trying again each time `fd` (the queue's descriptor,
/// readable while something waits) becomes readable.
async fn next_ready<T>(
    fd: BorrowedFd<'_>,
    what: &str,
    mut try_get: impl FnMut() -> VerbsResult<Option<T>>,
) -> VerbsResult<T> {
    if let Some(value) = try_get()? {
        return Ok(value);
    }
    let watcher = watch(fd)?;
    loop {
        let mut guard = watcher
            .readable()
            .await
            .map_err(|e| io_error(&format!("waiting for {what}"), e))?;
        if let Some(value) = try_get()? {
            return Ok(value);
        }
        guard.clear_ready();
    }
}

impl Context {
    /// The next async event of this context (acknowledged), waiting without blocking the
    /// thread (feature `tokio`). Cancel-safe.
    pub async fn next_async_event(&self) -> VerbsResult<AsyncEvent> {
        self.async_events()?.next().await
    }
}
