//! Completion channels (`ibv_comp_channel`): where CQs armed with [`Cq::req_notify`] report
//! that a completion arrived, through a real file descriptor.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use crate::context::Context;
use crate::cq::{Cq, CqInner};
use crate::fd::borrow_backend_fd;

/// The CQs created on a channel, so that an event's CQ id maps back to its handle.
#[derive(Default)]
pub(crate) struct ChannelCqs {
    pub(crate) live: HashMap<u32, Weak<CqInner>>,
    /// CQs whose handles are gone but whose destruction waits for an event that a
    /// concurrent `get_event` took and has not yet acknowledged (it destroys them then).
    pub(crate) orphans: HashSet<u32>,
}

pub(crate) struct ChannelInner {
    pub(crate) ctx: Context,
    pub(crate) id: u32,
    fd: RawFd,
    pub(crate) cqs: Mutex<ChannelCqs>,
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // Every CQ on it holds the channel alive, so none is attached any more.
        let _ = self.ctx.inner.backend.destroy_comp_channel(self.id);
    }
}

/// A completion channel (`ibv_comp_channel`). Cloning shares it; CQs created on it keep it
/// alive.
///
/// Its descriptor ([`CompChannel::fd`], [`AsRawFd`], [`AsFd`]) is readable while an event
/// waits, so it can sit in poll/epoll loops or tokio's `AsyncFd`; read events with
/// [`CompChannel::get_event`], never from the descriptor itself.
///
/// The usual loop: `cq.req_notify(false)`, poll the CQ empty, `get_event`, poll again,
/// `cq.ack_events(1)`, re-arm. Events must be acknowledged before their CQ can be destroyed;
/// dropping the last handle of a CQ acknowledges its outstanding events.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> VerbsResult<CompChannel> {
        let backend = &ctx.inner.backend;
        let id = backend.create_comp_channel()?;
        let fd = match backend.comp_channel_fd(id) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = backend.destroy_comp_channel(id);
                return Err(e);
            }
        };
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                ctx: ctx.clone(),
                id,
                fd,
                cqs: Mutex::new(ChannelCqs::default()),
            }),
        })
    }

    /// Backend id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The descriptor: readable while an event waits (one token per event). It belongs to
    /// the channel; do not read from it or close it.
    pub fn fd(&self) -> RawFd {
        self.inner.fd
    }

    /// `ibv_get_cq_event`: the CQ of the next event; waits up to `timeout` (`None`: without
    /// limit; zero: not at all, the non-blocking mode) and gives `Ok(None)` if none came.
    /// Acknowledge it with [`Cq::ack_events`] (or let the CQ's last handle go).
    pub fn get_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<Cq>> {
        let backend = &self.inner.ctx.inner.backend;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = match (timeout, deadline) {
                (None, _) | (Some(_), None) => None,
                (Some(_), Some(d)) => Some(d.saturating_duration_since(Instant::now())),
            };
            let Some(id) = backend.get_cq_event(self.inner.id, left)? else {
                return Ok(None);
            };
            let mut cqs = self.inner.cqs.lock();
            if let Some(inner) = cqs.live.get(&id).and_then(Weak::upgrade) {
                *inner.unacked.lock() += 1;
                return Ok(Some(Cq { inner }));
            }
            // Its last handle went away while this event was on the way here: acknowledge
            // it, finish the destruction that the event held up, and wait on.
            let _ = backend.ack_cq_events(id, 1);
            if cqs.orphans.contains(&id) && backend.destroy_cq(id).is_ok() {
                cqs.orphans.remove(&id);
            }
        }
    }

    /// Checks that `ctx` is this channel's context.
    pub(crate) fn check_context(&self, ctx: &Context) -> VerbsResult<()> {
        if Arc::ptr_eq(&self.inner.ctx.inner, &ctx.inner) {
            Ok(())
        } else {
            Err(VerbsError::inval(
                "the completion channel belongs to another context",
            ))
        }
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        borrow_backend_fd(self, self.inner.fd)
    }
}
