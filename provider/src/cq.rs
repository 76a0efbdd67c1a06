//! Completion queues (`ibv_cq`) and the completion channels they report to
//! (`ibv_comp_channel`): a channel hands out its CQs' handles and a CQ keeps its channel
//! alive, so the two live together.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{CqPoller, VerbsError, VerbsResult, WorkCompletion};

use crate::context::Context;
use crate::fd::borrow_backend_fd;

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) id: u32,
    /// The granted size (`resize` changes it).
    capacity: AtomicU32,
    pub(crate) channel: Option<CompChannel>,
    /// Events of this CQ handed out by the channel and not yet acknowledged.
    pub(crate) unacked: Mutex<u32>,
    /// Its poll: bound to it if the backend offers that, so that a poll skips the lookup
    /// of the CQ by id (see `CqDataPath`).
    poller: CqPoller,
    /// Events the async waiters took from the channel for this CQ and not yet consumed.
    #[cfg(feature = "tokio")]
    pub(crate) async_wait: crate::async_wait_state::CqWaitState,
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
                capacity: AtomicU32::new(capacity),
                channel: channel.cloned(),
                unacked: Mutex::new(0),
                poller: CqPoller::new(&*ctx.inner.backend, id),
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
        self.inner.capacity.load(Ordering::Relaxed)
    }

    /// `ibv_resize_cq`: makes the CQ hold at least `cqe` completions, keeping those queued;
    /// returns the granted size (then [`Cq::capacity`]). EINVAL beyond the device's
    /// `max_cqe` or below the completions queued; EOPNOTSUPP where the backend cannot.
    pub fn resize(&self, cqe: u32) -> VerbsResult<u32> {
        let granted = self.inner.ctx.inner.backend.resize_cq(self.inner.id, cqe)?;
        self.inner.capacity.store(granted, Ordering::Relaxed);
        Ok(granted)
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
        self.inner.poller.poll(&*self.inner.ctx.inner.backend, out)
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

impl Context {
    /// `ibv_create_cq` with room for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> VerbsResult<Cq> {
        Cq::create(self, cqe, None)
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> VerbsResult<CompChannel> {
        CompChannel::create(self)
    }

    /// `ibv_create_cq` reporting to `channel` (of this context), which it keeps alive.
    pub fn create_cq_with_channel(&self, cqe: u32, channel: &CompChannel) -> VerbsResult<Cq> {
        Cq::create(self, cqe, Some(channel))
    }
}

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
