//! `softverbs perf udp-baseline`: what raw UDP carries on the path the emulator uses
//! (127.0.0.1 to 127.0.0.2), with the datagram size a RoCE packet of the message size has:
//! bandwidth with one send per datagram, with sendmmsg batches, with UDP GSO (receiver with
//! GRO) where the kernel has it, and with the very datagrams one message of the verb under
//! test puts on the wire (a WRITE's first packet carries a RETH, a READ response's first and
//! last an AETH); and the median half round trip of a ping-pong, with blocking receives and
//! with busy-polled ones.
//! Traffic goes only to 127.0.0.2, and every loop is bounded in time and count.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use softverbs_emu::net::batch_sys::{self, RecvSlots};
use softverbs_emu::net::send_plan;
use softverbs_emu::wire::{AETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, ICRC_LEN, RETH_LEN};

use super::args::{Settings, Verb};
use super::report::{Baseline, LatResult};
use super::roce_floor::RocePackets;

/// BTH + ICRC: what every RoCE packet adds to its payload (extension headers come on top).
const ROCE_OVERHEAD: usize = BTH_LEN + ICRC_LEN;
/// How long each bandwidth method sends.
const SEND_FOR: Duration = Duration::from_millis(500);
/// Datagrams per sendmmsg call.
const BATCH: usize = 32;
/// Round trips of the ping-pong (and its time limit).
const PINGS: usize = 5000;
const PING_FOR: Duration = Duration::from_secs(2);
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

/// The packets that carry one `size`-byte message of `verb` at `mtu`, in the direction its
/// data flows, each as (header bytes from the BTH on, payload bytes): payloads are padded to
/// 4 bytes; a WRITE's first packet carries a RETH besides its full MTU of payload (so it
/// cannot join the GSO run of the rest), a READ response's first and last (or only) packet
/// an AETH; an atomic is one request with an AtomicETH and no payload.
pub fn verb_packets(verb: Verb, size: usize, mtu: usize) -> Vec<(usize, usize)> {
    if verb == Verb::Atomic {
        return vec![(BTH_LEN + ATOMIC_ETH_LEN, 0)];
    }
    let size = size.max(1);
    let packets = size.div_ceil(mtu);
    (0..packets)
        .map(|k| {
            let payload = (size - k * mtu).min(mtu).next_multiple_of(4);
            let (first, last) = (k == 0, k + 1 == packets);
            let extension = match verb {
                Verb::Write if first => RETH_LEN,
                Verb::Read if first || last => AETH_LEN,
                _ => 0,
            };
            (BTH_LEN + extension, payload)
        })
        .collect()
}

/// The UDP payload size of each (headers, payload) packet: ICRC included.
fn datagram_sizes(packets: &[(usize, usize)]) -> Vec<usize> {
    packets.iter().map(|&(h, p)| h + p + ICRC_LEN).collect()
}

/// How `list` leaves as sendmmsg calls, each (index of its first datagram, its runs as
/// [`batch_sys::send_runs`] takes them): grouped by the engine's UDP link's own rules
/// ([`send_plan::group_calls`] with [`send_plan::gso_run`]).
fn sendmmsg_calls<D: batch_sys::Datagram>(list: &[D]) -> Vec<(usize, Vec<usize>)> {
    let mut calls = Vec::new();
    send_plan::group_calls(list, send_plan::gso_run, |start, runs| {
        calls.push((start, runs.to_vec()))
    });
    calls
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    SendTo,
    Sendmmsg,
    Gso,
    /// The datagrams of messages of the verb under test, grouped into GSO runs and sendmmsg
    /// calls as softverbs sends them towards loopback.
    VerbDatagrams,
    /// The same datagrams as RoCE packets from the cheapest sender: laid out as the engine
    /// sends them, their ICRC computed before every send ([`RocePackets`]).
    RoceFloor,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::SendTo => "send_to + recvmmsg",
            Method::Sendmmsg => "sendmmsg + recvmmsg",
            Method::Gso => "GSO + GRO",
            Method::VerbDatagrams => "verb datagrams, GSO + GRO",
            Method::RoceFloor => "verb datagrams as RoCE packets (ICRC each send), GSO + GRO",
        }
    }

    fn uses_gso(self) -> bool {
        matches!(
            self,
            Method::Gso | Method::VerbDatagrams | Method::RoceFloor
        )
    }
}

/// What a receiver counted: datagrams, their bytes, and the seconds they spanned.
struct Received {
    datagrams: u64,
    bytes: u64,
    secs: f64,
}

/// What arrived in `SEND_FOR` of sending `datagram`-byte datagrams with `method` (for
/// `VerbDatagrams` and `RoceFloor`, messages of the `packets` instead: header and payload
/// bytes, see [`verb_packets`]); `None` if the kernel lacks the method.
fn blast(
    method: Method,
    datagram: usize,
    packets: &[(usize, usize)],
) -> io::Result<Option<Received>> {
    let message = datagram_sizes(packets);
    let tx = socket(Ipv4Addr::new(127, 0, 0, 1))?;
    let rx = socket(Ipv4Addr::new(127, 0, 0, 2))?;
    let dst = rx.local_addr()?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    if method == Method::Gso && batch_sys::set_udp_segment(&tx, datagram as u16).is_err() {
        return Ok(None);
    }
    if method.uses_gso() && batch_sys::set_udp_gro(&rx, true).is_err() {
        return Ok(None);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || -> io::Result<Received> {
        let (mut datagrams, mut bytes) = (0u64, 0u64);
        let mut first = None;
        let mut last = Instant::now();
        let mut quiet_since: Option<Instant> = None;
        let mut slots = RecvSlots::new(64, if method.uses_gso() { 65_536 } else { datagram });
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
                        let segment = slots.segment_bytes(i);
                        datagrams += if segment == 0 {
                            1
                        } else {
                            len.div_ceil(segment) as u64
                        };
                        bytes += len as u64;
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
        Ok(Received {
            datagrams,
            bytes,
            secs,
        })
    });
    let payload = vec![0x5au8; datagram];
    let gso_segments = (batch_sys::GSO_MAX_BYTES / datagram).clamp(1, batch_sys::MAX_BATCH);
    let gso_buf = vec![0x5au8; gso_segments * datagram];
    let list: Vec<(&[u8], SocketAddr)> = (0..BATCH).map(|_| (payload.as_slice(), dst)).collect();
    // Enough messages to fill a sendmmsg call, laid out back to back in one buffer that
    // every call sends again: the cheapest way raw UDP has to send these datagrams.
    let copies = (batch_sys::MAX_SEND_DATAGRAMS / message.len().max(1)).max(1);
    let verb_buf = vec![0x5au8; copies * message.iter().sum::<usize>()];
    let mut rest = verb_buf.as_slice();
    let verb_list: Vec<(&[u8], SocketAddr)> = (0..copies)
        .flat_map(|_| &message)
        .map(|&n| {
            let (datagram, tail) = rest.split_at(n);
            rest = tail;
            (datagram, dst)
        })
        .collect();
    let verb_calls = sendmmsg_calls(&verb_list);
    let mut floor = match method {
        Method::RoceFloor => {
            let src = tx.local_addr()?;
            Some(RocePackets::new(packets, copies, src, dst).ok_or(io::ErrorKind::Unsupported)?)
        }
        _ => None,
    };
    let started = Instant::now();
    let mut error = None;
    while started.elapsed() < SEND_FOR {
        let r = match method {
            Method::SendTo => tx.send_to(&payload, dst).map(|_| ()),
            Method::Sendmmsg => batch_sys::send_batch(&tx, &list).map(|_| ()),
            Method::Gso => tx.send_to(&gso_buf, dst).map(|_| ()),
            Method::VerbDatagrams => verb_calls.iter().try_for_each(|(start, runs)| {
                batch_sys::send_runs(&tx, &verb_list[*start..], runs).map(|_| ())
            }),
            Method::RoceFloor => floor.as_mut().map_or(Ok(()), |floor| {
                floor.seal();
                let pieces = floor.pieces();
                verb_calls.iter().try_for_each(|(start, runs)| {
                    batch_sys::send_runs(&tx, &pieces[*start..], runs).map(|_| ())
                })
            }),
        };
        match r {
            Ok(()) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::ENOBUFS)
                    || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e)
                if method.uses_gso()
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP)
                    ) =>
            {
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

/// The median and the 99th percentile half round trip of a ping-pong of `datagram`-byte
/// datagrams whose two sides wait as `wait` says, microseconds.
fn ping_pong(datagram: usize, wait: Wait) -> io::Result<(f64, f64)> {
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
    // The test's own statistics, so that both sides of a ratio take the same quantile.
    let stats = LatResult::from_samples(datagram, &mut samples, true);
    Ok((stats.median_us, stats.p99_us))
}

/// Calls per timed batch of [`per_call_ns`].
const CALLS_PER_BATCH: u32 = 20_000;
/// Timed batches; the median batch's figure is taken.
const BATCHES: usize = 5;

/// What one call of `call` costs, ns: the median of [`BATCHES`] timed batches of
/// [`CALLS_PER_BATCH`] calls.
pub fn per_call_ns(mut call: impl FnMut()) -> f64 {
    let mut batches: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..CALLS_PER_BATCH {
                call();
            }
            started.elapsed().as_nanos() as f64 / f64::from(CALLS_PER_BATCH)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[BATCHES / 2]
}

/// What a non-blocking receive that finds nothing costs raw UDP, ns: the busy-polled
/// ping-pong makes one per turn of its loop, as an application polling an empty CQ makes a
/// `poll_cq` (whose cost, `LatResult::empty_poll_ns`, the half round trip follows one for
/// one).
fn empty_receive_ns() -> io::Result<f64> {
    let sock = socket(Ipv4Addr::new(127, 0, 0, 1))?;
    sock.set_nonblocking(true)?;
    let mut buf = [0u8; 64];
    Ok(per_call_ns(|| {
        let _ = sock.recv_from(&mut buf);
    }))
}

/// The baseline of a `size`-byte message under `s` (its MTU; the datagrams of its test's
/// verb, a WRITE's for `udp-baseline` itself).
pub fn measure(s: &Settings, size: usize) -> io::Result<Baseline> {
    let datagram = datagram_bytes(size, s.mtu as usize);
    let payload = datagram - ROCE_OVERHEAD;
    let verb = s.test.verb().unwrap_or(Verb::Write);
    let packets = verb_packets(verb, size, s.mtu as usize);
    let message = datagram_sizes(&packets);
    let message_wire: usize = message.iter().sum();
    let message_bytes = if verb == Verb::Atomic { 8 } else { size };
    let mut b = Baseline {
        datagram_bytes: datagram,
        verb: verb.wire_name().to_string(),
        verb_datagrams: message.clone(),
        ..Baseline::default()
    };
    // The latency tests' yardstick first, right after the test it divides: the blasts and
    // the blocking ping-pong take seconds, over which a shared host's speed drifts. In four
    // alternating `send_lat --loopback -s 8 --baseline --rounds 5` runs each, the rounds'
    // ratios spread 1.33-1.88x (largest over smallest of a run) with the ping-pong last,
    // 1.06-1.27x with it first; the medians stayed (1.38-1.47x against 1.36-1.48x).
    (b.half_rtt_spin_us, b.half_rtt_spin_t99_us) = ping_pong(datagram, Wait::Spin)?;
    b.empty_receive_ns = empty_receive_ns()?;
    for method in [
        Method::SendTo,
        Method::Sendmmsg,
        Method::Gso,
        Method::VerbDatagrams,
        Method::RoceFloor,
    ] {
        // The floor is read against a bandwidth test (or alone): a latency test's rounds
        // are not made longer by it.
        if method == Method::RoceFloor && s.test.is_latency() {
            continue;
        }
        let name = method.name().replace("verb", &b.verb);
        match blast(method, datagram, &packets)? {
            Some(r) if r.secs > 0.0 => {
                // Goodput: the message bytes the datagrams carried.
                let goodput = if matches!(method, Method::VerbDatagrams | Method::RoceFloor) {
                    r.bytes as f64 * message_bytes as f64 / message_wire as f64
                } else {
                    r.datagrams as f64 * payload as f64
                };
                let mbs = goodput / r.secs / 1e6;
                let mpps = r.datagrams as f64 / r.secs / 1e6;
                if method == Method::VerbDatagrams {
                    b.bw_mbs = mbs;
                } else if method == Method::RoceFloor {
                    b.roce_floor_mbs = mbs;
                } else if mbs > b.uniform_mbs {
                    b.uniform_mbs = mbs;
                    b.uniform_method = name.clone();
                }
                b.methods.push((name, mbs, mpps));
            }
            Some(_) => b.methods.push((name, 0.0, 0.0)),
            None => b.methods.push((format!("{name} (unavailable)"), 0.0, 0.0)),
        }
    }
    // The stricter of the two waits is the baseline: on a virtual machine a wake-up can
    // cost more than the round trip, and softverbs perf busy-polls as perftest does.
    (b.half_rtt_block_us, _) = ping_pong(datagram, Wait::Block)?;
    b.half_rtt_us = b.half_rtt_block_us.min(b.half_rtt_spin_us);
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The UDP payload sizes of the packets of one message ([`verb_packets`]).
    fn verb_datagrams(verb: Verb, size: usize, mtu: usize) -> Vec<usize> {
        datagram_sizes(&verb_packets(verb, size, mtu))
    }

    #[test]
    fn a_write_puts_its_reth_on_the_first_packet_and_pads_the_last() {
        let write = |size, mtu| verb_datagrams(Verb::Write, size, mtu);
        assert_eq!(write(65536, 4096), {
            let mut v = vec![4096 + 16 + 16];
            v.extend([4096 + 16; 15]);
            v
        });
        assert_eq!(write(64, 4096), vec![64 + 32]);
        assert_eq!(write(5000, 4096), vec![4096 + 32, 904 + 16]);
        assert_eq!(write(4099, 4096), vec![4096 + 32, 4 + 16]);
        assert_eq!(write(0, 1024), vec![4 + 32]);
        // The same packets as (headers, payload): what the RoCE floor lays out.
        let packets = verb_packets(Verb::Write, 5000, 4096);
        assert_eq!(packets, vec![(12 + 16, 4096), (12, 904)]);
    }

    #[test]
    fn read_responses_carry_an_aeth_first_and_last_sends_none_atomics_one_request() {
        let read = |size, mtu| verb_datagrams(Verb::Read, size, mtu);
        assert_eq!(read(3 * 1024, 1024), vec![1024 + 20, 1024 + 16, 1024 + 20]);
        assert_eq!(read(2048, 1024), vec![1024 + 20, 1024 + 20]);
        assert_eq!(read(10, 1024), vec![12 + 20]);
        let send = |size, mtu| verb_datagrams(Verb::Send, size, mtu);
        assert_eq!(send(2049, 1024), vec![1040, 1040, 4 + 16]);
        assert_eq!(verb_datagrams(Verb::Atomic, 8, 4096), vec![12 + 28 + 4]);
    }

    /// `n` messages of `message` datagrams, all to one destination.
    fn messages(message: &[usize], n: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        (0..n)
            .flat_map(|_| message.iter().map(move |&len| (vec![0u8; len], dst)))
            .collect()
    }

    fn calls_of(list: &[(Vec<u8>, SocketAddr)]) -> Vec<(usize, Vec<usize>)> {
        let views: Vec<(&[u8], SocketAddr)> = list.iter().map(|(b, a)| (&b[..], *a)).collect();
        sendmmsg_calls(&views)
    }

    #[test]
    fn write_datagrams_are_grouped_as_the_engine_sends_them() {
        // The first packet (RETH) takes the second as its shorter tail; the other 14 are a
        // run of their own.
        let write = verb_datagrams(Verb::Write, 65536, 4096);
        assert_eq!(calls_of(&messages(&write, 1)), vec![(0, vec![2, 14])]);
        // 16 messages fill one call of 256 datagrams; a 17th starts the next.
        let calls = calls_of(&messages(&write, 17));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].1, [2, 14].repeat(16));
        assert_eq!(calls[1], (256, vec![2, 14]));
        // 1 MiB at 4096: runs of at most 15 segments (what fits one IPv4 datagram).
        let big = verb_datagrams(Verb::Write, 1 << 20, 4096);
        let runs: Vec<usize> = calls_of(&messages(&big, 1))
            .into_iter()
            .flat_map(|(_, r)| r)
            .collect();
        assert_eq!(runs.iter().sum::<usize>(), 256);
        assert_eq!(runs[0], 2);
        assert!(runs[1..].iter().all(|&r| r <= 15));
        // Small messages: equal datagrams to one destination form runs of 64.
        let calls = calls_of(&messages(&verb_datagrams(Verb::Write, 64, 4096), 256));
        assert_eq!(calls, vec![(0, vec![64; 4])]);
    }
}
