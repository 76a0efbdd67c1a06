//! The latency tests on QP 0: WRITE and SEND ping-pong (both sides active, half the round
//! trip reported), READ and FETCH_AND_ADD (the client alone, the whole round trip).

use std::time::{Duration, Instant};

use softverbs::{
    RecvWr, SendFlags, SendWr, VerbsError, VerbsResult, WcOpcode, WcStatus, WorkCompletion,
};

use super::args::{Settings, Verb};
use super::backoff::{clock_due, Backoff};
use super::bw::{template, verify_pattern};
use super::oob::PeerWatch;
use super::progress::Progress;
use super::report::LatResult;
use super::setup::Side;
use crate::perftest_oob::{PerftestComm, PerftestKeys};

/// Longest wait for one round trip before the run is declared stuck.
const STUCK: Duration = Duration::from_secs(30);
/// Empty polls per look at the clock for [`STUCK`].
const STUCK_CHECK_EVERY: u32 = 256;
/// How long a WRITE ping-pong server that counts still waits for the client's last WRITE
/// once the client has moved on past the test.
const LAST_WRITE_GRACE: Duration = Duration::from_secs(1);

/// Whether a wait that began at `started` has lasted over [`STUCK`]: counts the calls in
/// `polls` and reads the clock on one in [`STUCK_CHECK_EVERY`].
fn stuck(started: Instant, polls: &mut u32) -> bool {
    clock_due(polls, STUCK_CHECK_EVERY) && started.elapsed() > STUCK
}

fn io(message: String) -> VerbsError {
    VerbsError::Io { errno: 5, message }
}

/// The last byte of the WRITE of round trip `i` (from 0): perftest's `(char)k` for the
/// k-th WRITE, k from 1; it differs from the last tag, and from the cleared buffer's 0
/// until round trip 255.
fn tag(i: u64) -> u8 {
    (i + 1) as u8
}

/// What the completions reaped so far tell.
#[derive(Default)]
struct Reaped {
    /// Receive completions.
    recvs: u64,
    /// Sends known complete: one past the highest wr_id of a send completion (message `n`
    /// is posted with wr_id `n`, and a send queue completes in order, so the unsignaled
    /// sends before a signaled one are complete with it).
    sends_done: u64,
}

/// Reaps completions (checking them) into `seen`.
fn reap(
    side: &Side,
    wcs: &mut [WorkCompletion],
    seen: &mut Reaped,
    size: usize,
) -> VerbsResult<usize> {
    let k = side.cq.poll(wcs)?;
    for wc in &wcs[..k] {
        if wc.status != WcStatus::Success {
            return Err(io(format!("completion {:#x}: {:?}", wc.wr_id, wc.status)));
        }
        if wc.opcode == WcOpcode::Recv {
            if wc.byte_len as usize != size {
                return Err(io(format!(
                    "received {} bytes, expected {size}",
                    wc.byte_len
                )));
            }
            seen.recvs += 1;
        } else {
            seen.sends_done = seen.sends_done.max(wc.wr_id + 1);
        }
    }
    Ok(k)
}

/// Waits until the first `posted` sends are complete. A side must not touch the buffer of
/// a send still in flight (the next size prepares it) nor leave a size or the test before
/// its last message has left: a WRITE's data is read from the buffer as its packets go out,
/// and a slow peer (rxe under emulation) may still be acknowledging the ones before it.
fn finish_sends(
    side: &Side,
    wcs: &mut [WorkCompletion],
    seen: &mut Reaped,
    posted: u64,
    size: usize,
) -> VerbsResult<()> {
    let mut backoff = Backoff::for_latency(&side.ctx);
    wait_sends(side, wcs, seen, posted, size, &mut backoff, Instant::now())
}

/// Reaps completions until the first `posted` sends are complete, idling through `backoff`;
/// an error once the wait, which began at `started`, is stuck.
fn wait_sends(
    side: &Side,
    wcs: &mut [WorkCompletion],
    seen: &mut Reaped,
    posted: u64,
    size: usize,
    backoff: &mut Backoff,
    started: Instant,
) -> VerbsResult<()> {
    let mut polls = 0;
    while seen.sends_done < posted {
        if reap(side, wcs, seen, size)? == 0 {
            if stuck(started, &mut polls) {
                return Err(io(format!(
                    "{} of {posted} sends of {size} B completed",
                    seen.sends_done
                )));
            }
            backoff.idle();
        }
    }
    Ok(())
}

/// The receive WR of SEND ping-pongs (the largest size, so it fits every size).
fn recv_wr(side: &Side) -> VerbsResult<RecvWr> {
    Ok(RecvWr {
        wr_id: 1,
        sg_list: if side.max_size == 0 {
            Vec::new()
        } else {
            vec![side.mr.sge(0, side.max_size as u32)?]
        },
    })
}

/// Posts the receives of a SEND ping-pong on QP 0.
pub fn post_ping_receives(side: &Side) -> VerbsResult<()> {
    let wr = recv_wr(side)?;
    let list = vec![wr; side.rx_depth as usize];
    side.qps[0].post_recv(&list).map_err(|e| e.error)
}

fn last_byte(side: &Side, size: usize) -> VerbsResult<u8> {
    let mut b = [0u8; 1];
    side.mr.read(size - 1, &mut b)?;
    Ok(b[0])
}

/// One round trip of the client, per test; returns the time it took.
struct Pinger<'a> {
    side: &'a Side,
    verb: Verb,
    size: usize,
    wr: SendWr,
    recv: RecvWr,
    wcs: Vec<WorkCompletion>,
    seen: Reaped,
    /// Receives posted back for the SENDs of `seen.recvs`.
    recvs_reposted: u64,
    /// The number of the run's last message; `None` under `-D` (not known beforehand).
    last: Option<u64>,
    base_flags: SendFlags,
    /// Kept across round trips: it learns how long they take.
    backoff: Backoff,
    /// What the first FETCH_AND_ADD returned.
    first_old: Option<u64>,
    /// One message in this many is signaled (`-Q`).
    cq_mod: u64,
}

/// Whether message `n` of a WRITE or SEND ping-pong client is signaled: one in `cq_mod`,
/// and the last (`last`; every message when the last is not known beforehand, as under
/// `-D`), so that the side learns when all its sends are complete.
fn signaled(n: u64, last: Option<u64>, cq_mod: u64) -> bool {
    last.is_none_or(|l| n == l) || one_in_every(n, cq_mod)
}

/// One message in `cq_mod` (`-Q`, at most the tx depth: perftest's latency tests signal
/// every message at their default depth of 1, and wait for it).
fn one_in_every(n: u64, cq_mod: u64) -> bool {
    (n + 1).is_multiple_of(cq_mod.max(1))
}

/// Posts `wr` on QP 0 as message `n` of a ping-pong side: wr_id `n`, flags `base`, plus
/// SIGNALED if `signal`.
fn post_nth(
    side: &Side,
    wr: &mut SendWr,
    base: SendFlags,
    n: u64,
    signal: bool,
) -> VerbsResult<()> {
    wr.wr_id = n;
    wr.send_flags = base;
    if signal {
        wr.send_flags |= SendFlags::SIGNALED;
    }
    side.qps[0]
        .post_send(std::slice::from_ref(wr))
        .map_err(|e| e.error)
}

impl Pinger<'_> {
    /// Posts a receive back for each SEND taken since the last call (before the next ping,
    /// as perftest).
    fn repost_receives(&mut self) -> VerbsResult<()> {
        while self.recvs_reposted < self.seen.recvs {
            self.side.qps[0]
                .post_recv(std::slice::from_ref(&self.recv))
                .map_err(|e| e.error)?;
            self.recvs_reposted += 1;
        }
        Ok(())
    }

    fn post(&mut self, i: u64, signal: bool) -> VerbsResult<()> {
        post_nth(self.side, &mut self.wr, self.base_flags, i, signal)
    }

    /// Posts ping-pong message `i`, signaled as [`signaled`] says; a signaled one is waited
    /// for at once, as perftest's latency loops do (`started`: when the round trip began).
    fn post_ping(&mut self, i: u64, started: Instant) -> VerbsResult<()> {
        let signal = signaled(i, self.last, self.cq_mod);
        self.post(i, signal)?;
        if !signal {
            return Ok(());
        }
        wait_sends(
            self.side,
            &mut self.wcs,
            &mut self.seen,
            i + 1,
            self.size,
            &mut self.backoff,
            started,
        )
    }

    /// Round trip `i`, which began at `started`.
    fn round_trip(&mut self, i: u64, started: Instant) -> VerbsResult<()> {
        let mut polls = 0;
        match self.verb {
            Verb::Write => {
                // As ib_write_lat's client: wait for the server's k-th WRITE, answer it.
                let t = tag(i);
                while last_byte(self.side, self.size)? != t {
                    reap(self.side, &mut self.wcs, &mut self.seen, self.size)?;
                    self.backoff.idle();
                    if stuck(started, &mut polls) {
                        return Err(io(format!("no WRITE from the server for round trip {i}")));
                    }
                }
                self.side
                    .mr
                    .write(self.side.src_off + self.size - 1, &[t])?;
                self.post_ping(i, started)?;
            }
            Verb::Send => {
                let want = self.seen.recvs + 1;
                // As perftest: the receive taken is posted back before the next SEND.
                self.repost_receives()?;
                self.post_ping(i, started)?;
                while self.seen.recvs < want {
                    reap(self.side, &mut self.wcs, &mut self.seen, self.size)?;
                    if self.seen.recvs < want {
                        self.backoff.idle();
                        if stuck(started, &mut polls) {
                            return Err(io(format!("no SEND back for round trip {i}")));
                        }
                    }
                }
            }
            Verb::Read | Verb::Atomic => {
                self.post(i, true)?;
                loop {
                    let k = self.side.cq.poll(&mut self.wcs[..1])?;
                    if k == 1 {
                        let wc = self.wcs[0];
                        if wc.status != WcStatus::Success || wc.wr_id != i {
                            return Err(io(format!("completion {:#x}: {:?}", wc.wr_id, wc.status)));
                        }
                        break;
                    }
                    self.backoff.idle();
                    if stuck(started, &mut polls) {
                        return Err(io(format!("no completion for round trip {i}")));
                    }
                }
                if self.verb == Verb::Atomic {
                    // FETCH_AND_ADD returns the counter before the add: one more each time,
                    // from whatever the server's buffer held (perftest's is random).
                    let mut b = [0u8; 8];
                    self.side.mr.read(self.side.src_off, &mut b)?;
                    let old = u64::from_ne_bytes(b);
                    let first = *self.first_old.get_or_insert(old);
                    if old != first.wrapping_add(i) {
                        return Err(io(format!(
                            "FETCH_AND_ADD {i} returned {old}, the first returned {first}"
                        )));
                    }
                }
            }
        }
        self.backoff.reset();
        Ok(())
    }
}

/// The client side of a latency run of `size` bytes against the peer's QP 0.
pub fn client(
    side: &Side,
    s: &Settings,
    size: usize,
    peer: &[PerftestKeys],
) -> VerbsResult<LatResult> {
    let verb = s.test.verb().ok_or_else(|| VerbsError::inval("no verb"))?;
    let inline = size <= s.inline_size as usize;
    let wr = template(side, verb, size, inline, &peer[0])?;
    let mut p = Pinger {
        side,
        verb,
        size,
        base_flags: wr.send_flags,
        wr,
        recv: recv_wr(side)?,
        wcs: vec![WorkCompletion::default(); 16],
        seen: Reaped::default(),
        recvs_reposted: 0,
        last: match s.duration {
            None => s.iters.checked_sub(1),
            Some(_) => None,
        },
        backoff: Backoff::for_latency(&side.ctx),
        first_old: None,
        cq_mod: s.cq_mod as u64,
    };
    let cap = s.iters.min(1 << 26) as usize;
    let mut samples: Vec<u64> =
        Vec::with_capacity(if s.duration.is_some() { 1 << 20 } else { cap });
    // Touched before the clock starts: the first write to each 4 KiB page of samples is a
    // page fault, which made every 512th round trip slow (in-process: each time over t_99).
    samples.resize(samples.capacity(), 0);
    samples.clear();
    let mut progress = Progress::start(format!("{} {size} B", s.test.name()));
    let started = Instant::now();
    let deadline = s.duration.map(|d| started + d);
    let mut i = 0u64;
    // One clock read per round trip, as perftest (which reads the TSC): a round trip begins
    // when the last one ended. On a VM whose clock source is not the TSC a read is a system
    // call of microseconds (see `backoff::CLOCK_EVERY`).
    let mut t0 = started;
    loop {
        if deadline.map_or(i >= s.iters, |d| t0 >= d) {
            break;
        }
        p.round_trip(i, t0)?;
        let t1 = Instant::now();
        samples.push((t1 - t0).as_nanos() as u64);
        i += 1;
        t0 = t1;
        if progress.due(t1) {
            progress.tick(t1, i, deadline.is_none().then_some(s.iters), s.duration, "");
            // Printing is not part of the next round trip.
            t0 = Instant::now();
        }
    }
    progress.finish();
    // A ping-pong; READs and atomics were waited for one by one.
    let half = matches!(verb, Verb::Write | Verb::Send);
    if half {
        finish_sends(side, &mut p.wcs, &mut p.seen, i, size)?;
    }
    // The next size starts with every receive posted.
    p.repost_receives()?;
    let mut result = LatResult::from_samples(size, &mut samples, half);
    if s.baseline {
        result.empty_poll_ns = Some(empty_poll_ns(side));
    }
    result.verified_bytes = match verb {
        Verb::Read if s.no_verify => 0,
        Verb::Read => verify_pattern(side, side.src_off, size, side.max_size)?,
        Verb::Atomic => 8 * i,
        Verb::Write => i,
        Verb::Send => size as u64 * i,
    };
    Ok(result)
}

/// What a poll of `side`'s CQ that finds nothing costs, ns, right after the test: its
/// device's link as the traffic left it, the peer still polling its own. Nothing is in
/// flight (every send completed, every receive posted back), so the polls find nothing; in
/// waits this long the poller probes for other threads once in 32 polls, which a ping-pong's
/// short waits seldom do.
#[inline(never)] // a frame of its own, which `tools/bench/instructions.sh` counts
fn empty_poll_ns(side: &Side) -> f64 {
    let mut wcs = [WorkCompletion::default(); 4];
    super::udp_baseline::per_call_ns(|| {
        let _ = side.cq.poll(&mut wcs);
    })
}

/// The server side of a WRITE ping-pong, as ib_write_lat's server: it writes first, then
/// waits for the client's answer, `-n` times (under `-D`, until the client reaches its next
/// side-channel exchange); returns the round trips done.
pub fn server_write(
    side: &Side,
    s: &Settings,
    size: usize,
    comm: &PerftestComm,
) -> VerbsResult<u64> {
    let mut wr = template_back(side, Verb::Write, size, comm)?;
    let base = wr.send_flags;
    let mut wcs = vec![WorkCompletion::default(); 16];
    let mut backoff = Backoff::for_latency(&side.ctx);
    let mut watch = PeerWatch::new();
    let count = s.duration.is_none().then_some(s.iters);
    // When the client was seen to move on: its last WRITE may still be on its way (it
    // does not wait for it to complete), so a counting server waits a little longer.
    let mut moved_on: Option<Instant> = None;
    let mut seen = Reaped::default();
    let mut i = 0u64;
    while count.is_none_or(|n| i < n) {
        let t = tag(i);
        side.mr.write(side.src_off + size - 1, &[t])?;
        // The client answers a WRITE only once it has arrived: this side need not learn when
        // its last one completes (and must not wait for it: the client may be gone by then,
        // and an ACK it owed lost with it).
        post_nth(side, &mut wr, base, i, one_in_every(i, s.cq_mod as u64))?;
        let started = Instant::now();
        let mut polls = 0;
        while last_byte(side, size)? != t {
            reap(side, &mut wcs, &mut seen, size)?;
            // Under -D the client stops when it likes; with a count, a client that went
            // on to its next exchange has stopped, early unless its last WRITE lands.
            if moved_on.is_none() && watch.check(comm)? == Some(true) {
                moved_on = Some(Instant::now());
            }
            match moved_on {
                Some(_) if count.is_none() => return Ok(i),
                Some(at) if at.elapsed() > LAST_WRITE_GRACE => return Ok(i),
                _ => {}
            }
            if count.is_some() && stuck(started, &mut polls) {
                return Err(io(format!("no WRITE from the client for round trip {i}")));
            }
            backoff.idle();
        }
        backoff.reset();
        i += 1;
    }
    // Reap the signaled WRITEs still in flight so the next size starts clean.
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(2) {
        reap(side, &mut wcs, &mut seen, size)?;
    }
    Ok(i)
}

/// The server side of a SEND ping-pong: answers each receive with a SEND, until the client
/// reaches the next side-channel exchange; returns the answers.
pub fn server_send(
    side: &Side,
    s: &Settings,
    size: usize,
    comm: &PerftestComm,
) -> VerbsResult<u64> {
    let mut wr = template_back(side, Verb::Send, size, comm)?;
    let base = wr.send_flags;
    let recv = recv_wr(side)?;
    let mut wcs = vec![WorkCompletion::default(); 16];
    let mut answered = 0u64;
    let mut seen = Reaped::default();
    let mut backoff = Backoff::for_latency(&side.ctx);
    let mut watch = PeerWatch::new();
    loop {
        reap(side, &mut wcs, &mut seen, size)?;
        if seen.recvs > answered {
            while answered < seen.recvs {
                // As ib_send_lat's server: the receive back first, then the answer. The
                // client takes every answer before it moves on: this side need not wait for
                // its answers to complete (a signaled one completes with the client's next
                // SEND, which carries its ACK).
                side.qps[0]
                    .post_recv(std::slice::from_ref(&recv))
                    .map_err(|e| e.error)?;
                post_nth(
                    side,
                    &mut wr,
                    base,
                    answered,
                    one_in_every(answered, s.cq_mod as u64),
                )?;
                answered += 1;
            }
            backoff.reset();
            continue;
        }
        if watch.check(comm)? == Some(true) {
            return Ok(answered);
        }
        backoff.idle();
    }
}

/// The server's WR back to the client (the client's QP 0 keys were given at connect time;
/// the server keeps them in the side channel's peer keys).
fn template_back(
    side: &Side,
    verb: Verb,
    size: usize,
    _comm: &PerftestComm,
) -> VerbsResult<SendWr> {
    let peer = side
        .peer
        .first()
        .ok_or_else(|| VerbsError::inval("not connected"))?;
    template(side, verb, size, size <= side.inline_size as usize, peer)
}

#[cfg(test)]
mod tests {
    use super::tag;

    #[test]
    fn write_tags_are_perftests_char_of_the_write_number() {
        // ib_write_lat writes (char)k as the last byte of its k-th WRITE, k from 1.
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 0);
        assert_eq!(tag(256), 1);
        assert!((0..1000).all(|i| tag(i) != tag(i + 1)));
    }
}
