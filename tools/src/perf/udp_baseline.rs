//! `softverbs perf udp-baseline`: what raw UDP carries on the path the emulator uses
//! (127.0.0.1 to 127.0.0.2), with the datagram size a RoCE packet of the message size has:
//! bandwidth with one send per datagram, with sendmmsg batches, and with UDP GSO (receiver
//! with GRO) where the kernel has it; and the median half round trip of a ping-pong, with
//! blocking receives and with busy-polled ones.
//! Traffic goes only to 127.0.0.2, and every loop is bounded in time and count.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use softverbs_emu::net::batch_sys::{self, RecvSlots};

use super::args::Settings;
use super::report::Baseline;

/// BTH + ICRC: what every RoCE packet adds to its payload (extension headers come on top).
const ROCE_OVERHEAD: usize = 12 + 4;
/// How long each bandwidth method sends.
const SEND_FOR: Duration = Duration::from_millis(500);
/// Datagrams per sendmmsg call.
const BATCH: usize = 32;
/// Round trips of the ping-pong (and its time limit).
const PINGS: usize = 5000;
const PING_FOR: Duration = Duration::from_secs(2);
/// Largest UDP payload one GSO send may carry.
const GSO_MAX: usize = 65_000;
/// Receive wait after the sender stops.
const DRAIN: Duration = Duration::from_millis(50);

fn socket(ip: Ipv4Addr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&SocketAddr::new(IpAddr::V4(ip), 0).into())?;
    Ok(s.into())
}

/// The datagram size of a RoCE packet carrying (the first MTU of) a `size`-byte message.
pub fn datagram_bytes(size: usize, mtu: usize) -> usize {
    size.min(mtu).max(1) + ROCE_OVERHEAD
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    SendTo,
    Sendmmsg,
    Gso,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::SendTo => "send_to + recvmmsg",
            Method::Sendmmsg => "sendmmsg + recvmmsg",
            Method::Gso => "GSO + GRO",
        }
    }
}

/// Datagrams received in `SEND_FOR` with `method`, and the seconds they spanned; `None` if
/// the kernel lacks the method.
fn blast(method: Method, datagram: usize) -> io::Result<Option<(u64, f64)>> {
    let tx = socket(Ipv4Addr::new(127, 0, 0, 1))?;
    let rx = socket(Ipv4Addr::new(127, 0, 0, 2))?;
    let dst = rx.local_addr()?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    if method == Method::Gso
        && (batch_sys::set_udp_segment(&tx, datagram as u16).is_err()
            || batch_sys::set_udp_gro(&rx, true).is_err())
    {
        return Ok(None);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || -> io::Result<(u64, f64)> {
        let mut count = 0u64;
        let mut first = None;
        let mut last = Instant::now();
        let mut quiet_since: Option<Instant> = None;
        let mut slots = RecvSlots::new(
            64,
            if method == Method::Gso {
                65_536
            } else {
                datagram
            },
        );
        loop {
            match batch_sys::recv_batch(&rx, &mut slots) {
                Ok(n) => {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    quiet_since = None;
                    for i in 0..n {
                        let len = slots.get(i).0.len();
                        // With GRO one receive holds several equal datagrams.
                        count += len.div_ceil(datagram) as u64;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop_rx.load(Ordering::Acquire) {
                        let q = *quiet_since.get_or_insert_with(Instant::now);
                        if q.elapsed() >= DRAIN {
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
        Ok((count, secs))
    });
    let payload = vec![0x5au8; datagram];
    let gso_segments = (GSO_MAX / datagram).clamp(1, 64);
    let gso_buf = vec![0x5au8; gso_segments * datagram];
    let list: Vec<(&[u8], SocketAddr)> = (0..BATCH).map(|_| (payload.as_slice(), dst)).collect();
    let started = Instant::now();
    let mut error = None;
    while started.elapsed() < SEND_FOR {
        let r = match method {
            Method::SendTo => tx.send_to(&payload, dst).map(|_| ()),
            Method::Sendmmsg => batch_sys::send_batch(&tx, &list).map(|_| ()),
            Method::Gso => tx.send_to(&gso_buf, dst).map(|_| ()),
        };
        match r {
            Ok(()) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::ENOBUFS)
                    || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if method == Method::Gso && e.raw_os_error() == Some(libc::EIO) => {
                // GSO refused by the device path: fall back (report it as unavailable).
                error = Some(None);
                break;
            }
            Err(e) => {
                error = Some(Some(e));
                break;
            }
        }
    }
    stop.store(true, Ordering::Release);
    let received = receiver
        .join()
        .map_err(|_| io::Error::other("baseline receiver panicked"))??;
    match error {
        Some(Some(e)) => Err(e),
        Some(None) => Ok(None),
        None => Ok(Some(received)),
    }
}

/// How a ping-pong side waits for the next datagram.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A blocking receive: the kernel wakes the thread.
    Block,
    /// Non-blocking receives in a loop, as perftest and `softverbs perf` busy-poll.
    Spin,
}

/// Receives one datagram into `buf` the way `wait` says; `TimedOut` after `limit`.
fn receive(sock: &UdpSocket, buf: &mut [u8], wait: Wait, limit: Duration) -> io::Result<usize> {
    match wait {
        Wait::Block => sock.recv_from(buf).map(|(n, _)| n),
        Wait::Spin => {
            let started = Instant::now();
            loop {
                match sock.recv_from(buf) {
                    Ok((n, _)) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if started.elapsed() > limit {
                            return Err(io::ErrorKind::TimedOut.into());
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// Median half round trip of a ping-pong of `datagram`-byte datagrams whose two sides wait
/// as `wait` says, microseconds.
fn ping_pong(datagram: usize, wait: Wait) -> io::Result<f64> {
    let a = socket(Ipv4Addr::new(127, 0, 0, 1))?;
    let b = socket(Ipv4Addr::new(127, 0, 0, 2))?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    a.set_read_timeout(Some(Duration::from_secs(1)))?;
    b.set_read_timeout(Some(Duration::from_millis(100)))?;
    if wait == Wait::Spin {
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
    }
    let done = Arc::new(AtomicBool::new(false));
    let done_echo = done.clone();
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let mut buf = vec![0u8; datagram.max(64)];
        while !done_echo.load(Ordering::Acquire) {
            match receive(&b, &mut buf, wait, Duration::from_millis(100)) {
                Ok(n) => {
                    b.send_to(&buf[..n], a_addr)?;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    let msg = vec![7u8; datagram];
    let mut buf = vec![0u8; datagram.max(64)];
    let mut samples = Vec::with_capacity(PINGS);
    let started = Instant::now();
    let mut result = Ok(());
    while samples.len() < PINGS && started.elapsed() < PING_FOR {
        let t0 = Instant::now();
        let answer = a
            .send_to(&msg, b_addr)
            .and_then(|_| receive(&a, &mut buf, wait, Duration::from_secs(1)));
        if let Err(e) = answer {
            result = Err(e);
            break;
        }
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    done.store(true, Ordering::Release);
    echo.join()
        .map_err(|_| io::Error::other("echo thread panicked"))??;
    result?;
    samples.sort_unstable();
    Ok(samples
        .get(samples.len() / 2)
        .map_or(0.0, |&ns| ns as f64 / 2000.0))
}

/// The baseline of a `size`-byte message under `s` (its MTU).
pub fn measure(s: &Settings, size: usize) -> io::Result<Baseline> {
    let datagram = datagram_bytes(size, s.mtu as usize);
    let payload = datagram - ROCE_OVERHEAD;
    let mut b = Baseline {
        datagram_bytes: datagram,
        ..Baseline::default()
    };
    for method in [Method::SendTo, Method::Sendmmsg, Method::Gso] {
        match blast(method, datagram)? {
            Some((count, secs)) if secs > 0.0 => {
                let mbs = count as f64 * payload as f64 / secs / 1e6;
                let mpps = count as f64 / secs / 1e6;
                if mbs > b.bw_mbs {
                    b.bw_mbs = mbs;
                    b.bw_method = method.name().to_string();
                }
                b.methods.push((method.name().to_string(), mbs, mpps));
            }
            Some(_) => b.methods.push((method.name().to_string(), 0.0, 0.0)),
            None => b
                .methods
                .push((format!("{} (unavailable)", method.name()), 0.0, 0.0)),
        }
    }
    // The stricter of the two waits is the baseline: on a virtual machine a wake-up can
    // cost more than the round trip, and softverbs perf busy-polls as perftest does.
    b.half_rtt_block_us = ping_pong(datagram, Wait::Block)?;
    b.half_rtt_spin_us = ping_pong(datagram, Wait::Spin)?;
    b.half_rtt_us = b.half_rtt_block_us.min(b.half_rtt_spin_us);
    Ok(b)
}
