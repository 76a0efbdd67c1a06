//! One `softverbs perf` command from start to end: which devices, which side does what per
//! size, the side-channel sequence, and the printing of results.
//!
//! Side-channel sequence: perftest's own for each test ([`super::sequence`]), per size of a
//! sweep.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use softverbs::{ChannelNetwork, DeviceConfig, LinkConfig, Mtu, VerbsError, VerbsResult};

use super::args::{LinkKind, Role, Settings, TestKind, Verb};
use super::print::{print_baselines, print_client, print_server};
use super::report::Baseline;
use super::results::{ClientReport, Memory, Round, Row, ServerRow};
use super::sequence::Sequence;
use super::setup::Side;
use super::{bw, lat, oob, udp_baseline};
use crate::perftest_oob::PerftestComm;

/// Names of the in-process devices of `--loopback --link inproc`.
const INPROC: [&str; 2] = ["perf-inproc0", "perf-inproc1"];

/// Registers the two in-process devices once per process.
fn inproc_devices() -> VerbsResult<(String, String)> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let done = DONE.get_or_init(|| {
        let net = ChannelNetwork::new();
        for (i, name) in INPROC.iter().enumerate() {
            let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8));
            softverbs::register_device(DeviceConfig {
                link: LinkConfig::Channel(net.clone()),
                ..DeviceConfig::new(*name, ip)
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    done.clone().map_err(VerbsError::inval)?;
    Ok((INPROC[0].to_string(), INPROC[1].to_string()))
}

/// The first two devices of the list (server, client), which must be on loopback: the
/// one-process mode is a loopback benchmark and sends nothing elsewhere.
fn listed_devices() -> VerbsResult<(String, String)> {
    softverbs::devices()?;
    let list = softverbs_emu::engine::device_list()?;
    if list.len() < 2 {
        return Err(VerbsError::inval(
            "--loopback needs two devices (SOFTVERBS_DEVICES)",
        ));
    }
    for d in &list[..2] {
        if !d.ip.is_loopback() {
            return Err(VerbsError::inval(format!(
                "--loopback runs on loopback addresses only; device {} is on {}",
                d.name, d.ip
            )));
        }
    }
    Ok((list[0].name.clone(), list[1].name.clone()))
}

/// `-d NAME` of `--loopback`: both sides on that device, which must be on loopback.
fn loopback_device(name: &str) -> VerbsResult<(String, String)> {
    softverbs::devices()?;
    let list = softverbs_emu::engine::device_list()?;
    let d = list.iter().find(|d| d.name == name).ok_or_else(|| {
        VerbsError::NotFound(format!(
            "no device {name} (softverbs devices lists them; SOFTVERBS_DEVICES sets them)"
        ))
    })?;
    if !d.ip.is_loopback() {
        return Err(VerbsError::inval(format!(
            "--loopback runs on loopback addresses only; device {} is on {}",
            d.name, d.ip
        )));
    }
    Ok((d.name.clone(), d.name.clone()))
}

/// Runs the command.
pub fn run(s: &Settings) -> VerbsResult<()> {
    if s.test == TestKind::UdpBaseline {
        let baselines = baselines(s)?;
        print_baselines(s, &baselines);
        return Ok(());
    }
    match &s.role {
        Role::Server => {
            let device = s.device.clone().unwrap_or_else(|| "softrxe0".into());
            // The device is opened (and held) before waiting: a bad -d fails now.
            let _held = softverbs::Context::open(&device)?;
            let listener = oob::listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), s.port))?;
            if !s.json {
                eprintln!(
                    "softverbs perf {}: server on {device}, waiting on TCP port {}",
                    s.test.name(),
                    s.port
                );
            }
            let comm = oob::accept(&listener)?;
            let rows = serve(s, &device, comm)?;
            print_server(s, &device, &rows);
            Ok(())
        }
        Role::Client(addr) => {
            let device = s.device.clone().unwrap_or_else(|| "softrxe1".into());
            let _held = softverbs::Context::open(&device)?;
            let comm = oob::connect(*addr, true)?;
            let (rows, _) = drive(s, &device, comm)?;
            let report = ClientReport {
                device,
                rows,
                ..ClientReport::default()
            };
            print_client(s, "udp, two processes", &report);
            Ok(())
        }
        Role::Loopback => {
            let mut rounds = Vec::with_capacity(s.rounds as usize);
            for _ in 0..s.rounds {
                rounds.push(loopback_round(s)?);
            }
            let link = match s.link {
                LinkKind::Udp => "udp",
                LinkKind::Inproc => "inproc",
            };
            print_client(s, link, &ClientReport::median_round(rounds));
            Ok(())
        }
    }
}

/// One `--loopback` run: the test between a server thread and this thread, then the
/// baseline of every size if asked for.
fn loopback_round(s: &Settings) -> VerbsResult<Round> {
    let before = rss_bytes();
    let (server_dev, client_dev) = match (s.link, &s.device) {
        (LinkKind::Udp, Some(one)) => loopback_device(one)?,
        (LinkKind::Udp, None) => listed_devices()?,
        (LinkKind::Inproc, _) => inproc_devices()?,
    };
    let run = loopback_pair(s, &server_dev, &client_dev)?;
    let baselines = if s.baseline {
        baselines(s)?
    } else {
        Vec::new()
    };
    Ok(Round {
        client_device: client_dev,
        rows: run.rows,
        served: run.served,
        baselines,
        memory: Memory {
            before,
            connected: run.rss_connected,
        },
    })
}

/// What one pair of a one-process run measured.
pub struct PairRun {
    /// The client's rows.
    pub rows: Vec<Row>,
    /// What the server saw.
    pub served: Vec<ServerRow>,
    /// Process memory with the pair connected.
    pub rss_connected: Option<u64>,
}

/// The test between a server thread on `server_dev` and this thread on `client_dev`.
pub fn loopback_pair(s: &Settings, server_dev: &str, client_dev: &str) -> VerbsResult<PairRun> {
    let listener = oob::listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))?;
    let addr = listener.local_addr().map_err(|e| VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(5),
        message: e.to_string(),
    })?;
    let server_settings = s.clone();
    let server_dev = server_dev.to_string();
    let server = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || -> VerbsResult<Vec<ServerRow>> {
            let comm = oob::accept(&listener)?;
            serve(&server_settings, &server_dev, comm)
        })
        .map_err(|e| VerbsError::Io {
            errno: e.raw_os_error().unwrap_or(11),
            message: format!("spawning the server thread: {e}"),
        })?;
    let client = oob::connect(addr, false).and_then(|comm| drive(s, client_dev, comm));
    let served = server
        .join()
        .map_err(|_| VerbsError::inval("the server thread panicked"))?;
    // When both fail, either may have caused the other's failure: say both.
    match (client, served) {
        (Ok((rows, rss_connected)), Ok(served)) => Ok(PairRun {
            rows,
            served,
            rss_connected,
        }),
        (Err(c), Err(sv)) => Err(VerbsError::Io {
            errno: c.errno(),
            message: format!("client: {c}; server: {sv}"),
        }),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// Creates, exchanges and connects one side; returns it and the side channel.
fn connect_side(s: &Settings, device: &str, comm: &mut PerftestComm) -> VerbsResult<Side> {
    let mut side = Side::new(device, s)?;
    let mine = side.keys()?;
    // -m was checked to be one of the five sizes.
    let ours = Mtu::from_bytes(s.mtu).unwrap_or(Mtu::Mtu4096);
    let (theirs, agreed) = oob::exchange_keys(comm, ours, &mine, side.src_off)?;
    let mtu = agreed.bytes();
    side.connect(&mine, &theirs, mtu)?;
    if s.test.verb() == Some(Verb::Send) {
        if s.test.is_latency() {
            lat::post_ping_receives(&side)?;
        } else {
            bw::post_receives(&side)?;
        }
    }
    comm.barrier(&mine[0], "connected")?;
    Ok(side)
}

/// The count the server checks against: the client's report where the test has one,
/// else `-n` per QP (which perftest too requires both sides to share); `None` under `-D`
/// without a report, where the server cannot know it.
fn expected_count(s: &Settings, report: Option<(u64, u64, f64, f64, f64)>) -> Option<u64> {
    match report {
        Some(r) => Some(r.1),
        None if s.duration.is_none() => Some(s.iters * u64::from(s.qps)),
        None => None,
    }
}

/// EIO unless `got` is `expected` (when known).
fn check_count(got: u64, expected: Option<u64>, what: &str) -> VerbsResult<()> {
    match expected {
        Some(n) if n != got => Err(VerbsError::Io {
            errno: 5,
            message: format!("{what}: {got}, expected {n}"),
        }),
        _ => Ok(()),
    }
}

/// The server: lends its buffer and QPs, answers ping-pongs, counts receives, verifies.
/// A row per size it has something to say about: every size of the tests that count at
/// the server, the last one (the client's report) of the others.
fn serve(s: &Settings, device: &str, mut comm: PerftestComm) -> VerbsResult<Vec<ServerRow>> {
    let verb = s.test.verb().ok_or_else(|| VerbsError::inval("no verb"))?;
    let seq = Sequence::of(s.test);
    let side = connect_side(s, device, &mut comm)?;
    let me = side.keys()?[0];
    // Without a barrier between sizes the client goes on at once: the buffer is prepared
    // for the whole run (a READ's pattern is the largest size's, read in prefixes).
    if !seq.barrier_before_each {
        bw::prepare_server(&side, verb, side.max_size)?;
    }
    seq.setup(&mut comm, &me)?;
    // Counts hold whoever the client is; data only against softverbs.
    let expected = expected_count(s, None);
    let mut rows = Vec::new();
    for &size in &s.sizes {
        if seq.barrier_before_each {
            bw::prepare_server(&side, verb, size)?;
        }
        seq.before_size(&mut comm, &me)?;
        let handled = match s.test {
            TestKind::SendBw => bw::server_recv(&side, size, &comm)?,
            TestKind::WriteLat => lat::server_write(&side, s, size, &comm)?,
            TestKind::SendLat => lat::server_send(&side, s, size, &comm)?,
            _ => 0,
        };
        seq.after_size(&mut comm, &me, s.sweep)?;
        let (what, verified_bytes) = match s.test {
            TestKind::SendBw => ("receives completed", verify_unless(s, &side, size)?),
            TestKind::SendLat => ("SENDs answered", verify_unless(s, &side, size)?),
            TestKind::WriteLat => ("WRITEs answered", 0),
            _ => continue,
        };
        check_count(handled, expected, what)?;
        rows.push(ServerRow {
            size,
            report: None,
            verified_bytes,
            handled,
        });
    }
    if seq.report {
        let last = side.max_size;
        comm.barrier(&me, "finished")?;
        let report = comm.xchg_report(last as u64, 0, 0.0, 0.0, 0.0)?;
        let expected = expected_count(s, Some(report));
        // The last size's data, or the atomic counter (which perftest's clients spread over
        // 64 slots of a random buffer, hence only against softverbs).
        let verified_bytes = match s.test {
            TestKind::WriteBw => verify_unless(s, &side, last)?,
            TestKind::AtomicBw if !s.no_verify => {
                let counter = bw::read_counter(&side)?;
                check_count(counter, expected, "the counter after FETCH_AND_ADDs of 1")?;
                8 * counter
            }
            _ => 0,
        };
        rows.push(ServerRow {
            size: last,
            report: Some(report),
            verified_bytes,
            handled: 0,
        });
    }
    seq.end(comm, &me)?;
    // The client of atomic_lat adds after the server's last exchange before its test: the
    // counter is final once the client closed.
    if s.test == TestKind::AtomicLat && !s.no_verify {
        let counter = bw::read_counter(&side)?;
        check_count(counter, expected_count(s, None), "the counter after adds")?;
        rows.push(ServerRow {
            size: 8,
            report: None,
            verified_bytes: 8,
            handled: counter,
        });
    }
    Ok(rows)
}

/// The pattern of a `size`-byte run checked at the start of `side`'s buffer, unless the
/// peer is perftest (`--no-verify`); the bytes checked.
fn verify_unless(s: &Settings, side: &Side, size: usize) -> VerbsResult<u64> {
    if s.no_verify || size == 0 {
        return Ok(0);
    }
    bw::verify_pattern(side, 0, size, size)
}

/// The client: runs each size and, where the test has one, reports the last to the server.
fn drive(
    s: &Settings,
    device: &str,
    mut comm: PerftestComm,
) -> VerbsResult<(Vec<Row>, Option<u64>)> {
    let verb = s.test.verb().ok_or_else(|| VerbsError::inval("no verb"))?;
    let seq = Sequence::of(s.test);
    let side = connect_side(s, device, &mut comm)?;
    // Both sides are connected (the barrier is behind us) and idle: what they hold now.
    let rss_connected = rss_bytes();
    let me = side.keys()?[0];
    let peer = side.peer.clone();
    // The half lent to the peer is cleared once, before the peer may write into it.
    side.mr.fill(0)?;
    seq.setup(&mut comm, &me)?;
    let mut rows = Vec::new();
    for &size in &s.sizes {
        bw::prepare_client(&side, verb, size)?;
        seq.before_size(&mut comm, &me)?;
        let row = if s.test.is_latency() {
            Row::Lat(lat::client(&side, s, size, &peer)?)
        } else {
            Row::Bw(bw::client(&side, s, size, &peer, &comm)?)
        };
        seq.after_size(&mut comm, &me, s.sweep)?;
        rows.push(row);
    }
    if seq.report {
        comm.barrier(&me, "finished")?;
        match rows.last() {
            Some(Row::Bw(r)) => comm.xchg_report(
                r.bytes as u64,
                r.iterations,
                r.peak_mbs,
                r.avg_mbs,
                r.msg_rate_mpps,
            )?,
            Some(Row::Lat(r)) => comm.xchg_report(
                r.bytes as u64,
                r.iterations,
                r.min_us,
                r.median_us,
                r.avg_us,
            )?,
            None => comm.xchg_report(0, 0, 0.0, 0.0, 0.0)?,
        };
    }
    seq.end(comm, &me)?;
    // Why a run was slow or lossy: the faults in effect and this side's retries.
    if let Some(line) = crate::run_report::faults_line(&[device]) {
        eprintln!("softverbs perf: {line}");
    }
    let retries = crate::run_report::Retries::of(&side.ctx, side.qps.iter().map(|q| q.qp_num()));
    eprintln!("softverbs perf: client {}", retries.line());
    Ok((rows, rss_connected))
}

/// Resident memory of this process (VmRSS), if /proc says.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The UDP baseline of every size of the run.
fn baselines(s: &Settings) -> VerbsResult<Vec<Baseline>> {
    // About 6 s per size: a sweep says where it is.
    let mut progress =
        super::progress::Progress::start(format!("UDP baseline, {} sizes", s.sizes.len()));
    let mut list = Vec::with_capacity(s.sizes.len());
    for (i, &size) in s.sizes.iter().enumerate() {
        let now = std::time::Instant::now();
        if progress.due(now) {
            let next = format!("next: {size} B");
            progress.tick(now, i as u64, Some(s.sizes.len() as u64), None, &next);
        }
        list.push(udp_baseline::measure(s, size).map_err(|e| VerbsError::Io {
            errno: e.raw_os_error().unwrap_or(5),
            message: format!("UDP baseline: {e}"),
        })?);
    }
    progress.finish();
    Ok(list)
}
