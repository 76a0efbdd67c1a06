//! Completion queues.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult, WorkCompletion};

use crate::channel::CompChannel;
use crate::context::Context;

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) id: u32,
    capacity: u32,
    pub(crate) channel: Option<CompChannel>,
    /// Events of this CQ handed out by the channel and not yet acknowledged.
    pub(crate) unacked: Mutex<u32>,
    /// Events the async waiters took from the channel for this CQ and not yet consumed.
    #[cfg(feature = "tokio")]
    pub(crate) async_wait: crate::async_wait::CqWaitState,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // QPs hold their CQs alive, so none is attached any more.
        let backend = &self.ctx.inner.backend;
        let Some(channel) = &self.channel else {
            let _ = backend.destroy_cq(self.id);
            return;
        };
        // Under the channel's CQ lock, so that a concurrent get_event either finds this CQ
        // gone (and acknowledges for it) or has already counted its event here.
        let mut cqs = channel.inner.cqs.lock();
        cqs.live.remove(&self.id);
        let unacked = *self.unacked.get_mut();
        if unacked > 0 {
            let _ = backend.ack_cq_events(self.id, unacked);
        }
        if let Err(e) = backend.destroy_cq(self.id) {
            if e.errno() == libc::EBUSY {
                // An event was taken by get_event and not yet matched to a handle: that
                // call acknowledges it and destroys the CQ.
                cqs.orphans.insert(self.id);
            }
        }
    }
}

/// A completion queue (`ibv_cq`). Cloning shares it.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn create(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompChannel>,
    ) -> VerbsResult<Cq> {
        if let Some(channel) = channel {
            channel.check_context(ctx)?;
        }
        let (id, capacity) = ctx
            .inner
            .backend
            .create_cq(cqe, channel.map(CompChannel::id))?;
        let cq = Cq {
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                id,
                capacity,
                channel: channel.cloned(),
                unacked: Mutex::new(0),
                #[cfg(feature = "tokio")]
                async_wait: Default::default(),
            }),
        };
        if let Some(channel) = channel {
            channel
                .inner
                .cqs
                .lock()
                .live
                .insert(id, Arc::downgrade(&cq.inner));
        }
        Ok(cq)
    }

    /// Backend id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Completions it holds at most.
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// The completion channel it reports to, if any.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.inner.channel.as_ref()
    }

    /// `ibv_req_notify_cq`: the next completion added to this CQ (with `solicited_only`: the
    /// next one from a request with the solicited bit, or the next unsuccessful one) raises
    /// one event on its channel. Completions already queued raise none: arm, then poll the
    /// CQ empty, then wait. Without a channel this has no effect.
    pub fn req_notify(&self, solicited_only: bool) -> VerbsResult<()> {
        self.inner
            .ctx
            .inner
            .backend
            .req_notify_cq(self.inner.id, solicited_only)
    }

    /// `ibv_ack_cq_events`: acknowledges `count` events of this CQ taken with
    /// [`CompChannel::get_event`]; EINVAL if fewer are outstanding.
    pub fn ack_events(&self, count: u32) -> VerbsResult<()> {
        let mut unacked = self.inner.unacked.lock();
        if count > *unacked {
            return Err(VerbsError::inval(format!(
                "acknowledging {count} event(s) of CQ {}, but {} are outstanding",
                self.inner.id, *unacked
            )));
        }
        self.inner
            .ctx
            .inner
            .backend
            .ack_cq_events(self.inner.id, count)?;
        *unacked -= count;
        Ok(())
    }

    /// Events taken from the channel for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        *self.inner.unacked.lock()
    }

    /// `ibv_poll_cq`: fills `out` from the front of `out`; returns how many. Never blocks.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        self.inner.ctx.inner.backend.poll_cq(self.inner.id, out)
    }

    /// Polls until `n` completions have arrived or `timeout` passes, whichever is first;
    /// returns those that arrived (fewer than `n` means the timeout passed). Busy-polls with
    /// short sleeps: completion channels are the way to wait without polling.
    pub fn poll_wait(&self, n: usize, timeout: Duration) -> VerbsResult<Vec<WorkCompletion>> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::with_capacity(n);
        let mut batch = [WorkCompletion::default(); 32];
        let mut idle_rounds = 0u32;
        while got.len() < n {
            let want = (n - got.len()).min(batch.len());
            let k = self.poll(&mut batch[..want])?;
            got.extend_from_slice(&batch[..k]);
            if k == 0 {
                if Instant::now() >= deadline {
                    break;
                }
                idle_rounds += 1;
                if idle_rounds > 64 {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    std::thread::yield_now();
                }
            } else {
                idle_rounds = 0;
            }
        }
        Ok(got)
    }

    /// Like [`Cq::poll_wait`] for exactly one completion; ETIMEDOUT-style error if none came.
    pub fn poll_one(&self, timeout: Duration) -> VerbsResult<WorkCompletion> {
        self.poll_wait(1, timeout)?
            .pop()
            .ok_or_else(|| VerbsError::Io {
                errno: libc::ETIMEDOUT,
                message: format!("no completion within {timeout:?}"),
            })
    }
}
