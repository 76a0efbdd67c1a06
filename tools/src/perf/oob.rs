//! The out-of-band exchange of `softverbs perf`: perftest's TCP side channel
//! ([`crate::perftest_oob`]) with one keys message per QP, barriers around each size, and
//! the client's report to the server.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softverbs::{Mtu, VerbsError, VerbsResult};

use crate::perftest_oob::{PerftestComm, PerftestKeys};

/// How long a server waits for its client, and a client for a server to appear.
pub const CONNECT_WAIT: Duration = Duration::from_secs(120);
/// Longest a side-channel read may block (a peer that died must not hang us forever).
pub const READ_WAIT: Duration = Duration::from_secs(3600 + 600);

fn io(what: &str, e: std::io::Error) -> VerbsError {
    VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(libc_eio()),
        message: format!("side channel ({what}): {e}"),
    }
}

const fn libc_eio() -> i32 {
    5
}

/// How often a side that waits for its peer looks at the side channel.
const PEER_CHECK: Duration = Duration::from_millis(1);

/// A test loop's look at the side channel, at most every [`PEER_CHECK`]: has the peer
/// reached its next exchange (and so waits for this side)?
pub struct PeerWatch {
    next: Instant,
    /// Calls so far (see `backoff::clock_due`).
    calls: u32,
}

impl PeerWatch {
    /// The first look is due after [`PEER_CHECK`].
    pub fn new() -> PeerWatch {
        PeerWatch {
            next: Instant::now() + PEER_CHECK,
            calls: 0,
        }
    }

    /// `None` if no look is due yet; otherwise whether the peer waits.
    pub fn check(&mut self, comm: &PerftestComm) -> VerbsResult<Option<bool>> {
        if !super::backoff::clock_due(&mut self.calls, super::backoff::CLOCK_EVERY) {
            return Ok(None);
        }
        let now = Instant::now();
        if now < self.next {
            return Ok(None);
        }
        self.next = now + PEER_CHECK;
        comm.peer_waiting().map(Some)
    }
}

/// A listening server socket.
pub fn listen(addr: SocketAddr) -> VerbsResult<TcpListener> {
    TcpListener::bind(addr).map_err(|e| io(&format!("listening on {addr}"), e))
}

/// Waits for one client on `listener`.
pub fn accept(listener: &TcpListener) -> VerbsResult<PerftestComm> {
    let (stream, _) = crate::tcp_accept::accept_within(listener, CONNECT_WAIT)
        .map_err(|e| io("waiting for the client", e))?;
    wrap(stream, false)
}

/// How often a client still waiting for its server says so.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);

/// Connects to a server, retrying while it is not up yet (for [`CONNECT_WAIT`]); with
/// `announce`, the first refusal and every [`ANNOUNCE_EVERY`] of retrying are said on
/// stderr, so that a missing server is never a silent wait.
pub fn connect(addr: SocketAddr, announce: bool) -> VerbsResult<PerftestComm> {
    let started = Instant::now();
    let deadline = started + CONNECT_WAIT;
    let mut next_announce = started;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(stream) => {
                if announce && next_announce > started {
                    eprintln!("softverbs perf: connected to {addr}");
                }
                return wrap(stream, true);
            }
            Err(e) if Instant::now() < deadline => {
                if e.kind() != std::io::ErrorKind::ConnectionRefused {
                    return Err(io(&format!("connecting to {addr}"), e));
                }
                let now = Instant::now();
                if announce && now >= next_announce {
                    eprintln!(
                        "softverbs perf: no server at {addr} yet (connection refused); \
                         retrying for {} s more",
                        deadline.saturating_duration_since(now).as_secs()
                    );
                    next_announce = now + ANNOUNCE_EVERY;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(io(
                    &format!(
                        "connecting to {addr}: no server came within {} s",
                        CONNECT_WAIT.as_secs()
                    ),
                    e,
                ))
            }
        }
    }
}

fn wrap(stream: TcpStream, is_client: bool) -> VerbsResult<PerftestComm> {
    stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(READ_WAIT)))
        .and_then(|_| stream.set_nodelay(true))
        .map_err(|e| io("socket options", e))?;
    Ok(PerftestComm::new(stream, is_client))
}

/// The setup exchange (version, system data, MTU) and the keys of every QP; returns the
/// peer's keys and the MTU both sides use (the smaller of `ours` and the peer's). EINVAL
/// if the peer's cycle buffer, through which a perftest client walks its remote address,
/// is larger than the `lent` bytes of our buffer.
pub fn exchange_keys(
    comm: &mut PerftestComm,
    ours: Mtu,
    mine: &[PerftestKeys],
    lent: usize,
) -> VerbsResult<(Vec<PerftestKeys>, Mtu)> {
    let first = mine
        .first()
        .ok_or_else(|| VerbsError::inval("no QPs to exchange"))?;
    let peer = comm.setup(ours as u32, first)?;
    peer.check_cycle_buffer(lent)?;
    let mut theirs = vec![peer.keys];
    for k in &mine[1..] {
        let got = comm.xchg(&k.encode(), crate::perftest_oob::KEYS_LEN, "keys")?;
        theirs.push(PerftestKeys::decode(&got)?);
    }
    Ok((theirs, peer.agreed_mtu(ours)))
}
