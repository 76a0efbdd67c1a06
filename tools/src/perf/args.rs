//! The command line of `softverbs perf`, named after perftest's options where perftest has
//! one, and its checks: every bad value is a clear error, never a panic.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The tests: perftest's programs, plus the raw UDP baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestKind {
    /// RDMA WRITE bandwidth (ib_write_bw).
    #[value(name = "write_bw", alias = "write-bw")]
    WriteBw,
    /// RDMA WRITE latency, half round trip of a write ping-pong (ib_write_lat).
    #[value(name = "write_lat", alias = "write-lat")]
    WriteLat,
    /// RDMA READ bandwidth (ib_read_bw).
    #[value(name = "read_bw", alias = "read-bw")]
    ReadBw,
    /// RDMA READ latency, full round trip (ib_read_lat).
    #[value(name = "read_lat", alias = "read-lat")]
    ReadLat,
    /// SEND bandwidth (ib_send_bw).
    #[value(name = "send_bw", alias = "send-bw")]
    SendBw,
    /// SEND latency, half round trip of a send ping-pong (ib_send_lat).
    #[value(name = "send_lat", alias = "send-lat")]
    SendLat,
    /// FETCH_AND_ADD bandwidth (ib_atomic_bw).
    #[value(name = "atomic_bw", alias = "atomic-bw")]
    AtomicBw,
    /// FETCH_AND_ADD latency, full round trip (ib_atomic_lat).
    #[value(name = "atomic_lat", alias = "atomic-lat")]
    AtomicLat,
    /// Raw UDP on the same loopback path: bandwidth and ping-pong half round trip.
    #[value(name = "udp-baseline", alias = "udp_baseline")]
    UdpBaseline,
}

/// The verb a test exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND / RECV.
    Send,
    /// FETCH_AND_ADD.
    Atomic,
}

impl Verb {
    /// The verb as the wire (and the IB spec) names its operation.
    pub fn wire_name(self) -> &'static str {
        match self {
            Verb::Write => "WRITE",
            Verb::Read => "READ",
            Verb::Send => "SEND",
            Verb::Atomic => "FETCH_AND_ADD",
        }
    }
}

impl TestKind {
    /// The verb, or `None` for the UDP baseline.
    pub fn verb(self) -> Option<Verb> {
        match self {
            TestKind::WriteBw | TestKind::WriteLat => Some(Verb::Write),
            TestKind::ReadBw | TestKind::ReadLat => Some(Verb::Read),
            TestKind::SendBw | TestKind::SendLat => Some(Verb::Send),
            TestKind::AtomicBw | TestKind::AtomicLat => Some(Verb::Atomic),
            TestKind::UdpBaseline => None,
        }
    }

    /// A latency test (otherwise bandwidth).
    pub const fn is_latency(self) -> bool {
        matches!(
            self,
            TestKind::WriteLat | TestKind::ReadLat | TestKind::SendLat | TestKind::AtomicLat
        )
    }

    /// The name printed and put in JSON (and the CLI's).
    pub const fn name(self) -> &'static str {
        match self {
            TestKind::WriteBw => "write_bw",
            TestKind::WriteLat => "write_lat",
            TestKind::ReadBw => "read_bw",
            TestKind::ReadLat => "read_lat",
            TestKind::SendBw => "send_bw",
            TestKind::SendLat => "send_lat",
            TestKind::AtomicBw => "atomic_bw",
            TestKind::AtomicLat => "atomic_lat",
            TestKind::UdpBaseline => "udp-baseline",
        }
    }
}

/// Which link the one-process mode puts its two devices on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkKind {
    /// UDP sockets on 127.0.0.1 and 127.0.0.2, port 4791.
    Udp,
    /// The in-process channel network: no sockets at all.
    Inproc,
}

/// Arguments of `softverbs perf`.
#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    /// The test.
    pub test: TestKind,
    /// The server to connect to (client mode); without it and without --loopback this
    /// process is the server and waits for a client.
    pub server: Option<String>,
    /// Both sides in this process (a server thread and the client), no second process.
    #[arg(long)]
    pub loopback: bool,
    /// The link of --loopback's two devices.
    #[arg(long, value_enum, default_value = "udp")]
    pub link: LinkKind,
    /// Device to use (default: softrxe0 for the server, softrxe1 for the client; with
    /// --loopback both sides on this one device, else the first two listed).
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
    /// TCP port of the out-of-band exchange (perftest's default).
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency, 8 for atomics).
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Sweep sizes 2, 4, ... up to --max-size (perftest's -a).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Largest size of the -a sweep.
    #[arg(long, default_value_t = 1 << 23)]
    pub max_size: usize,
    /// Iterations per QP (perftest's defaults: 5000 for write_bw, 1000 otherwise).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run for this many seconds per size instead of a fixed iteration count.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Number of QPs, driven round-robin.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// WRs in flight per QP (bandwidth tests; default 128). Latency tests default to 1, as
    /// perftest's: every message is then signaled and its completion awaited.
    #[arg(short = 't', long)]
    pub tx_depth: Option<u32>,
    /// WRs per post call.
    #[arg(short = 'l', long, default_value_t = 1)]
    pub post_list: u32,
    /// One signaled WR every this many (the others complete with it); at most the tx depth
    /// (a larger one is lowered to it, as perftest does). Default 100.
    #[arg(short = 'Q', long)]
    pub cq_mod: Option<u32>,
    /// Completions taken per poll call.
    #[arg(long, default_value_t = 16)]
    pub poll_batch: u32,
    /// Send messages up to this size inline (WRITE and SEND).
    #[arg(short = 'I', long, default_value_t = 0)]
    pub inline_size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 4096)]
    pub mtu: u32,
    /// Also run the raw UDP baseline (same packet size and batching) and print each result
    /// as a ratio to it (--loopback over the UDP link or in-process link).
    #[arg(long)]
    pub baseline: bool,
    /// With --baseline: run the test and its baseline alternately this many times and report
    /// the round whose ratio is the median, with every round's ratio (a shared machine's
    /// noise then falls on both sides of each ratio alike).
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Start this many CPU-bound competitor processes for the whole command (test and
    /// baseline rounds alike) and stop them at its end: the figures of a busy machine, from
    /// one command. The load average before and after goes in the header and the JSON.
    #[arg(long, default_value_t = 0)]
    pub contend: u32,
    /// With --loopback and a latency test: run this many independent pairs at once, each on
    /// two devices of its own (127.27.<i>.1 and .2), after one pair alone; prints the
    /// round trips per second of all together and the worst pair's median against the lone
    /// pair's (how fairly a busy process shares the emulator, as test threads do).
    #[arg(long, default_value_t = 1)]
    pub pairs: u32,
    /// Two processes on one shared device against two processes on two devices (each
    /// bound alone, as before sharing), in alternating rounds (--rounds) of this command;
    /// prints each placement's median and their ratio (see docs/shared-devices.md).
    #[arg(long)]
    pub shared: bool,
    /// Machine-readable output (one JSON document on stdout).
    #[arg(long)]
    pub json: bool,
    /// Do not check data against softverbs' test pattern: for a peer that is real perftest,
    /// whose buffers hold its own bytes (what a server received, what a READ client read).
    /// Completions are still checked.
    #[arg(long)]
    pub no_verify: bool,
}

/// Where this process stands.
#[derive(Debug, Clone)]
pub enum Role {
    /// Waits for a client on the TCP port.
    Server,
    /// Connects to a server.
    Client(SocketAddr),
    /// Both, in one process.
    Loopback,
}

/// The checked settings of a run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The test.
    pub test: TestKind,
    /// Sizes to run, in order.
    pub sizes: Vec<usize>,
    /// The sizes are a sweep (`-a`), run with perftest's sweep exchanges.
    pub sweep: bool,
    /// Iterations per QP (ignored when `duration` is set).
    pub iters: u64,
    /// Run length per size, if by time.
    pub duration: Option<Duration>,
    /// QPs.
    pub qps: u32,
    /// WRs in flight per QP.
    pub tx_depth: u32,
    /// WRs per post call.
    pub post_list: u32,
    /// Signal every this many WRs.
    pub cq_mod: u32,
    /// Completions per poll call.
    pub poll_batch: u32,
    /// Inline up to this many bytes.
    pub inline_size: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Where this process stands.
    pub role: Role,
    /// The link of the loopback mode.
    pub link: LinkKind,
    /// Device name, if given.
    pub device: Option<String>,
    /// TCP port.
    pub port: u16,
    /// Run the UDP baseline too.
    pub baseline: bool,
    /// Alternations of test and baseline (1 without --baseline).
    pub rounds: u32,
    /// CPU-bound competitor processes run beside the command.
    pub contend: u32,
    /// Independent pairs run at once (1: the usual single pair).
    pub pairs: u32,
    /// JSON output.
    pub json: bool,
    /// Skip the data checks (a peer that is real perftest).
    pub no_verify: bool,
}

/// Largest message: what one RC message may be (the port's max_msg_sz is 2^31) capped to
/// what a benchmark buffer reasonably takes.
pub const MAX_SIZE: usize = 1 << 30;
/// Most QPs (the device allows 65536; two sides each hold them in one process).
pub const MAX_QPS: u32 = 16_384;
/// Most WRs in flight per QP (the device's max_qp_wr).
pub const MAX_TX_DEPTH: u32 = 0x4000;
/// Longest run per size.
pub const MAX_DURATION_S: f64 = 3600.0;
/// Most pairs `--pairs` runs.
pub const MAX_PAIRS: u32 = 64;
/// Most competitors `--contend` starts.
pub const MAX_CONTENDERS: u32 = 64;
/// Most alternations of `--rounds`.
pub const MAX_ROUNDS: u32 = 99;

/// Largest inline size the device grants.
pub const MAX_INLINE: u32 = 400;

fn bad(msg: impl Into<String>) -> String {
    msg.into()
}

impl PerfArgs {
    /// Checks the arguments; a message for the user if something is wrong.
    pub fn settings(&self) -> Result<Settings, String> {
        let test = self.test;
        let default_size = match test.verb() {
            Some(Verb::Atomic) => 8,
            _ if test.is_latency() => 2,
            _ => 65536,
        };
        if test.verb() == Some(Verb::Atomic) && self.size.is_some_and(|s| s != 8) {
            return Err(bad("atomic tests move 8 bytes: -s must be 8 (or left out)"));
        }
        let sizes = if self.all {
            if test.verb() == Some(Verb::Atomic) {
                return Err(bad("-a makes no sense for atomic tests (always 8 bytes)"));
            }
            if self.size.is_some() {
                return Err(bad("give either -s or -a, not both"));
            }
            if !(2..=MAX_SIZE).contains(&self.max_size) {
                return Err(bad(format!("--max-size must be in 2..={MAX_SIZE}")));
            }
            let mut v = Vec::new();
            let mut s = 2usize;
            while s <= self.max_size {
                v.push(s);
                s *= 2;
            }
            v
        } else {
            let s = self.size.unwrap_or(default_size);
            if s > MAX_SIZE {
                return Err(bad(format!("-s {s} is above {MAX_SIZE} bytes")));
            }
            if s == 0 && matches!(test, TestKind::WriteLat) {
                return Err(bad(
                    "write_lat needs at least 1 byte (it polls the last one)",
                ));
            }
            if s == 0 && test == TestKind::UdpBaseline {
                return Err(bad("udp-baseline needs at least 1 byte"));
            }
            vec![s]
        };
        let iters = self
            .iters
            // perftest's defaults (DEF_ITERS_WB for write_bw, DEF_ITERS otherwise): a
            // server whose test has no report counts to its own -n.
            .unwrap_or(if test == TestKind::WriteBw {
                5000
            } else {
                1000
            });
        if iters == 0 || iters > 1 << 40 {
            return Err(bad("-n must be in 1..=2^40"));
        }
        let duration = match self.duration {
            None => None,
            Some(d) if d.is_finite() && d > 0.0 && d <= MAX_DURATION_S => {
                Some(Duration::from_secs_f64(d))
            }
            Some(d) => {
                return Err(bad(format!(
                    "-D {d}: give seconds in (0, {MAX_DURATION_S}]"
                )))
            }
        };
        if self.duration.is_some() && self.iters.is_some() {
            return Err(bad("give either -n or -D, not both"));
        }
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(bad(format!("-q must be in 1..={MAX_QPS}")));
        }
        if test.is_latency() && self.qps != 1 {
            return Err(bad(
                "latency tests run on one QP (as perftest's): leave out -q",
            ));
        }
        // perftest's defaults: DEF_TX_LAT (1) for latency tests, DEF_TX_BW (128) otherwise.
        let tx_depth = self
            .tx_depth
            .unwrap_or(if test.is_latency() { 1 } else { 128 });
        if !(1..=MAX_TX_DEPTH).contains(&tx_depth) {
            return Err(bad(format!("-t must be in 1..={MAX_TX_DEPTH}")));
        }
        if self.post_list == 0 || self.post_list > tx_depth {
            return Err(bad("-l must be in 1..=tx-depth"));
        }
        // As perftest (DEF_CQ_MOD, lowered to the tx depth): a latency test at its default
        // depth of 1 signals every message.
        let cq_mod = self.cq_mod.unwrap_or(100).min(tx_depth);
        if cq_mod == 0 {
            return Err(bad("-Q must be at least 1"));
        }
        if !(1..=4096).contains(&self.poll_batch) {
            return Err(bad("--poll-batch must be in 1..=4096"));
        }
        if self.inline_size > MAX_INLINE {
            return Err(bad(format!("-I is at most {MAX_INLINE} bytes")));
        }
        if !matches!(self.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(bad(format!(
                "-m {} is not an IB MTU (256 .. 4096)",
                self.mtu
            )));
        }
        let role = match (&self.server, self.loopback) {
            (Some(_), true) => return Err(bad("--loopback takes no server address")),
            (None, true) => Role::Loopback,
            (None, false) if test == TestKind::UdpBaseline => Role::Loopback,
            (None, false) => Role::Server,
            (Some(_), false) if test == TestKind::UdpBaseline => {
                return Err(bad("udp-baseline runs on loopback in one process only"))
            }
            (Some(host), false) => Role::Client(resolve(host, self.port)?),
        };
        if self.link == LinkKind::Inproc && !matches!(role, Role::Loopback) {
            return Err(bad(
                "--link inproc needs --loopback (both devices in this process)",
            ));
        }
        if self.device.is_some() && matches!(role, Role::Loopback) && self.link == LinkKind::Inproc
        {
            return Err(bad(
                "-d names a listed device; --link inproc uses two in-process devices of its own",
            ));
        }
        if self.no_verify && matches!(role, Role::Loopback) {
            return Err(bad(
                "--no-verify is for a side facing real perftest, --loopback has softverbs on both",
            ));
        }
        if self.baseline && !matches!(role, Role::Loopback) {
            return Err(bad(
                "--baseline needs --loopback (the baseline runs on loopback)",
            ));
        }
        if self.contend > MAX_CONTENDERS {
            return Err(bad(format!("--contend must be 0..={}", MAX_CONTENDERS)));
        }
        if self.pairs == 0 || self.pairs > MAX_PAIRS {
            return Err(bad(format!("--pairs must be 1..={}", MAX_PAIRS)));
        }
        if self.pairs > 1
            && (!self.loopback
                || !test.is_latency()
                || self.all
                || self.baseline
                || self.device.is_some())
        {
            return Err(bad(
                "--pairs runs one size of a latency test with --loopback, on devices of its own \
                 (no -a, --baseline or -d)",
            ));
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            return Err(bad(format!("--rounds must be 1..={MAX_ROUNDS}")));
        }
        if self.rounds > 1 && !self.baseline {
            return Err(bad(
                "--rounds alternates the test with its baseline: give --baseline too",
            ));
        }
        let qp_bytes = sizes.iter().copied().max().unwrap_or(0);
        if (qp_bytes as u128) * 2 > isize::MAX as u128 {
            return Err(bad("sizes too large"));
        }
        Ok(Settings {
            test,
            sizes,
            sweep: self.all,
            iters,
            duration,
            qps: self.qps,
            tx_depth,
            post_list: self.post_list,
            cq_mod,
            poll_batch: self.poll_batch,
            inline_size: self.inline_size,
            mtu: self.mtu,
            role,
            link: self.link,
            device: self.device.clone(),
            port: self.port,
            baseline: self.baseline,
            rounds: self.rounds,
            contend: self.contend,
            pairs: self.pairs,
            json: self.json,
            no_verify: self.no_verify,
        })
    }
}

/// `host` (a name or address, optionally `:port`) with the TCP port.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if let Ok(sa) = host.parse::<SocketAddr>() {
        return Ok(sa);
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}
