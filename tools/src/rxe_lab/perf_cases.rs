//! `softverbs perf` itself (this binary's CLI, in a child process) against unmodified
//! perftest in the guest, every test whose verbs rxe has: softverbs as the client and as
//! the server. It proves what the perf tool claims, that its side channel and data path are
//! perftest's. Both sides run `--no-verify` where the data is perftest's own (perftest fills
//! its buffers with random bytes); every completion is still checked, both programs must
//! exit 0, and every report printed must name the run's size and count.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::lab_env::{free_local_port, LabEnv};
use super::perftest_cases::{report_rows, without_calibration_warnings};
use super::scenario::Direction;
use super::watchdog::Watchdog;
use crate::ibv_oob::IBV_PINGPONG_PORT;
use crate::perf::{Sequence, TestKind};

/// One `softverbs perf` test and the perftest program of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfTest {
    /// The `softverbs perf` test.
    pub test: TestKind,
    /// perftest's program.
    pub program: &'static str,
    /// Message size of the run (the first of a sweep).
    pub size: usize,
    /// Messages (round trips) of the run, per size.
    pub iters: u64,
    /// Both sides sweep the sizes (`-a`): powers of two from 2 B to perftest's 8 MiB.
    pub sweep: bool,
}

impl PerfTest {
    const fn new(test: TestKind, program: &'static str, size: usize) -> PerfTest {
        // The latency tests go past 256 round trips, so that ib_write_lat's one-byte tags
        // wrap through 0; 100 x 64 KiB is plenty for the bandwidth tests under TCG.
        PerfTest {
            test,
            program,
            size,
            iters: if test.is_latency() { 300 } else { 100 },
            sweep: false,
        }
    }

    const fn sweep(test: TestKind, program: &'static str) -> PerfTest {
        PerfTest {
            size: 2,
            iters: 5,
            sweep: true,
            ..PerfTest::new(test, program, 2)
        }
    }

    /// The sizes each side reports, in order.
    fn sizes(self) -> Vec<usize> {
        if self.sweep {
            (1..=SWEEP_TOP_LOG2).map(|k| 1usize << k).collect()
        } else {
            vec![self.size]
        }
    }

    /// The name of the case.
    pub fn scenario(self) -> String {
        let sweep = if self.sweep { " -a" } else { "" };
        format!("softverbs perf{sweep} vs {}", self.program)
    }

    /// Whether a server of this test prints a line with the size and the count: all but
    /// those of READ and atomic latency, whose server only waits for the client.
    fn server_reports(self) -> bool {
        !matches!(self.test, TestKind::ReadLat | TestKind::AtomicLat)
    }
}

/// The tests run.
pub const KINDS: [PerfTest; 8] = [
    PerfTest::new(TestKind::WriteBw, "ib_write_bw", 65536),
    PerfTest::new(TestKind::ReadBw, "ib_read_bw", 65536),
    PerfTest::new(TestKind::SendBw, "ib_send_bw", 65536),
    PerfTest::new(TestKind::AtomicBw, "ib_atomic_bw", 8),
    PerfTest::new(TestKind::WriteLat, "ib_write_lat", 64),
    PerfTest::new(TestKind::SendLat, "ib_send_lat", 64),
    PerfTest::new(TestKind::ReadLat, "ib_read_lat", 64),
    PerfTest::new(TestKind::AtomicLat, "ib_atomic_lat", 8),
];
/// perftest's `-a` against `softverbs perf -a`, for every test that sweeps (atomics are 8
/// bytes only): every size both sides report must be the same, each with the run's count,
/// which only holds if both run perftest's exchanges of a sweep. Few iterations per size:
/// the largest sizes are slow under TCG and every packet is captured and checked.
///
/// The client of a ping-pong waits, at the end of every size, for its last message to
/// complete: found here, a client that went on while its last WRITE of 256 KiB was still
/// leaving (rxe at MTU 1024 under TCG is slow to ACK) prepared its buffer for the next size
/// under it and sent ib_write_lat's server a WRITE without its tag.
pub const SWEEPS: [PerfTest; 6] = [
    PerfTest::sweep(TestKind::WriteBw, "ib_write_bw"),
    PerfTest::sweep(TestKind::ReadBw, "ib_read_bw"),
    PerfTest::sweep(TestKind::SendBw, "ib_send_bw"),
    PerfTest::sweep(TestKind::WriteLat, "ib_write_lat"),
    PerfTest::sweep(TestKind::SendLat, "ib_send_lat"),
    PerfTest::sweep(TestKind::ReadLat, "ib_read_lat"),
];
/// perftest's `-a` goes up to 2^23 bytes (its MAX_SIZE), which is also `softverbs perf`'s
/// default `--max-size`.
const SWEEP_TOP_LOG2: u32 = 23;
/// Longest wait for either program. The `-a` sweeps of the latency tests take 100-150 s
/// under TCG on a loaded host (write_lat at MTU 4096 once needed more than the 120 s this
/// used to be, while making progress); a stalled case is caught by the watchdog after
/// [`watchdog::STALL`](super::watchdog::STALL) instead.
const WAIT: Duration = Duration::from_secs(300);
/// perftest in the guest is killed after this long whatever happens.
const GUEST_LIFETIME_S: u64 = 330;
/// What the guest prints once its perftest server listens (see `run`).
const LISTENING: &str = "perftest-listening";

/// A child's output, line by line, as it comes (stdout and stderr merged by the caller's
/// choice of which pipe to follow), so that a run can wait for a line and still keep all.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn follow(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits until a line contains `what`; false at the deadline or when the pipe closes.
    fn wait_for(&mut self, what: &str, deadline: Instant) -> bool {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(what);
                    self.seen.push(line);
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Everything, once the child has exited (its pipe closed).
    fn all(mut self) -> Vec<String> {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        self.seen
    }
}

/// Runs `script` in the guest over ssh with the port forward `forward`; the child and its
/// output.
fn spawn_guest(
    env: &LabEnv,
    forward: [String; 2],
    script: String,
) -> Result<(Child, Lines), String> {
    let mut child = env
        .ssh(&forward)
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("ssh: {e}"))?;
    let out = Lines::follow(child.stdout.take().ok_or("no guest stdout")?);
    Ok((child, out))
}

/// Runs `softverbs perf` against perftest's `kind`; softverbs is perftest's client for
/// `SoftverbsToRxe` and its server for `RxeToSoftverbs`.
pub fn run(
    env: &LabEnv,
    device: &str,
    kind: PerfTest,
    dir: Direction,
    mtu: u32,
) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = free_local_port()?;
    let iters = kind.iters;
    let sizes = if kind.sweep {
        "-a".to_string()
    } else {
        format!("-s {}", kind.size)
    };
    let perftest = format!(
        "timeout {GUEST_LIFETIME_S} {} -d rxe0 -x 1 -F -m {mtu} {sizes} -n {iters} -p {IBV_PINGPONG_PORT}",
        kind.program
    );
    let mut perf = Command::new(exe);
    perf.env(softverbs_emu::engine::DEVICES_ENV, env.device_spec(device))
        .args(["perf", kind.test.name()])
        .args(["-d", device, "-p", &port.to_string()])
        .args(sizes.split(' '))
        .args(["-n", &iters.to_string()])
        .args(["-m", &mtu.to_string(), "--no-verify"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let deadline = Instant::now() + WAIT;
    let is_client = dir == Direction::SoftverbsToRxe;
    // Whichever side serves is started first and waited for until it listens.
    let (mut guest, mut perf_child, guest_out, perf_out, perf_err) = if is_client {
        // The guest says when its server listens, so that our client's first connection
        // through the forward reaches it.
        let script = format!(
            "{perftest} 2>&1 & for i in $(seq 300); do ss -ltn | grep -q ':{IBV_PINGPONG_PORT} ' && echo {LISTENING} && break; sleep 0.1; done; wait"
        );
        let forward = format!("127.0.0.1:{port}:127.0.0.1:{IBV_PINGPONG_PORT}");
        let (mut guest, mut guest_out) = spawn_guest(env, ["-L".into(), forward], script)?;
        if !guest_out.wait_for(LISTENING, deadline) {
            let _ = guest.kill();
            let _ = guest.wait();
            return Err(format!("{} did not start listening", kind.program));
        }
        let mut perf_child = perf
            .arg("127.0.0.1")
            .spawn()
            .map_err(|e| format!("softverbs perf: {e}"))?;
        let perf_out = Lines::follow(perf_child.stdout.take().ok_or("no perf stdout")?);
        let perf_err = Lines::follow(perf_child.stderr.take().ok_or("no perf stderr")?);
        (guest, perf_child, guest_out, perf_out, perf_err)
    } else {
        let mut perf_child = perf.spawn().map_err(|e| format!("softverbs perf: {e}"))?;
        let mut perf_err = Lines::follow(perf_child.stderr.take().ok_or("no perf stderr")?);
        if !perf_err.wait_for("waiting on TCP port", deadline) {
            let _ = perf_child.kill();
            let _ = perf_child.wait();
            return Err(format!(
                "softverbs perf did not start serving: {}",
                perf_err.all().join(" / ")
            ));
        }
        let perf_out = Lines::follow(perf_child.stdout.take().ok_or("no perf stdout")?);
        let forward = format!("{IBV_PINGPONG_PORT}:127.0.0.1:{port}");
        let (guest, guest_out) = spawn_guest(
            env,
            ["-R".into(), forward],
            format!("{perftest} 127.0.0.1 2>&1"),
        )?;
        (guest, perf_child, guest_out, perf_out, perf_err)
    };
    let mut watchdog = Watchdog::new(env);
    let perf_status = watchdog.wait_exit(&mut perf_child, WAIT, "softverbs perf");
    if perf_status.is_err() {
        // Its peer cannot finish either: do not wait for it.
        let _ = guest.kill();
    }
    let guest_status = watchdog.wait_exit(&mut guest, WAIT, kind.program);
    let perf_lines = perf_out.all();
    let perf_errors = perf_err.all();
    let guest_lines = guest_out.all();
    let guest_report = without_calibration_warnings(&guest_lines.join("\n"));
    let perf_status = perf_status?;
    let guest_status = guest_status?;
    let tail = |lines: &[String]| {
        lines
            .iter()
            .rev()
            .take(4)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join(" / ")
    };
    if !perf_status.success() {
        return Err(format!(
            "softverbs perf failed ({perf_status}): {} / stderr: {} / {}: {}",
            tail(&perf_lines),
            tail(&perf_errors),
            kind.program,
            tail(&guest_lines)
        ));
    }
    if !guest_status.success() {
        return Err(format!(
            "{} failed ({guest_status}): {}",
            kind.program,
            tail(&guest_lines)
        ));
    }
    // A client posts the work and says its completions were all successful.
    if is_client
        && !perf_lines
            .iter()
            .any(|l| l.contains("every completion successful"))
    {
        return Err(format!(
            "softverbs perf did not confirm its completions: {}",
            tail(&perf_lines)
        ));
    }
    // The size and the count every report row names must be the run's, size by size.
    // A client reports every size; a server of a test with a report after it prints the
    // client's report, which is of the last size only.
    let rows_of = |server: bool| -> Vec<[String; 2]> {
        let sizes = kind.sizes();
        let shown = match server && Sequence::of(kind.test).report {
            true => &sizes[sizes.len() - 1..],
            false => &sizes[..],
        };
        shown
            .iter()
            .map(|size| [size.to_string(), iters.to_string()])
            .collect()
    };
    let check = |who: &str, server: bool, rows: Vec<Vec<&str>>| -> Result<String, String> {
        let named: Vec<[String; 2]> = rows
            .iter()
            .filter_map(|r| Some([r.first()?.to_string(), r.get(1)?.to_string()]))
            .collect();
        if named != rows_of(server) {
            return Err(format!("{who}'s report: {rows:?}"));
        }
        Ok(rows.last().map(|r| r.join(" ")).unwrap_or_default())
    };
    // perftest is the server when softverbs is the client.
    let theirs = if !is_client || kind.server_reports() {
        check(
            kind.program,
            is_client,
            report_rows(guest_report.lines(), "#bytes"),
        )?
    } else {
        "none (its server only waits)".to_string()
    };
    if is_client || kind.server_reports() {
        // A client's report, or the lines of what a server received or answered (or of the
        // client's figures).
        let ours = report_rows(perf_lines.iter().map(String::as_str), "--- softverbs perf");
        check("softverbs perf", !is_client, ours)
            .map_err(|e| format!("{e}: {}", tail(&perf_lines)))?;
    }
    let role = if is_client { "client" } else { "server" };
    let sizes = match kind.sweep {
        true => format!("sizes 2..={} B", 1usize << SWEEP_TOP_LOG2),
        false => format!("{} B", kind.size),
    };
    Ok(format!(
        "softverbs perf {} as {role}, {iters} x {sizes}, every completion checked; {}'s report (last row): {theirs}",
        kind.test.name(),
        kind.program,
    ))
}
