//! A context's async events (`ibv_get_async_event`, `ibv_context::async_fd`): QP errors, CQ
//! errors, SRQ limit, last WQE reached, port changes.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use softverbs_api::{AsyncEvent, VerbsResult};

use crate::context::Context;
use crate::fd::borrow_backend_fd;

/// The async event queue of a context. Every open context has its own: it gets the events
/// of the objects it created and every port event. Holds its context alive.
///
/// Its descriptor ([`AsyncEvents::fd`], [`AsRawFd`], [`AsFd`]) is readable while an event
/// waits; read events with [`AsyncEvents::get`], never from the descriptor itself.
#[derive(Clone)]
pub struct AsyncEvents {
    pub(crate) ctx: Context,
    fd: RawFd,
}

impl AsyncEvents {
    pub(crate) fn new(ctx: &Context) -> VerbsResult<AsyncEvents> {
        let fd = ctx.inner.backend.async_event_fd()?;
        Ok(AsyncEvents {
            ctx: ctx.clone(),
            fd,
        })
    }

    /// The context whose events these are.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The descriptor: readable while an event waits. It belongs to the context; do not
    /// read from it or close it.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// `ibv_get_async_event` + `ibv_ack_async_event`: the next event, waiting up to
    /// `timeout` (`None`: without limit; zero: not at all) and `Ok(None)` if none came.
    /// The event is acknowledged before it is returned (it names objects by id, so there
    /// is nothing for the acknowledgement to keep alive).
    pub fn get(&self, timeout: Option<Duration>) -> VerbsResult<Option<AsyncEvent>> {
        let backend = &self.ctx.inner.backend;
        let Some(event) = backend.get_async_event(timeout)? else {
            return Ok(None);
        };
        backend.ack_async_event(&event)?;
        Ok(Some(event))
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        borrow_backend_fd(self, self.fd)
    }
}

impl Context {
    /// This context's async events (`ibv_get_async_event` and `async_fd`).
    pub fn async_events(&self) -> VerbsResult<AsyncEvents> {
        AsyncEvents::new(self)
    }
}
