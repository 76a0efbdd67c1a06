//! At process exit (`exit(3)`, or `main` returning): every shared port this process is a
//! member of is handed over (`Member::hand_over`) before the kernel closes its sockets. A C
//! program on the drop-in libraries never closes its devices, and a Rust program may leave
//! a context open too; without the hand-over, datagrams the kernel put in a socket that
//! was closing were lost for the processes still running (see docs/shared-devices.md).
//! A process killed by a signal runs no hook: the survivors' liveness checks remain the
//! net for that.
//!
//! FFI (`atexit`): one of the modules the crate docs allow `unsafe`.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// What runs at exit: `registry::hand_over_shared_ports`, given by the caller so that this
/// module imports nothing of the engine.
static AT_EXIT: OnceLock<fn()> = OnceLock::new();

extern "C" fn at_exit() {
    if let Some(&hook) = AT_EXIT.get() {
        // Nothing may unwind into libc's exit.
        let _ = std::panic::catch_unwind(hook);
    }
}

/// Makes `hook` run at process exit (the first call's hook; later calls change nothing).
pub(crate) fn install(hook: fn()) {
    if AT_EXIT.set(hook).is_ok() {
        // SAFETY: atexit only records the pointer; `at_exit` is a plain extern "C" function
        // that lets no panic out and calls safe code only.
        let rc = unsafe { libc::atexit(at_exit) };
        if rc != 0 {
            tracing::warn!(
                rc,
                "atexit failed: shared ports are not handed over at exit"
            );
        }
    }
}
