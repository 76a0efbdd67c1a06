//! What an application thread that polls an empty CQ does with its CPU: while its yields
//! (`sched_yield`) run other threads it yields at every empty poll, else now and then, and
//! when its yields keep handing the CPU to another thread while some other CPU idles, it
//! moves itself off the shared CPU.
//!
//! Why yield: when every CPU is busy (a compiler beside the tests), the thread a poll waits
//! for, woken by the packet this thread sent, is usually queued on this very CPU: the kernel
//! places a woken thread beside its waker when no CPU is idle. A spinning poller then keeps
//! it off until its time slice ends: a loopback SEND ping-pong took 30-250 us per half
//! round trip, t_99 540 us, with one CPU-bound competitor on two cores. Yielding lets it
//! run (`softverbs perf send_lat --loopback -s 8 --baseline --contend 1`: 10.3 us, t_99
//! 26 us; blocking UDP 5.8 us). A thread whose yields run other threads yields at every
//! empty poll, the first included: both threads of a ping-pong beside one competitor end up
//! on one CPU, the competitor on the other (`perf sched`: one switch per poller per round
//! trip, the competitor's runs 12 ms on average), so each empty poll before the yield only
//! keeps the peer waiting. Against the earlier rule (spin twice, then yield on every other
//! empty poll), alternating `send_lat --contend 1` runs: median 1.97x (12 runs, all under
//! 2.25x) against 2.47x (8 runs, all over 2.15x) the blocking UDP ping-pong; `write_bw -s
//! 65536 --contend 1` 73.0% against 71.4% of UDP (4 each: the loss to the competitor that
//! once made the first polls spin, 64% -> 56% then, did not show). On an idle
//! machine a yield returns at once, and a thread whose yields find nobody to run soon
//! yields rarely ([`PROBE_EVERY`]).
//!
//! Why move: the same placement also happens on a quiet machine. A thread that slept (a
//! wait for traffic, a blocking side channel) is woken by its peer's packet onto the
//! peer's CPU, and two polling threads then share one CPU through their yields, about
//! 10 us per half round trip instead of 4.7, while the other CPU idles. The kernel's
//! load balancer leaves them there for tens of milliseconds (two threads that run all the
//! time are "cache hot"): a quarter of a 20,000-round-trip `send_lat` ran that way in
//! one run of three, which alone put t_99 over 10 us. So once [`MOVE_AFTER`] (or a few more,
//! a number per thread) checked yields in a row gave the CPU away (one yield in
//! [`CHECK_EVERY`] is checked, by the thread's count of involuntary context switches), and
//! the system's runnable threads are no more than this thread's
//! CPUs (so one of them idles), the thread takes its current CPU out of its affinity for
//! a moment: the kernel moves it to another one, and the original affinity is restored at
//! once (a placement, not a pin).
//!
//! Why wait: on a crowded machine (more than two runnable threads per CPU: 16 test pairs
//! on two cores), every thread that spins, even yielding, stays in its CPU's run queue,
//! and the thread with work waits behind all of them: 16 ping-pong pairs in one process on
//! two cores ran at 22x the median of one pair alone. So the look at the load that finds
//! the machine crowded turns the thread's empty polls, for [`WAIT_MODE_FOR`], into short
//! waits for the device's traffic (`wait_for_traffic`, at most [`WAIT_AT_MOST`]): a
//! sleeping poller leaves its CPU to the threads with work and is woken by its datagram,
//! as a blocking UDP receiver is. Then it yields again, and its yields tell whether the
//! machine is still that busy. `poll_cq` never waits longer than that bound, and only on
//! such a machine, where a yield gives the CPU away for as long. With one competitor per
//! two threads ([`Load::Busy`]) yielding stays better.

use std::cell::Cell;
use std::time::{Duration, Instant};

use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::unistd::Pid;

use super::device::Device;

/// A thread whose yields find nobody to run yields on one empty poll in this many, to see
/// whether that changed: each yield is a system call, and a datagram that arrives during
/// one waits for its end (0.1-0.2 us of a quiet ping-pong's half round trip). Only where
/// the polling thread receives for itself (a pollable link): elsewhere the engine thread
/// receives, and a poller that yields rarely keeps it waiting once it is woken on the
/// poller's CPU (the in-process ping-pong in the lab VM: 14 -> 23 us).
const PROBE_EVERY: u32 = 32;
/// Yields in a row that found nobody to run before a thread stops yielding often.
const QUIET_AFTER: u32 = 32;
/// Checked yields in a row that ran another thread before the thread considers moving, at least;
/// each thread adds a share of this again of its own, so that two threads sharing a CPU
/// do not both move, to the same other CPU, at the same moment.
const MOVE_AFTER: u32 = 4;
/// Least time between two looks at the system's load (a read of /proc/loadavg) by one
/// thread, once its looks have backed off: with a competitor on every CPU the yields keep
/// switching, and the look answers "stay" each time.
const MOVE_CHECK_EVERY: Duration = Duration::from_millis(20);
/// The next look after one whose reads disagreed (a thread ran or blocked for a moment
/// between them) is due sooner: on a quiet machine, two polling threads sharing a CPU
/// otherwise stayed so for 20-35 ms (1,000 round trips at twice their time) after a look
/// that an engine thread's wake-up made say "busy".
///
/// It is also the first of a sharing spell's intervals between looks whose reads agreed,
/// which double up to [`MOVE_CHECK_EVERY`]: a look at a ping-pong's start can find the
/// engine threads still spinning after the setup's datagrams, all three reads over the
/// CPUs ("busy"), and its two pollers then shared one CPU for the next 20 ms while the
/// other idled (one of six quiet `send_lat --rounds 5` runs, the looks logged); two
/// threads that both moved to the same CPU did the same (a scheduler trace). Now such a
/// spell ends after 2 ms. A real competitor costs a few more looks at the start of each
/// spell (2, 4, 8, 16 ms), then one in 20 ms.
const MOVE_RECHECK_AFTER: Duration = Duration::from_millis(2);
/// A sharing thread checks one yield in this many for having run another thread (a quiet
/// one checks each of its rare probes): two system calls each.
const CHECK_EVERY: u32 = 4;
/// Empty polls of the waiting mode between two clock reads that look for its end: on a
/// virtual machine whose clock is not the TSC (qemu TCG's HPET) a read is microseconds.
const WAIT_CLOCK_EVERY: u32 = 16;
/// Reads of the system's runnable threads in one look at the load.
const LOAD_READS: usize = 3;
/// How long a thread that found the machine crowded waits for traffic instead of yielding, before
/// its yields look again.
const WAIT_MODE_FOR: Duration = Duration::from_millis(20);
/// Longest wait of one empty poll in that mode.
const WAIT_AT_MOST: Duration = Duration::from_micros(50);

/// One polling thread's yield state.
#[derive(Clone, Copy)]
struct YieldState {
    /// Empty polls since the last poll that found something.
    empty_polls: u32,
    /// The thread's yields ran other threads lately: it yields at every empty poll, not
    /// every [`PROBE_EVERY`].
    sharing: bool,
    /// The machine was crowded at the last look: empty polls wait for traffic until then.
    waiting_until: Option<Instant>,
    /// Empty polls in the waiting mode (the clock is read on one in [`WAIT_CLOCK_EVERY`]).
    waiting_polls: u32,
    /// Yields so far (one in [`CHECK_EVERY`] is checked while sharing).
    yields: u32,
    /// Yields in a row that found nobody to run.
    quick_yields: u32,
    /// Yields in a row that ran another thread.
    switched_yields: u32,
    /// This thread's count of those that makes it look at the load.
    move_after: u32,
    /// When the thread last looked at the load.
    last_move_check: Option<Instant>,
    /// How long after that the next look is due.
    look_again_after: Duration,
    /// The interval after the next look whose reads agree: [`MOVE_RECHECK_AFTER`] at the
    /// start of a sharing spell, doubled by each such look up to [`MOVE_CHECK_EVERY`].
    steady_look_interval: Duration,
    /// The last look found the machine crowded (one more in a row starts the waits).
    crowded_at_last_look: bool,
}

impl YieldState {
    /// A thread's first state: sharing, as under load the first waits must already yield;
    /// `spread` (any number that differs between threads) sets its `move_after`.
    fn new(spread: u32) -> YieldState {
        YieldState {
            empty_polls: 0,
            sharing: true,
            waiting_until: None,
            waiting_polls: 0,
            yields: 0,
            quick_yields: 0,
            switched_yields: 0,
            move_after: MOVE_AFTER + spread % MOVE_AFTER,
            last_move_check: None,
            look_again_after: MOVE_CHECK_EVERY,
            steady_look_interval: MOVE_RECHECK_AFTER,
            crowded_at_last_look: false,
        }
    }
}

thread_local! {
    static STATE: Cell<YieldState> = Cell::new(YieldState::new(thread_spread()));
    /// Empty polls this thread spins through without a look at `STATE`, already counted
    /// there (see [`YieldState::spins_ahead`]): a polling application makes millions of
    /// them, and copying the state out and back cost each some 40 instructions.
    static FREE_SPINS: Cell<u32> = const { Cell::new(0) };
}

/// A number that differs between threads (and runs): the clock's nanoseconds when the
/// thread first polled in vain, mixed with the address of one of its thread-locals.
fn thread_spread() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let local = 0u8;
    let address = std::ptr::addr_of!(local) as usize as u32;
    (nanos ^ address.rotate_left(16)).wrapping_mul(0x9E37_79B9) >> 7
}

/// What an empty poll does besides returning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Idle {
    /// Nothing: poll again.
    Spin,
    /// Yield the CPU.
    Yield,
    /// Wait for the device's traffic, at most [`WAIT_AT_MOST`].
    Wait,
}

impl YieldState {
    /// Counts an empty poll at `now` (read only in the waiting mode) and says what it does.
    fn empty_poll(&mut self, now: impl FnOnce() -> Instant) -> Idle {
        self.empty_polls = self.empty_polls.saturating_add(1);
        if let Some(until) = self.waiting_until {
            self.waiting_polls = self.waiting_polls.wrapping_add(1);
            if !self.waiting_polls.is_multiple_of(WAIT_CLOCK_EVERY) || now() < until {
                return Idle::Wait;
            }
            self.waiting_until = None;
        }
        if self.sharing || self.empty_polls.is_multiple_of(PROBE_EVERY) {
            Idle::Yield
        } else {
            Idle::Spin
        }
    }

    /// After an empty poll that spins: how many of the next ones will spin as well (none
    /// while the thread shares its CPU or waits), counted now, so that they need not look
    /// at the state. A poll that finds work ends them early (`poll_found_work`).
    fn spins_ahead(&mut self) -> u32 {
        if self.sharing || self.waiting_until.is_some() {
            return 0;
        }
        let ahead = PROBE_EVERY - 1 - self.empty_polls % PROBE_EVERY;
        self.empty_polls = self.empty_polls.saturating_add(ahead);
        ahead
    }

    /// Counts a yield; true if this one is to be checked (see [`CHECK_EVERY`]).
    fn check_this_yield(&mut self) -> bool {
        self.yields = self.yields.wrapping_add(1);
        !self.sharing || self.yields.is_multiple_of(CHECK_EVERY)
    }

    /// Learns from a checked yield that `switched` (ran another thread) or not; true when
    /// a run of switched yields says the thread should look at the load.
    fn yielded(&mut self, switched: bool) -> bool {
        if !switched {
            self.switched_yields = 0;
            self.quick_yields = self.quick_yields.saturating_add(1);
            if self.quick_yields >= QUIET_AFTER {
                self.sharing = false;
                self.steady_look_interval = MOVE_RECHECK_AFTER;
            }
            return false;
        }
        self.sharing = true;
        self.quick_yields = 0;
        self.switched_yields = self.switched_yields.saturating_add(1);
        if self.switched_yields < self.move_after {
            return false;
        }
        self.switched_yields = 0;
        true
    }

    /// Whether a look at the load is due at `now` (one in [`MOVE_CHECK_EVERY`] once the
    /// intervals have backed off).
    fn look_due(&mut self, now: Instant) -> bool {
        if self
            .last_move_check
            .is_some_and(|t| now.duration_since(t) < self.look_again_after)
        {
            return false;
        }
        self.last_move_check = Some(now);
        true
    }

    /// A look at the load was made; `steady` if its reads agreed. The next one is due
    /// after [`MOVE_RECHECK_AFTER`] when they did not, else after the spell's next
    /// interval (2, 4, 8, 16, then 20 ms: see [`MOVE_RECHECK_AFTER`]).
    fn looked(&mut self, steady: bool) {
        self.look_again_after = if steady {
            let interval = self.steady_look_interval;
            self.steady_look_interval = (interval * 2).min(MOVE_CHECK_EVERY);
            interval
        } else {
            MOVE_RECHECK_AFTER
        };
    }

    /// A look at the load at `now` found `load`. Empty polls wait for traffic once two
    /// looks in a row found the machine crowded: after the first, the next look is due
    /// after [`MOVE_RECHECK_AFTER`]. One look could catch a quiet machine's threads all
    /// runnable for a moment (two pollers and both engine threads waking), and then put
    /// a quiet ping-pong's threads to sleep for [`WAIT_MODE_FOR`] (1,247 waits for traffic
    /// in one 20,000 round-trip run); a crowded machine stays so for longer than that.
    fn saw(&mut self, load: Load, now: Instant) {
        let crowded = load == Load::Crowded;
        if crowded && self.crowded_at_last_look {
            self.waiting_until = Some(now + WAIT_MODE_FOR);
        } else if crowded {
            self.look_again_after = MOVE_RECHECK_AFTER;
        }
        self.crowded_at_last_look = crowded;
    }
}

/// After an empty poll of `dev` that found nothing on the link either: spins, yields the
/// CPU or waits for traffic, as the module says, and moves the thread off a CPU it shares
/// while another idles.
pub(crate) fn after_empty_poll(dev: &Device) {
    let pollable = dev.link.pollable();
    if pollable && FREE_SPINS.with(take_free_spin) {
        return;
    }
    let mut state = STATE.with(Cell::get);
    if !pollable {
        // The engine thread receives for this device: the completion this poll waits for
        // comes from a thread that must get a CPU, so the yields stay frequent.
        state.sharing = true;
    }
    match state.empty_poll(Instant::now) {
        Idle::Spin => {
            if pollable {
                FREE_SPINS.with(|n| n.set(state.spins_ahead()));
            }
        }
        Idle::Wait => {
            super::app_wait::wait_for_traffic(dev, WAIT_AT_MOST);
        }
        Idle::Yield => {
            if yield_and_learn(&mut state) {
                let now = Instant::now();
                if let Some(load) = look_and_place(&mut state, now) {
                    state.saw(load, now);
                }
            }
        }
    }
    STATE.with(|s| s.set(state));
}

/// Takes one of `free` spins; false if none is left.
fn take_free_spin(free: &Cell<u32>) -> bool {
    let n = free.get();
    if n == 0 {
        return false;
    }
    free.set(n - 1);
    true
}

/// Yields the CPU, checking one yield in [`CHECK_EVERY`] (every one in quiet mode) for
/// whether it ran another thread; true when a run of such yields says to look at the load.
fn yield_and_learn(state: &mut YieldState) -> bool {
    if !state.check_this_yield() {
        std::thread::yield_now();
        return false;
    }
    let before = involuntary_switches();
    std::thread::yield_now();
    let switched = matches!((before, involuntary_switches()), (Some(a), Some(b)) if b > a);
    state.yielded(switched)
}

/// After a run of yields that gave the CPU away: looks at the load if a look is due at
/// `now`, and moves the thread off its CPU if another one idles; returns the load seen
/// (`None` when no look was due or the load could not be read).
fn look_and_place(state: &mut YieldState, now: Instant) -> Option<Load> {
    if !state.look_due(now) {
        return None;
    }
    let (load, steady) = match load() {
        Some((load, steady)) => (Some(load), steady),
        None => (None, true),
    };
    state.looked(steady);
    if load == Some(Load::CpuIdles) {
        let _ = move_off_current_cpu();
    }
    load
}

/// After an engine thread's receive found nothing while it polls a stream's link: spins,
/// or yields as an application's empty poll does, and moves off a CPU it shares while
/// another idles (no waits: the engine thread blocks on its own once the stream pauses).
///
/// Why: the thread that sends the stream is often queued on this very CPU (one CPU-bound
/// competitor on two cores leaves the stream's two threads one CPU), and an engine thread
/// that spins through its time slice waiting for datagrams that thread has not sent yet
/// keeps it off: a loopback WRITE 64 KiB stream ran at 56-69% of raw UDP beside one
/// competitor, and at 78-110% with these yields. Blocking on the link once a spin was
/// preempted instead gave 63-81%. Alone on its CPU the thread soon yields rarely (quiet
/// mode). The move: a receiving engine thread left on its sender's CPU while the other
/// idled was one cause of the two-process stream's slow runs (1.4 against 3.3 GB/s);
/// six alternating `write_bw --loopback -s 65536` runs gave 3.25-3.45 GB/s with it,
/// 2.5-3.47 without.
///
/// Returns whether it yielded.
pub(crate) fn after_empty_receive() -> bool {
    let mut state = STATE.with(Cell::get);
    let yields = state.empty_poll(Instant::now) != Idle::Spin;
    if yields && yield_and_learn(&mut state) {
        let _ = look_and_place(&mut state, Instant::now());
    }
    STATE.with(|s| s.set(state));
    yields
}

/// A poll found something: the next empty one starts a new wait.
pub(crate) fn poll_found_work() {
    FREE_SPINS.with(|n| n.set(0));
    STATE.with(|s| {
        let mut state = s.get();
        state.empty_polls = 0;
        s.set(state);
    });
}

/// The machine's load, as a thread whose yields keep running other threads sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// No more runnable threads than the thread's CPUs: with this CPU running two of them,
    /// another one idles.
    CpuIdles,
    /// More, up to twice as many: a competitor beside a ping-pong. Threads that yield to
    /// each other do best there (waiting for traffic instead: SEND 8 B half round trip
    /// 10.1 -> 15.6 us, WRITE 64 KiB 64% -> 45% of UDP beside one competitor on two cores).
    Busy,
    /// More than twice as many: yielding threads queue behind one another.
    Crowded,
}

impl Load {
    /// The load of `runnable` threads on `cpus` CPUs.
    fn of(runnable: usize, cpus: usize) -> Load {
        if runnable <= cpus {
            Load::CpuIdles
        } else if runnable <= 2 * cpus {
            Load::Busy
        } else {
            Load::Crowded
        }
    }
}

/// The machine's load seen from this thread's CPUs, and whether every read agreed; `None`
/// if it cannot tell.
///
/// The system's count of runnable threads is read [`LOAD_READS`] times a yield apart,
/// and the verdict must hold for every read: a thread that runs for a moment (a timer's
/// kworker, an engine thread's wake-up) must not pass for a competitor, nor one that
/// blocks for a moment (an engine thread between two datagrams) for an idle CPU. Moving
/// off a CPU whose other CPU is in fact busy put a WRITE stream's application thread
/// beside the competitor (64% -> 57% of UDP).
fn load() -> Option<(Load, bool)> {
    let allowed = cpu_count(&sched_getaffinity(Pid::from_raw(0)).ok()?);
    let (mut least, mut most) = (usize::MAX, 0);
    for read in 0..LOAD_READS {
        if read > 0 {
            std::thread::yield_now();
        }
        let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
        let runnable = runnable_threads(&loadavg)?;
        least = least.min(runnable);
        most = most.max(runnable);
    }
    let (at_least, at_most) = (Load::of(least, allowed), Load::of(most, allowed));
    let verdict = match (at_least, at_most) {
        (Load::CpuIdles, Load::CpuIdles) => Load::CpuIdles,
        (Load::Crowded, Load::Crowded) => Load::Crowded,
        _ => Load::Busy,
    };
    Some((verdict, at_least == at_most))
}

/// The calling thread's involuntary context switches so far: a yield that ran another
/// thread counts one (its time would not tell: a yield that finds nobody to run takes
/// 0.3 us here but several microseconds under qemu TCG, where a timed rule saw every yield
/// as a switch and moved threads every 20 ms, 42 -> 70 us per ping-pong half round trip).
fn involuntary_switches() -> Option<libc::c_long> {
    getrusage(UsageWho::RUSAGE_THREAD)
        .ok()
        .map(|u| u.involuntary_context_switches())
}

/// The number of runnable threads in a /proc/loadavg line ("0.50 0.40 0.30 2/67 1234").
fn runnable_threads(loadavg: &str) -> Option<usize> {
    let field = loadavg.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

/// The CPUs in `set`.
fn cpu_count(set: &CpuSet) -> usize {
    (0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .count()
}

/// Moves the calling thread to another of its CPUs, keeping its affinity: it leaves its
/// current CPU out of the affinity (the kernel migrates it at once) and puts the affinity
/// back. Returns the CPU it left and the one it ran on before the affinity was restored,
/// or `None` if it has no other CPU or a call failed.
fn move_off_current_cpu() -> Option<(usize, usize)> {
    let me = Pid::from_raw(0);
    let original = sched_getaffinity(me).ok()?;
    let current = sched_getcpu().ok()?;
    let mut elsewhere = original;
    elsewhere.unset(current).ok()?;
    if cpu_count(&elsewhere) == 0 {
        return None;
    }
    let moved = sched_setaffinity(me, &elsewhere).is_ok();
    let landed = sched_getcpu();
    // Restored whatever happened: the move is a placement, the thread's affinity is the
    // application's.
    let restored = sched_setaffinity(me, &original).is_ok();
    match landed {
        Ok(landed) if moved && restored => Some((current, landed)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streaming_engine_thread_that_may_share_its_cpu_yields_at_every_empty_receive() {
        // A new thread counts as sharing its CPU until QUIET_AFTER checked yields (one in
        // CHECK_EVERY) found nobody to run: these 12 cannot make it quiet.
        std::thread::spawn(|| {
            let pattern: Vec<bool> = (0..8).map(|_| after_empty_receive()).collect();
            assert_eq!(pattern, [true; 8]);
            poll_found_work();
            let again: Vec<bool> = (0..4).map(|_| after_empty_receive()).collect();
            assert_eq!(again, [true; 4]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_sharing_thread_yields_at_every_empty_poll_from_the_first() {
        let now = Instant::now();
        let mut s = YieldState::new(0);
        let yields: Vec<bool> = (0..7)
            .map(|_| s.empty_poll(|| now) == Idle::Yield)
            .collect();
        assert_eq!(yields, [true; 7]);
        s.empty_polls = 0;
        assert_eq!(s.empty_poll(|| now), Idle::Yield);
    }

    #[test]
    fn yields_that_find_nobody_to_run_become_rare_until_one_runs_another_thread() {
        let now = Instant::now();
        let mut s = YieldState::new(0);
        for _ in 0..QUIET_AFTER - 1 {
            s.yielded(false);
        }
        assert!(s.sharing);
        s.yielded(false);
        assert!(!s.sharing);
        let yields = (0..2 * PROBE_EVERY)
            .filter(|_| s.empty_poll(|| now) == Idle::Yield)
            .count();
        assert_eq!(yields, 2);
        // A probe that ran another thread: back to yielding at every empty poll.
        s.yielded(true);
        s.empty_polls = 0;
        let yields = (0..2 * PROBE_EVERY)
            .filter(|_| s.empty_poll(|| now) == Idle::Yield)
            .count();
        assert_eq!(yields as u32, 2 * PROBE_EVERY);
    }

    #[test]
    fn spins_counted_ahead_decide_as_the_state_would_poll_by_poll() {
        let now = Instant::now();
        let quiet = || {
            let mut s = YieldState::new(0);
            for _ in 0..QUIET_AFTER {
                s.yielded(false);
            }
            assert!(!s.sharing);
            s
        };
        // What each of 100 empty polls does, a poll that finds work after the 40th: every
        // one through the state, and as `after_empty_poll` goes, with spins counted ahead.
        let (mut full, mut lane, mut free) = (quiet(), quiet(), 0u32);
        let mut by_state = Vec::new();
        let mut with_lane = Vec::new();
        for i in 0..100 {
            if i == 40 {
                full.empty_polls = 0;
                lane.empty_polls = 0;
                free = 0;
            }
            by_state.push(full.empty_poll(|| now));
            let idle = if free > 0 {
                free -= 1;
                Idle::Spin
            } else {
                let idle = lane.empty_poll(|| now);
                if idle == Idle::Spin {
                    free = lane.spins_ahead();
                }
                idle
            };
            with_lane.push(idle);
        }
        assert_eq!(with_lane, by_state);
        assert_eq!(by_state.iter().filter(|&&i| i == Idle::Yield).count(), 2);
        // Sharing, nothing is counted ahead: every empty poll yields.
        let mut sharing = YieldState::new(0);
        assert_eq!(sharing.empty_poll(|| now), Idle::Yield);
        assert_eq!(sharing.spins_ahead(), 0);
    }

    #[test]
    fn on_a_crowded_machine_empty_polls_wait_for_traffic_for_a_while_then_yield_again() {
        let now = Instant::now();
        let mut s = YieldState::new(0);
        s.saw(Load::Crowded, now);
        s.saw(Load::Crowded, now);
        let idle: Vec<Idle> = (0..4).map(|_| s.empty_poll(|| now)).collect();
        assert_eq!(idle, [Idle::Wait; 4]);
        // Past the mode's end, the clock is looked at on one waiting poll in
        // WAIT_CLOCK_EVERY: the ones between still wait.
        let later = now + WAIT_MODE_FOR;
        let waits = (0..2 * WAIT_CLOCK_EVERY)
            .take_while(|_| s.empty_poll(|| later) == Idle::Wait)
            .count();
        assert!(waits < WAIT_CLOCK_EVERY as usize, "{waits}");
        assert!(s.waiting_until.is_none(), "the mode ended");
        s.empty_polls = 0;
        let idle: Vec<Idle> = (0..4).map(|_| s.empty_poll(|| now)).collect();
        assert_eq!(idle, [Idle::Yield; 4]);
    }

    #[test]
    fn one_look_that_finds_the_machine_crowded_only_makes_the_next_look_sooner() {
        let start = Instant::now();
        let mut s = YieldState::new(0);
        assert!(s.look_due(start));
        s.looked(true);
        s.saw(Load::Crowded, start);
        assert!(s.waiting_until.is_none(), "one look is not enough");
        assert!(s.look_due(start + MOVE_RECHECK_AFTER), "confirmed soon");
        // The next look finds it busy only: nothing waits, and the next crowded look is
        // again the first of its run.
        s.looked(true);
        s.saw(Load::Busy, start);
        s.saw(Load::Crowded, start);
        assert!(s.waiting_until.is_none());
        s.saw(Load::Crowded, start);
        assert_eq!(s.waiting_until, Some(start + WAIT_MODE_FOR), "two in a row");
    }

    #[test]
    fn threads_wait_for_different_runs_before_they_move() {
        let a = YieldState::new(0).move_after;
        let b = YieldState::new(3).move_after;
        assert_eq!((a, b), (MOVE_AFTER, MOVE_AFTER + 3));
        assert!(YieldState::new(u32::MAX).move_after < 2 * MOVE_AFTER);
    }

    #[test]
    fn only_a_run_of_yields_that_gave_the_cpu_away_asks_to_look_at_the_load() {
        let mut s = YieldState::new(0);
        for _ in 0..MOVE_AFTER - 1 {
            assert!(!s.yielded(true));
        }
        // One yield that found nobody to run: the CPU was not shared after all.
        assert!(!s.yielded(false));
        for _ in 0..MOVE_AFTER - 1 {
            assert!(!s.yielded(true));
        }
        assert!(s.yielded(true));
        // Looks are rationed: none before the interval the last one set.
        let start = Instant::now();
        assert!(s.look_due(start));
        s.looked(true);
        assert!(!s.look_due(start + MOVE_RECHECK_AFTER / 2));
        assert!(s.look_due(start + MOVE_RECHECK_AFTER));
    }

    #[test]
    fn a_look_whose_reads_disagreed_is_made_again_sooner() {
        let mut s = YieldState::new(0);
        let start = Instant::now();
        assert!(s.look_due(start));
        // The reads disagreed (a thread ran for a moment between them): soon again.
        s.looked(false);
        assert!(!s.look_due(start + MOVE_RECHECK_AFTER / 2));
        assert!(s.look_due(start + MOVE_RECHECK_AFTER));
    }

    #[test]
    fn steady_looks_back_off_from_2_to_20_ms_and_start_short_again_in_the_next_spell() {
        let mut s = YieldState::new(0);
        let mut at = Instant::now();
        let mut intervals = Vec::new();
        for _ in 0..7 {
            assert!(s.look_due(at));
            s.looked(true);
            let interval = s.look_again_after;
            assert!(!s.look_due(at + interval - Duration::from_micros(1)));
            intervals.push(interval.as_millis());
            at += interval;
        }
        assert_eq!(intervals, [2, 4, 8, 16, 20, 20, 20]);
        // A disagreeing look is followed soon, without resetting the back-off.
        assert!(s.look_due(at));
        s.looked(false);
        assert_eq!(s.look_again_after, MOVE_RECHECK_AFTER);
        s.looked(true);
        assert_eq!(s.look_again_after, MOVE_CHECK_EVERY);
        // The thread stops sharing (its yields find nobody to run): the next spell's first
        // steady look is followed after 2 ms again.
        for _ in 0..QUIET_AFTER {
            s.yielded(false);
        }
        assert!(!s.sharing);
        s.yielded(true);
        s.looked(true);
        assert_eq!(s.look_again_after, MOVE_RECHECK_AFTER);
    }

    #[test]
    fn a_sharing_thread_checks_one_yield_in_four_and_a_quiet_one_each_probe() {
        let mut s = YieldState::new(0);
        let checked = (0..4 * CHECK_EVERY)
            .filter(|_| s.check_this_yield())
            .count();
        assert_eq!(checked, 4);
        s.sharing = false;
        assert!((0..3).all(|_| s.check_this_yield()));
    }

    #[test]
    fn a_yield_that_runs_another_thread_counts_an_involuntary_switch() {
        // Two threads pinned to one CPU, both yielding: each yield hands the CPU over.
        let cpu = sched_getcpu().unwrap();
        let spinner = std::thread::spawn(move || {
            let mut one = CpuSet::new();
            one.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &one).unwrap();
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                std::thread::yield_now();
            }
        });
        let switched = std::thread::spawn(move || {
            let mut one = CpuSet::new();
            one.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &one).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let before = involuntary_switches().unwrap();
            for _ in 0..50 {
                std::thread::yield_now();
            }
            involuntary_switches().unwrap() - before
        })
        .join()
        .unwrap();
        spinner.join().unwrap();
        assert!(switched > 0, "{switched}");
    }
    #[test]
    fn a_machine_is_crowded_beyond_two_runnable_threads_per_cpu() {
        assert_eq!(Load::of(2, 2), Load::CpuIdles);
        assert_eq!(Load::of(3, 2), Load::Busy);
        assert_eq!(Load::of(4, 2), Load::Busy);
        assert_eq!(Load::of(5, 2), Load::Crowded);
        assert_eq!(Load::of(1, 1), Load::CpuIdles);
    }

    #[test]
    fn the_runnable_count_is_the_fourth_field_of_loadavg() {
        assert_eq!(runnable_threads("0.50 0.40 0.30 2/67 1234\n"), Some(2));
        assert_eq!(runnable_threads("1.00 1.00 1.00 13/402 99"), Some(13));
        assert_eq!(runnable_threads("0.50 0.40"), None);
        assert_eq!(runnable_threads("0.50 0.40 0.30 x/67 1"), None);
    }

    #[test]
    fn a_thread_moved_off_its_cpu_runs_elsewhere_with_its_affinity_intact() {
        // A thread of its own: the test harness's thread keeps its affinity either way.
        std::thread::spawn(|| {
            let me = Pid::from_raw(0);
            let original = sched_getaffinity(me).unwrap();
            let cpus = cpu_count(&original);
            let moved = move_off_current_cpu();
            let after = sched_getaffinity(me).unwrap();
            assert_eq!(cpu_count(&after), cpus);
            for cpu in 0..CpuSet::count() {
                assert_eq!(
                    after.is_set(cpu).ok(),
                    original.is_set(cpu).ok(),
                    "cpu {cpu}"
                );
            }
            match moved {
                // The kernel moved it at once, to a CPU the affinity allows.
                Some((left, landed)) => {
                    assert_ne!(landed, left);
                    assert!(original.is_set(landed).unwrap());
                }
                None => assert_eq!(cpus, 1, "a thread with {cpus} CPUs did not move"),
            }
        })
        .join()
        .unwrap();
    }
}
