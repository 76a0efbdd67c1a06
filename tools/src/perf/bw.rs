//! The bandwidth tests: the client keeps `tx_depth` WRs in flight on every QP (posting
//! `post_list` per call, round-robin over the QPs, one WR in `cq_mod` signaled) and counts
//! what completes; for SEND the server keeps receives posted and counts them.

use std::time::{Duration, Instant};

use softverbs::{
    RecvWr, RemoteAddr, SendFlags, SendWr, VerbsError, VerbsResult, WcStatus, WorkCompletion,
    WrOpcode,
};

use super::args::{Settings, Verb};
use super::backoff::{Backoff, CLOCK_EVERY};
use super::oob::PeerWatch;
use super::peak::PeakMeter;
use super::progress::Progress;
use super::report::BwResult;
use super::setup::{pattern_byte, Side};
use crate::perftest_oob::{PerftestComm, PerftestKeys};

/// Bits of a wr_id that carry the WR's index within its QP (the QP index is above).
const INDEX_BITS: u32 = 40;
/// Longest time without a completion while WRs are outstanding before the run is declared
/// stuck (a peer that never answers: with retry_cnt 7 the QP retries for ever, as rxe's
/// does). Generous: rxe under emulation takes seconds for one 8 MiB message.
const STUCK: Duration = Duration::from_secs(60);
/// After this long without a completion the client looks (again, every as long) whether
/// the server is still there: a server that exited closed the side channel.
const PEER_ALIVE_CHECK: Duration = Duration::from_secs(1);

fn failed(wc: &WorkCompletion) -> VerbsError {
    VerbsError::Io {
        errno: 5,
        message: format!(
            "work request {:#x} completed with {:?} (vendor error {})",
            wc.wr_id, wc.status, wc.vendor_err
        ),
    }
}

/// The WR template of `verb` for a message of `size` bytes towards `peer`.
pub fn template(
    side: &Side,
    verb: Verb,
    size: usize,
    inline: bool,
    peer: &PerftestKeys,
) -> VerbsResult<SendWr> {
    let len = if verb == Verb::Atomic { 8 } else { size };
    let sg_list = if len == 0 {
        Vec::new()
    } else {
        vec![side.mr.sge(side.src_off, len as u32)?]
    };
    let mut wr = SendWr::send(0, sg_list);
    wr.opcode = match verb {
        Verb::Write => WrOpcode::RdmaWrite,
        Verb::Read => WrOpcode::RdmaRead,
        Verb::Send => WrOpcode::Send,
        Verb::Atomic => WrOpcode::AtomicFetchAndAdd,
    };
    wr.remote = RemoteAddr {
        remote_addr: peer.vaddr,
        rkey: peer.rkey,
    };
    wr.compare_add = 1;
    wr.send_flags = if inline && matches!(verb, Verb::Write | Verb::Send) {
        SendFlags::INLINE
    } else {
        SendFlags::empty()
    };
    Ok(wr)
}

/// Prepares the client's buffer for a run of `size` bytes: the pattern to send, or zeros to
/// read into.
pub fn prepare_client(side: &Side, verb: Verb, size: usize) -> VerbsResult<()> {
    // Only this side's own half: the peer may already be writing into the lent half (a
    // WRITE ping-pong's server writes first, and a sweep has no barrier between sizes).
    let data: Vec<u8> = match verb {
        Verb::Write | Verb::Send => (0..size).map(|i| pattern_byte(size, i)).collect(),
        // Where the responses land: zeros, so that only what arrives passes the check.
        Verb::Read | Verb::Atomic => vec![0; size.max(8)],
    };
    side.mr.write(side.src_off, &data)
}

/// Prepares the server's buffer: the pattern to be read (that of a `size`-byte run; every
/// READ of a sweep reads a prefix of the largest size's), zeros to be written into, or a
/// zero counter to add to.
pub fn prepare_server(side: &Side, verb: Verb, size: usize) -> VerbsResult<()> {
    side.mr.fill(0)?;
    match verb {
        Verb::Read => {
            let data: Vec<u8> = (0..size).map(|i| pattern_byte(size, i)).collect();
            side.mr.write(0, &data)
        }
        Verb::Write | Verb::Send | Verb::Atomic => Ok(()),
    }
}

/// The `size` bytes of `side`'s buffer at `offset` equal to the start of the pattern of a
/// `pattern_of`-byte run (the run's own size, or a READ sweep's largest: see
/// [`prepare_server`]); EIO naming the first difference otherwise.
pub fn verify_pattern(
    side: &Side,
    offset: usize,
    size: usize,
    pattern_of: usize,
) -> VerbsResult<u64> {
    let mut got = vec![0u8; size];
    side.mr.read(offset, &mut got)?;
    match got
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(pattern_of, i))
    {
        None => Ok(size as u64),
        Some((i, b)) => Err(VerbsError::Io {
            errno: 5,
            message: format!(
                "data check failed: byte {i} of the {size}-byte message is {b:#04x}, expected {:#04x}",
                pattern_byte(pattern_of, i)
            ),
        }),
    }
}

/// The 8-byte counter the atomic tests add to.
pub fn read_counter(side: &Side) -> VerbsResult<u64> {
    let mut b = [0u8; 8];
    side.mr.read(0, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// The client side of a bandwidth run of `size` bytes against the peer's QPs.
pub fn client(
    side: &Side,
    s: &Settings,
    size: usize,
    peer: &[PerftestKeys],
    comm: &PerftestComm,
) -> VerbsResult<BwResult> {
    let verb = s.test.verb().ok_or_else(|| VerbsError::inval("no verb"))?;
    let nq = side.qps.len();
    let inline = size <= s.inline_size as usize;
    let mut wrs: Vec<Vec<SendWr>> = Vec::with_capacity(nq);
    for p in peer {
        let t = template(side, verb, size, inline, p)?;
        wrs.push(vec![t; s.post_list as usize]);
    }
    let base_flags = wrs.first().map_or(SendFlags::empty(), |w| w[0].send_flags);
    let per_qp_limit = match s.duration {
        Some(_) => u64::MAX,
        None => s.iters,
    };
    let mut limit = vec![per_qp_limit; nq];
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let mut last_signaled = vec![None::<u64>; nq];
    let mut wcs = vec![WorkCompletion::default(); s.poll_batch as usize];
    let depth = s.tx_depth as u64;
    let batch = s.post_list as u64;
    let cq_mod = s.cq_mod as u64;
    let mut progress = Progress::start(format!("{} {size} B", s.test.name()));
    let mut backoff = Backoff::new(&side.ctx);
    let mut completions = 0u64;
    let started = Instant::now();
    let deadline = s.duration.map(|d| started + d);
    let mut stopping = deadline.is_none();
    let mut peak = PeakMeter::new(started);
    let mut total_done = 0u64;
    let mut last_completion = started;
    let mut next_alive_check = started + PEER_ALIVE_CHECK;
    let mut idle_loops = 0u32;
    let total_goal = if deadline.is_none() {
        Some(per_qp_limit * nq as u64)
    } else {
        None
    };
    loop {
        let mut progressed = false;
        for q in 0..nq {
            loop {
                let in_flight = posted[q] - done[q];
                let left = limit[q] - posted[q];
                if left == 0 || in_flight >= depth {
                    break;
                }
                let n = batch.min(left).min(depth - in_flight);
                let list = &mut wrs[q][..n as usize];
                for (k, wr) in list.iter_mut().enumerate() {
                    let idx = posted[q] + k as u64;
                    wr.wr_id = ((q as u64) << INDEX_BITS) | idx;
                    let signal = (idx + 1).is_multiple_of(cq_mod) || idx + 1 == limit[q];
                    wr.send_flags = base_flags;
                    if signal {
                        wr.send_flags |= SendFlags::SIGNALED;
                        last_signaled[q] = Some(idx);
                    }
                }
                side.qps[q].post_send(list).map_err(|e| e.error)?;
                posted[q] += n;
                progressed = true;
            }
        }
        let k = side.cq.poll(&mut wcs)?;
        for wc in &wcs[..k] {
            if wc.status != WcStatus::Success {
                return Err(failed(wc));
            }
            let q = (wc.wr_id >> INDEX_BITS) as usize;
            let idx = wc.wr_id & ((1 << INDEX_BITS) - 1);
            if q >= nq || idx < done[q] {
                return Err(VerbsError::Io {
                    errno: 5,
                    message: format!("unexpected completion wr_id {:#x}", wc.wr_id),
                });
            }
            total_done += idx + 1 - done[q];
            done[q] = idx + 1;
            completions += 1;
        }
        idle_loops = if progressed || k > 0 {
            0
        } else {
            idle_loops + 1
        };
        // The clock is read after completions, and on one idle loop in CLOCK_EVERY (a read
        // can be a system call on a VM); what needs it (peak rate, -D, progress, the stuck
        // bound) is then that many loops late at most.
        if k == 0 && (idle_loops == 0 || !idle_loops.is_multiple_of(CLOCK_EVERY)) {
            if progressed {
                backoff.reset();
            } else {
                backoff.idle();
            }
            continue;
        }
        let now = Instant::now();
        if k > 0 {
            progressed = true;
            last_completion = now;
        } else if now >= next_alive_check && now - last_completion >= PEER_ALIVE_CHECK {
            next_alive_check = now + PEER_ALIVE_CHECK;
            comm.check_peer_alive().map_err(|e| VerbsError::Io {
                errno: e.errno(),
                message: format!(
                    "{e}; {} of {} messages completed, none for {:.1} s",
                    total_done,
                    total_goal.map_or("?".to_string(), |g| g.to_string()),
                    (now - last_completion).as_secs_f64()
                ),
            })?;
        }
        if k == 0 && now - last_completion > STUCK && (0..nq).any(|q| posted[q] > done[q]) {
            return Err(VerbsError::Io {
                errno: libc::ETIMEDOUT,
                message: format!(
                    "no completion for {} s ({total_done} messages done) though the server is \
                     still connected: does its device receive on the UDP port this side sends to?",
                    STUCK.as_secs()
                ),
            });
        }
        peak.observe(now, &posted, &done);
        if !stopping && deadline.is_some_and(|d| now >= d) {
            // Stop posting; the last WR of each QP must be signaled so that everything
            // posted is seen to complete: post one more, signaled, where it is not.
            stopping = true;
            for q in 0..nq {
                limit[q] = posted[q];
                if posted[q] > 0 && last_signaled[q] != Some(posted[q] - 1) {
                    limit[q] += 1;
                }
            }
        }
        if stopping && (0..nq).all(|q| done[q] == limit[q] && posted[q] == limit[q]) {
            break;
        }
        if progress.due(now) {
            let mbs = total_done as f64 * size as f64 / (now - started).as_secs_f64() / 1e6;
            progress.tick(
                now,
                total_done,
                total_goal,
                s.duration,
                &format!("{mbs:.1} MB/s"),
            );
        }
        if progressed {
            backoff.reset();
        } else {
            backoff.idle();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    progress.finish();
    let rate = total_done as f64 / secs;
    // The whole run is an interval too (and the only one of a run shorter than a window).
    let peak = peak.peak_per_sec().max(rate);
    let verified = match verb {
        Verb::Read if !s.no_verify => verify_pattern(side, side.src_off, size, side.max_size)?,
        _ => 0,
    };
    Ok(BwResult {
        bytes: size,
        iterations: total_done,
        secs,
        peak_mbs: peak * size as f64 / 1e6,
        avg_mbs: rate * size as f64 / 1e6,
        msg_rate_mpps: rate / 1e6,
        completions,
        verified_bytes: verified,
    })
}

/// The server side of SEND bandwidth: keeps `rx_depth` receives posted on every QP and
/// counts what arrives until the client reaches the next side-channel exchange (all its
/// sends completed, so every receive completion is already queued); returns the receive
/// completions and checks each carried `size` bytes.
pub fn server_recv(side: &Side, size: usize, comm: &PerftestComm) -> VerbsResult<u64> {
    let recv_len = side.max_size;
    let mut got = 0u64;
    let mut wcs = vec![WorkCompletion::default(); 64];
    let mut backoff = Backoff::new(&side.ctx);
    let mut watch = PeerWatch::new();
    let mut peer_done = false;
    let qp_index: std::collections::HashMap<u32, usize> = side
        .qps
        .iter()
        .enumerate()
        .map(|(i, q)| (q.qp_num(), i))
        .collect();
    let recv: Vec<RecvWr> = side
        .qps
        .iter()
        .map(|_| -> VerbsResult<RecvWr> {
            Ok(RecvWr {
                wr_id: 0,
                sg_list: if recv_len == 0 {
                    Vec::new()
                } else {
                    vec![side.mr.sge(0, recv_len as u32)?]
                },
            })
        })
        .collect::<VerbsResult<_>>()?;
    loop {
        let k = side.cq.poll(&mut wcs)?;
        for wc in &wcs[..k] {
            if wc.status != WcStatus::Success {
                return Err(failed(wc));
            }
            if wc.byte_len as usize != size {
                return Err(VerbsError::Io {
                    errno: 5,
                    message: format!("a receive of {} bytes, expected {size}", wc.byte_len),
                });
            }
            let q = *qp_index.get(&wc.qp_num).ok_or_else(|| VerbsError::Io {
                errno: 5,
                message: format!("a completion of unknown QP {:#x}", wc.qp_num),
            })?;
            got += 1;
            side.qps[q]
                .post_recv(std::slice::from_ref(&recv[q]))
                .map_err(|e| e.error)?;
        }
        if k > 0 {
            backoff.reset();
            continue;
        }
        if peer_done {
            return Ok(got);
        }
        if let Some(waiting) = watch.check(comm)? {
            // One more poll after the peer is seen done: its last completions are queued.
            peer_done = waiting;
            continue;
        }
        backoff.idle();
    }
}

/// Posts `side.rx_depth` receives on every QP (SEND tests), each for the largest message of
/// the run so that those left from one size serve the next.
pub fn post_receives(side: &Side) -> VerbsResult<()> {
    let size = side.max_size;
    for qp in &side.qps {
        let wr = RecvWr {
            wr_id: 0,
            sg_list: if size == 0 {
                Vec::new()
            } else {
                vec![side.mr.sge(0, size as u32)?]
            },
        };
        let list = vec![wr; side.rx_depth as usize];
        qp.post_recv(&list).map_err(|e| e.error)?;
    }
    Ok(())
}
