//! Waiting for a side-channel peer without hanging: the servers of `softverbs perf`,
//! `softverbs ibv-pingpong` and the rxe lab's perftest cases all accept one client within a
//! time limit, so that a peer that never comes is an error, not a hang.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How often a waiting accept looks again.
const POLL: Duration = Duration::from_millis(10);

/// Accepts one connection on `listener` within `wait`; ETIMEDOUT (`TimedOut`) if none
/// came. The listener is left non-blocking; the stream returned blocks.
pub fn accept_within(
    listener: &TcpListener,
    wait: Duration,
) -> io::Result<(TcpStream, SocketAddr)> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(false)?;
                return Ok((stream, peer));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    // ETIMEDOUT, so that callers reporting an errno report this one.
                    return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
                }
                std::thread::sleep(POLL);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_never_comes_is_a_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = accept_within(&listener, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT));
    }

    #[test]
    fn a_waiting_client_is_accepted_with_a_blocking_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, peer) = accept_within(&listener, Duration::from_secs(5)).unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // A blocking stream waits out its read timeout for data that never comes; a
        // non-blocking one would fail at once.
        stream
            .set_read_timeout(Some(Duration::from_millis(30)))
            .unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 1];
        std::io::Read::read(&mut &stream, &mut buf).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(25));
    }
}
