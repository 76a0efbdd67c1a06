//! fork(2) without exec: the child inherits the parent's open devices as memory, but not
//! their engine threads, and it shares their sockets and slot locks with the parent. Using
//! them from the child would steal the parent's datagrams, and dropping them would release
//! the parent's slot. So the engine counts forks (a `pthread_atfork` child handler) and a
//! device made before the child's fork refuses every verbs call from it (EPERM, saying
//! why), is never closed by it, and is not handed out again by `open_device`: the child
//! opens the device anew and becomes a member of its own. This is rdma-core's rule without
//! `ibv_fork_init` (a child must not use its parent's verbs objects) made an error instead
//! of undefined behaviour. `exec` needs nothing: every descriptor is close-on-exec.
//!
//! FFI (`pthread_atfork`): one of the modules the crate docs allow `unsafe`.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use softverbs_api::VerbsError;

/// Forks this process's ancestors made since the program started (0 in the original
/// process): a device remembers the count it was made under.
static FORKS: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

extern "C" fn in_child() {
    // Only an atomic add: async-signal-safe, as a handler that runs after fork must be.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the fork handler (once per process) and returns the current fork count.
pub(crate) fn generation() -> u64 {
    INSTALL.call_once(|| {
        // SAFETY: pthread_atfork only records the handler; `in_child` is a plain extern
        // "C" function that touches nothing but an atomic, safe to run in a forked child.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(
                rc,
                "pthread_atfork failed: forked children are not detected"
            );
        }
    });
    FORKS.load(Ordering::Relaxed)
}

/// Whether objects made under fork count `made_in` belong to this process.
pub(crate) fn same_process(made_in: u64) -> bool {
    FORKS.load(Ordering::Relaxed) == made_in
}

/// EPERM for a call on device `name` from a child forked after it was opened.
pub(crate) fn inherited(name: &str) -> VerbsError {
    VerbsError::PermissionDenied(format!(
        "device {name} was opened by the parent of this forked process: a child cannot use \
         its parent's verbs objects; open the device again in the child"
    ))
}
