//! Completion queues: bounded FIFOs of work completions filled by the engine.

use std::collections::VecDeque;

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult, WorkCompletion};

/// A completion queue of fixed capacity. On overrun the CQ enters an error state (as a real
/// CQ does) instead of dropping completions silently: every later poll fails with EIO.
pub struct CompletionQueue {
    entries: Mutex<VecDeque<WorkCompletion>>,
    capacity: usize,
    overrun: std::sync::atomic::AtomicBool,
}

impl CompletionQueue {
    /// A CQ holding up to `capacity` completions.
    pub fn new(capacity: usize) -> Self {
        CompletionQueue {
            entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            capacity,
            overrun: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends completions, in order.
    pub fn push_all(&self, wcs: impl IntoIterator<Item = WorkCompletion>) {
        let mut entries = self.entries.lock();
        for wc in wcs {
            if entries.len() >= self.capacity {
                self.overrun
                    .store(true, std::sync::atomic::Ordering::Release);
                return;
            }
            entries.push_back(wc);
        }
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. Never blocks.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        if self.overrun.load(std::sync::atomic::Ordering::Acquire) {
            return Err(VerbsError::Io {
                errno: libc::EIO,
                message: format!("completion queue overrun (capacity {})", self.capacity),
            });
        }
        let mut entries = self.entries.lock();
        let n = out.len().min(entries.len());
        for (slot, wc) in out.iter_mut().zip(entries.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// True if none wait.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
