//! The event channel (`rdma_event_channel`): a bounded queue with a real descriptor,
//! readable while an event waits (poll, epoll, tokio's `AsyncFd`), on the emulator's one
//! fd-backed event queue type. Its type lives in `shared`; here, reading events.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use softverbs_api::VerbsResult;

use crate::cm::event::CmEvent;
pub use crate::cm::shared::{EventChannel, EVENT_CHANNEL_LIMIT};

impl EventChannel {
    /// `rdma_get_cm_event`: the next event, waiting up to `timeout` (`None`: without
    /// limit; zero: no wait, as on a non-blocking channel, where `None` is EAGAIN).
    pub fn get_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<CmEvent>> {
        loop {
            let Some(raw) = self.queue.get(timeout, |_, _| {}) else {
                return Ok(None);
            };
            // Events of ids destroyed meanwhile are dropped, as rdma_destroy_id drops them.
            if let Some(event) = crate::cm::id::materialize(raw)? {
                return Ok(Some(event));
            }
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // The queue owns the eventfd and `self` keeps the queue alive.
        crate::fd::borrow_backend_fd(self, self.fd())
    }
}
