//! Borrowing the backend's event descriptors: the one FFI-style module of this crate
//! allowed `unsafe`, because `BorrowedFd` can only be made from a raw descriptor unsafely.
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, RawFd};

/// Borrows descriptor `fd`, which the backend keeps open as long as the object `owner`
/// stands for exists (a completion channel, a context).
pub(crate) fn borrow_backend_fd<T: ?Sized>(owner: &T, fd: RawFd) -> BorrowedFd<'_> {
    let _ = owner;
    // SAFETY: `fd` is the descriptor of a backend object that `owner` keeps alive (the
    // backend closes it only when that object is destroyed, which needs `owner` dropped),
    // and the borrow cannot outlive `owner`. It is never -1: backends return real fds.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Registers `fd` (owned, so it stays open and the same for as long as the registration)
/// with the current tokio runtime, for readability. Without a runtime, or with one whose
/// I/O driver is off (where tokio panics), this is EINVAL rather than a panic.
#[cfg(feature = "tokio")]
pub(crate) fn register_readable(
    fd: std::os::fd::OwnedFd,
) -> softverbs_api::VerbsResult<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use softverbs_api::VerbsError;
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    let no_runtime =
        || VerbsError::inval("async waits need a tokio runtime with I/O enabled (enable_io)");
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(no_runtime());
    }
    let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: an OwnedFd is open, and moving it into the AsyncFd keeps it open and
        // returning the same descriptor until the AsyncFd is dropped, as tokio requires.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
    }));
    match registered {
        Ok(Ok(async_fd)) => Ok(async_fd),
        Ok(Err(e)) => {
            let cause = e.into_parts().1;
            Err(VerbsError::Io {
                errno: cause.raw_os_error().unwrap_or(libc::EIO),
                message: format!("registering an event descriptor with tokio: {cause}"),
            })
        }
        Err(_) => Err(no_runtime()),
    }
}
