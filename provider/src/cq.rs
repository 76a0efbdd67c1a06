//! Completion queues.

use std::sync::Arc;
use std::time::{Duration, Instant};

use softverbs_api::{VerbsError, VerbsResult, WorkCompletion};

use crate::context::Context;

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) id: u32,
    capacity: u32,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // QPs hold their CQs alive, so none is attached any more.
        let _ = self.ctx.inner.backend.destroy_cq(self.id);
    }
}

/// A completion queue (`ibv_cq`). Cloning shares it.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn create(ctx: &Context, cqe: u32) -> VerbsResult<Cq> {
        let (id, capacity) = ctx.inner.backend.create_cq(cqe, None)?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                id,
                capacity,
            }),
        })
    }

    /// Backend id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Completions it holds at most.
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
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
