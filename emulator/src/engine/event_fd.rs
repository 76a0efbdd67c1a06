//! A counting file descriptor for event queues: a Linux eventfd in semaphore mode, so the
//! descriptor is readable (poll/epoll, tokio's `AsyncFd`) exactly while its counter is
//! non-zero and the counter holds one token per queued event. This module is FFI: the one
//! place of the engine allowed `unsafe`, for the eventfd(2) call and taking ownership of
//! the descriptor it returns.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};

/// An eventfd: `add` puts tokens in, `take` removes them. It is non-blocking (the queues
/// wait on their own condition variables) and close-on-exec.
#[derive(Debug)]
pub struct EventFd {
    file: File,
}

impl EventFd {
    /// [`EventFd::new`] as a verbs error naming `what` the descriptor is for.
    pub fn for_verbs(what: &str) -> softverbs_api::VerbsResult<EventFd> {
        EventFd::new().map_err(|e| softverbs_api::VerbsError::Io {
            errno: e.raw_os_error().unwrap_or(libc::EMFILE),
            message: format!("creating the {what} descriptor: {e}"),
        })
    }

    /// A new descriptor with no tokens.
    pub fn new() -> io::Result<EventFd> {
        let flags = libc::EFD_SEMAPHORE | libc::EFD_NONBLOCK | libc::EFD_CLOEXEC;
        // SAFETY: eventfd(2) takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd(2), is open and owned by nobody else;
        // the File becomes its only owner and closes it on drop.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(EventFd { file })
    }

    /// Adds `n` tokens (makes the descriptor readable). Fails only if the counter would
    /// exceed 2^64 - 2, which the queues' limits rule out.
    pub fn add(&self, n: u64) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        (&self.file).write_all(&n.to_ne_bytes())
    }

    /// Removes up to `n` tokens; returns how many were there to remove. In semaphore mode
    /// each read takes exactly one.
    pub fn take(&self, n: u64) -> u64 {
        let mut taken = 0;
        let mut buf = [0u8; 8];
        while taken < n {
            match (&self.file).read(&mut buf) {
                Ok(8) => taken += 1,
                // WouldBlock: the counter is zero. Anything else cannot happen on an
                // eventfd read with an 8-byte buffer; stop rather than loop.
                _ => break,
            }
        }
        taken
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// poll(2) with a zero timeout: is the descriptor readable now?
    fn readable(fd: &EventFd) -> bool {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1, no wait.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 1 && pfd.revents & libc::POLLIN != 0
    }

    #[test]
    fn tokens_count_and_drive_readiness() {
        let fd = EventFd::new().unwrap();
        assert!(!readable(&fd));
        assert_eq!(fd.take(1), 0);
        fd.add(3).unwrap();
        assert!(readable(&fd));
        assert_eq!(fd.take(2), 2);
        assert!(readable(&fd));
        assert_eq!(fd.take(5), 1);
        assert!(!readable(&fd));
    }
}
