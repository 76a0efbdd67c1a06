//! One `softverbs perf` command from start to end: which devices, which side does what per
//! size, the side-channel sequence, and the printing of results.
//!
//! Side-channel sequence: perftest's own for each test ([`super::sequence`]), per size of a
//! sweep.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use softverbs::{ChannelNetwork, DeviceConfig, LinkConfig, Mtu, VerbsError, VerbsResult};

use super::args::{LinkKind, Role, Settings, TestKind, Verb};
use super::report::{self, Baseline, BwResult, LatResult};
use super::sequence::Sequence;
use super::setup::Side;
use super::{bw, lat, oob, udp_baseline};
use crate::perftest_oob::PerftestComm;

/// What the client measured for one size.
#[derive(Debug, Clone)]
pub enum Row {
    /// A bandwidth test.
    Bw(BwResult),
    /// A latency test.
    Lat(LatResult),
}

impl Row {
    /// The message size.
    fn size(&self) -> usize {
        match self {
            Row::Bw(r) => r.bytes,
            Row::Lat(r) => r.bytes,
        }
    }
}

/// What the server saw for one size.
#[derive(Debug, Clone, Default)]
pub struct ServerRow {
    /// The message size.
    pub size: usize,
    /// The client's report, for the tests that have one: size, iterations and three
    /// figures.
    pub report: Option<(u64, u64, f64, f64, f64)>,
    /// Bytes the server verified.
    pub verified_bytes: u64,
    /// Messages the server received or answered.
    pub handled: u64,
}

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
struct Round {
    client_device: String,
    rows: Vec<Row>,
    served: Vec<ServerRow>,
    baselines: Vec<Baseline>,
    memory: Memory,
}

fn loopback_round(s: &Settings) -> VerbsResult<Round> {
    let before = rss_bytes();
    let (server_dev, client_dev) = match (s.link, &s.device) {
        (LinkKind::Udp, Some(one)) => loopback_device(one)?,
        (LinkKind::Udp, None) => listed_devices()?,
        (LinkKind::Inproc, _) => inproc_devices()?,
    };
    let listener = oob::listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))?;
    let addr = listener.local_addr().map_err(|e| VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(5),
        message: e.to_string(),
    })?;
    let server_settings = s.clone();
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
    let client = oob::connect(addr, false).and_then(|comm| drive(s, &client_dev, comm));
    let served = server
        .join()
        .map_err(|_| VerbsError::inval("the server thread panicked"))?;
    // When both fail, either may have caused the other's failure: say both.
    let (rows, connected, served) = match (client, served) {
        (Ok((rows, connected)), Ok(served)) => (rows, connected, served),
        (Err(c), Err(sv)) => {
            return Err(VerbsError::Io {
                errno: c.errno(),
                message: format!("client: {c}; server: {sv}"),
            })
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let baselines = if s.baseline {
        baselines(s)?
    } else {
        Vec::new()
    };
    Ok(Round {
        client_device: client_dev,
        rows,
        served,
        baselines,
        memory: Memory { before, connected },
    })
}

/// What the client prints: its rows, and in one process what the server saw, the
/// baselines and the rounds.
#[derive(Default)]
struct ClientReport {
    device: String,
    rows: Vec<Row>,
    served: Vec<ServerRow>,
    baselines: Vec<Baseline>,
    memory: Memory,
    /// Per size, the ratio of each round in the order they ran (empty without a baseline).
    round_ratios: Vec<Vec<f64>>,
    /// The server ran in this process (`--loopback`), so `served` is all it checked.
    server_here: bool,
}

impl ClientReport {
    /// The rounds of a run reduced to one result per size: the round whose ratio to its own
    /// baseline is the median (the lower one of an even count), with every round's ratio.
    fn median_round(rounds: Vec<Round>) -> ClientReport {
        let first = &rounds[0];
        let mut out = ClientReport {
            device: first.client_device.clone(),
            // The first round opened the devices: later ones reuse what it left.
            memory: first.memory,
            server_here: true,
            ..ClientReport::default()
        };
        for i in 0..first.rows.len() {
            let ratios: Vec<Option<f64>> = rounds
                .iter()
                .map(|r| r.rows.get(i).and_then(|row| ratio(row, r.baselines.get(i))))
                .collect();
            let mut order: Vec<usize> = (0..rounds.len()).collect();
            order.sort_by(|&a, &b| {
                let key = |k: usize| ratios[k].unwrap_or(f64::INFINITY);
                key(a).total_cmp(&key(b))
            });
            let pick = &rounds[order[(order.len() - 1) / 2]];
            out.rows.extend(pick.rows.get(i).cloned());
            let size = pick.rows.get(i).map(Row::size);
            out.served
                .extend(pick.served.iter().filter(|r| Some(r.size) == size).cloned());
            out.baselines.extend(pick.baselines.get(i).cloned());
            out.round_ratios
                .push(ratios.into_iter().flatten().collect());
        }
        out
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
            TestKind::SendLat => lat::server_send(&side, size, &comm)?,
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

/// Process memory around connecting: before anything was opened, and with every QP of
/// both sides connected and idle (the one-process mode).
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    before: Option<u64>,
    connected: Option<u64>,
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

fn print_baselines(s: &Settings, list: &[Baseline]) {
    if s.json {
        let items: Vec<String> = list.iter().map(report::baseline_json).collect();
        println!(
            "{{\"test\":\"udp-baseline\",\"cpus\":{},\"baseline\":[{}]}}",
            cpus(),
            items.join(",")
        );
        return;
    }
    println!(
        "--- softverbs perf udp-baseline: raw UDP 127.0.0.1 -> 127.0.0.2, {} CPUs",
        cpus()
    );
    println!(
        " {:>10} {:>10} {:>24} {:>12} {:>10} {:>14}",
        "#bytes", "datagram", "method", "BW[MB/s]", "Mpps", "half RTT[us]"
    );
    for (b, &size) in list.iter().zip(&s.sizes) {
        for (name, mbs, mpps) in &b.methods {
            println!(
                " {:>10} {:>10} {:>24} {:>12.2} {:>10.4} {:>14}",
                size, b.datagram_bytes, name, mbs, mpps, ""
            );
        }
        for (name, us) in [
            ("ping-pong, blocking", b.half_rtt_block_us),
            ("ping-pong, busy-poll", b.half_rtt_spin_us),
        ] {
            println!(
                " {:>10} {:>10} {:>24} {:>12} {:>10} {:>14.2}",
                size, b.datagram_bytes, name, "", "", us
            );
        }
    }
}

/// Datagram sizes as "4128 + 15 x 4112 B": runs of equal sizes counted.
fn datagram_list(sizes: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &n in sizes {
        match runs.last_mut() {
            Some((size, count)) if *size == n => *count += 1,
            _ => runs.push((n, 1)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(size, count)| match count {
            1 => size.to_string(),
            _ => format!("{count} x {size}"),
        })
        .collect();
    format!("{} B", parts.join(" + "))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn header(s: &Settings, device: &str, link: &str) -> String {
    report::describe(&[
        ("test", s.test.name().to_string()),
        ("RC QPs", s.qps.to_string()),
        ("device", device.to_string()),
        ("link", link.to_string()),
        ("MTU", s.mtu.to_string()),
        ("tx-depth", s.tx_depth.to_string()),
        ("post-list", s.post_list.to_string()),
        ("cq-mod", s.cq_mod.to_string()),
        ("inline", s.inline_size.to_string()),
        ("CPUs", cpus().to_string()),
    ])
}

/// The ratio of a result to its baseline: bandwidth share, or latency multiple.
fn ratio(row: &Row, b: Option<&Baseline>) -> Option<f64> {
    let b = b?;
    match row {
        // Without GSO the verb's datagrams were not measured: the equal ones stand in.
        Row::Bw(r) if b.bw_mbs > 0.0 => Some(r.avg_mbs / b.bw_mbs),
        Row::Bw(r) if b.uniform_mbs > 0.0 => Some(r.avg_mbs / b.uniform_mbs),
        Row::Lat(r) if b.half_rtt_us > 0.0 => {
            let base = if r.half_round_trip {
                b.half_rtt_us
            } else {
                2.0 * b.half_rtt_us
            };
            Some(r.median_us / base)
        }
        _ => None,
    }
}

fn print_client(s: &Settings, link: &str, client: &ClientReport) {
    let ClientReport {
        device,
        rows,
        served,
        baselines,
        memory,
        round_ratios,
        server_here,
    } = client;
    let opt = |x: Option<u64>| x.map_or("null".to_string(), |v| v.to_string());
    let with_ratio = !baselines.is_empty();
    let base_of = |i: usize| baselines.get(i);
    // What the server checked of the size of row i.
    let server_verified = |i: usize| {
        let size = rows.get(i).map(Row::size);
        served
            .iter()
            .filter(|r| Some(r.size) == size)
            .map(|r| r.verified_bytes)
            .sum::<u64>()
    };
    if s.json {
        let items: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| match row {
                Row::Bw(r) => {
                    let mut r = r.clone();
                    r.verified_bytes += server_verified(i);
                    report::bw_json(&r, ratio(row, base_of(i)))
                }
                Row::Lat(r) => {
                    let mut r = r.clone();
                    r.verified_bytes += server_verified(i);
                    report::lat_json(&r, ratio(row, base_of(i)))
                }
            })
            .collect();
        let bases: Vec<String> = baselines.iter().map(report::baseline_json).collect();
        println!(
            "{{\"test\":{},\"device\":{},\"link\":{},\"qps\":{},\"mtu\":{},\"tx_depth\":{},\
             \"post_list\":{},\"cq_mod\":{},\"inline\":{},\"cpus\":{},\"results\":[{}],\
             \"baseline\":[{}],\"round_ratios\":[{}],\"rss_before_bytes\":{},\"rss_connected_bytes\":{}}}",
            report::json_str(s.test.name()),
            report::json_str(device),
            report::json_str(link),
            s.qps,
            s.mtu,
            s.tx_depth,
            s.post_list,
            s.cq_mod,
            s.inline_size,
            cpus(),
            items.join(","),
            bases.join(","),
            round_ratios
                .iter()
                .map(|list| {
                    let nums: Vec<String> = list.iter().map(|&x| report::json_num(x)).collect();
                    format!("[{}]", nums.join(","))
                })
                .collect::<Vec<_>>()
                .join(","),
            opt(memory.before),
            opt(memory.connected)
        );
        return;
    }
    println!("{}", header(s, device, link));
    if s.test.is_latency() {
        let half = !matches!(s.test, TestKind::ReadLat | TestKind::AtomicLat);
        println!("{}", report::lat_header(with_ratio, half));
    } else {
        println!("{}", report::bw_header(with_ratio));
    }
    let mut verified = 0u64;
    for (i, row) in rows.iter().enumerate() {
        let x = ratio(row, base_of(i));
        match row {
            Row::Bw(r) => {
                verified += r.verified_bytes;
                println!("{}", report::bw_row(r, x));
            }
            Row::Lat(r) => {
                verified += r.verified_bytes;
                println!("{}", report::lat_row(r, x));
            }
        }
        verified += server_verified(i);
    }
    if with_ratio {
        for (i, (b, &size)) in baselines.iter().zip(&s.sizes).enumerate() {
            if let Some(ratios) = round_ratios.get(i).filter(|r| r.len() > 1) {
                let shown: Vec<String> = ratios
                    .iter()
                    .map(|&x| match s.test.is_latency() {
                        true => format!("{x:.2}x"),
                        false => format!("{:.1}%", x * 100.0),
                    })
                    .collect();
                println!(
                    "    {} rounds for {size} B, each the test then its baseline: {}; the row above is the median round",
                    ratios.len(),
                    shown.join(" ")
                );
            }
            println!(
                "    UDP baseline for {size} B: {:.2} MB/s raw UDP carrying the {}'s own datagrams ({}) as softverbs batches them; {:.2} MB/s with equal {} B datagrams ({}); ping-pong half RTT {:.2} us (blocking {:.2}, busy-poll {:.2})",
                b.bw_mbs,
                b.verb,
                datagram_list(&b.verb_datagrams),
                b.uniform_mbs,
                b.datagram_bytes,
                b.uniform_method,
                b.half_rtt_us,
                b.half_rtt_block_us,
                b.half_rtt_spin_us
            );
        }
    }
    if s.no_verify {
        println!("    data not checked (--no-verify), every completion successful");
    } else {
        let by = match (served.is_empty(), server_here) {
            (false, _) => " on both sides",
            (true, false) => " here (the server checks what it received)",
            (true, true) => " here",
        };
        println!("    verified{by}: {verified} bytes, every completion successful");
    }
    if let (Some(b), Some(c)) = (memory.before, memory.connected) {
        println!(
            "    memory: process RSS {:.1} MiB before opening, {:.1} MiB with {} connected idle QP pair(s)",
            b as f64 / (1 << 20) as f64,
            c as f64 / (1 << 20) as f64,
            s.qps
        );
    }
}

fn print_server(s: &Settings, device: &str, rows: &[ServerRow]) {
    if s.json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                let figures = r.report.map_or("null".to_string(), |p| {
                    format!(
                        "[{},{},{}]",
                        report::json_num(p.2),
                        report::json_num(p.3),
                        report::json_num(p.4)
                    )
                });
                format!(
                    "{{\"bytes\":{},\"iterations\":{},\"peer_figures\":{figures},\
                     \"handled\":{},\"verified_bytes\":{}}}",
                    r.size,
                    r.report.map_or("null".to_string(), |p| p.1.to_string()),
                    r.handled,
                    r.verified_bytes
                )
            })
            .collect();
        println!(
            "{{\"test\":{},\"role\":\"server\",\"device\":{},\"results\":[{}]}}",
            report::json_str(s.test.name()),
            report::json_str(device),
            items.join(",")
        );
        return;
    }
    println!("{}", header(s, device, "udp"));
    for r in rows {
        match r.report {
            Some(p) => println!(
                " {:>10} {:>12} the client's figures: peak {:.2} MB/s, average {:.2} MB/s, {:.6} Mpps; verified {} bytes",
                p.0, p.1, p.2, p.3, p.4, r.verified_bytes
            ),
            None => println!(
                " {:>10} {:>12} messages received or answered here; verified {} bytes",
                r.size, r.handled, r.verified_bytes
            ),
        }
    }
}
