//! Unmodified Debian rdma_cm programs on the host, on softverbs through the drop-in
//! librdmacm.so.1 + libibverbs.so.1 (`softverbs run --`), against the same programs on the
//! guest's kernel rdma_cm and rxe, in both roles: rping (every ping verified, -V) and
//! perftest with `-R` (ib_send_bw, ib_write_bw, ib_read_lat: the connections and perftest's
//! own exchange over rdma_cm), and mckey (UD multicast: a group joined through rdma_cm on
//! both sides, one sending, the other receiving every message).
//!
//! The direction names the active side, as in cm_cases: `SoftverbsToRxe` = the host's
//! program is the client.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cm_cases::GuestProgram;
use super::dropin_cases::{last_lines, output};
use super::lab_env::LabEnv;
use super::line_tap::{tap_lines, wait_for_line};
use super::scenario::Direction;
use super::watchdog::Watchdog;

/// rping's port (the host's drop-in and the guest's rping both use it).
const RPING_PORT: u16 = 7175;
/// perftest's rdma_cm port.
const PERFTEST_PORT: u16 = 18516;
/// rping's iterations and buffer size.
const RPING_COUNT: usize = 10;
const RPING_SIZE: usize = 1000;
/// perftest's iterations (bandwidth and latency alike).
const PERFTEST_ITERS: u32 = 500;
/// Longest wait for the host's program (the watchdog fails a stalled one sooner).
const WAIT: Duration = Duration::from_secs(100);
/// The multicast group of the mckey cases, its messages and their size.
const MCKEY_GROUP: &str = "239.77.0.9";
const MCKEY_COUNT: usize = 10;
const MCKEY_SIZE: usize = 500;
/// What mckey's receiver prints once it joined and waits for the messages.
const MCKEY_RECEIVING: &str = "receiving data transfers";
/// How long the guest's mckey receiver gets to join before the drop-in's sender starts
/// (which then waits 3 s more itself, as mckey does).
const MCKEY_GUEST_JOIN: Duration = Duration::from_secs(3);

/// What perftest's `-R` server prints as it starts listening (the listen follows within
/// its start-up; the case gives it a second more).
const PERFTEST_LISTENING: &str = "* Waiting for client to connect... *";

/// One drop-in rdma_cm scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropInCm {
    /// rping -C 10 -S 1000 -V.
    Rping,
    /// A perftest program with -R.
    Perftest(&'static str),
    /// mckey: the active side sends to a multicast group, the other receives.
    Mckey,
}

impl DropInCm {
    /// Every case, in table order.
    pub const ALL: [DropInCm; 5] = [
        DropInCm::Rping,
        DropInCm::Mckey,
        DropInCm::Perftest("ib_send_bw"),
        DropInCm::Perftest("ib_write_bw"),
        DropInCm::Perftest("ib_read_lat"),
    ];

    /// Scenario name (the results table, `--only`).
    pub fn name(self) -> String {
        match self {
            DropInCm::Rping => {
                format!("CM drop-in rping -C {RPING_COUNT} -S {RPING_SIZE}")
            }
            DropInCm::Perftest(program) => format!("CM drop-in {program} -R"),
            DropInCm::Mckey => format!("CM drop-in mckey -C {MCKEY_COUNT} -S {MCKEY_SIZE}"),
        }
    }

    /// Whether CI runs it: rping and one perftest (the others with `--full`).
    pub fn in_ci(self) -> bool {
        matches!(
            self,
            DropInCm::Rping | DropInCm::Mckey | DropInCm::Perftest("ib_send_bw")
        )
    }

    /// The roles it runs in. perftest 4.5's `-R` client connects its data QP the moment
    /// the exchange on its first connection ends, while its server only then opens the
    /// listen for it: a client faster than the server gets the kernel's REJ "invalid
    /// service ID" (8) for that REQ and perftest 4.5 then hangs (later perftest retries).
    /// Against the lab's guest under TCG the drop-in client is always the faster one (the
    /// captures show the REJ 8 after the exchange), so perftest runs with the drop-in as
    /// server only; rping, whose client connects once, runs in both roles.
    pub fn directions(self) -> &'static [Direction] {
        match self {
            DropInCm::Rping | DropInCm::Mckey => &Direction::BOTH,
            DropInCm::Perftest(_) => &[Direction::RxeToSoftverbs],
        }
    }
}

/// Runs `case` with the host's program on the drop-in over `device`, in role `dir`.
pub fn run(env: &LabEnv, device: &str, case: DropInCm, dir: Direction) -> Result<String, String> {
    let (host_ip, guest_ip) = (env.host_ip.to_string(), env.guest_ip.to_string());
    let client = dir == Direction::SoftverbsToRxe;
    let (program, flags, port) = match case {
        DropInCm::Rping => (
            "rping",
            format!("-C {RPING_COUNT} -S {RPING_SIZE} -p {RPING_PORT} -V -v"),
            RPING_PORT,
        ),
        DropInCm::Perftest(program) => (
            program,
            format!("-R -p {PERFTEST_PORT} -n {PERFTEST_ITERS} -F"),
            PERFTEST_PORT,
        ),
        DropInCm::Mckey => (
            "mckey",
            format!("-m {MCKEY_GROUP} -C {MCKEY_COUNT} -S {MCKEY_SIZE}"),
            0,
        ),
    };
    let (host_args, guest_cmd) = match (case, client) {
        (DropInCm::Rping, true) => (
            format!("-c -a {guest_ip} -I {host_ip} {flags}"),
            format!("rping -s -a {guest_ip} {flags}"),
        ),
        (DropInCm::Rping, false) => (
            format!("-s -a {host_ip} {flags}"),
            format!("rping -c -a {host_ip} {flags}"),
        ),
        (DropInCm::Perftest(p), true) => (
            format!("-d {device} {flags} {guest_ip}"),
            format!("{p} -d rxe0 {flags}"),
        ),
        (DropInCm::Perftest(p), false) => (
            format!("-d {device} {flags}"),
            format!("{p} -d rxe0 {flags} {host_ip}"),
        ),
        // The active side sends.
        (DropInCm::Mckey, true) => (
            format!("-b {host_ip} -s {flags}"),
            format!("mckey -b {guest_ip} {flags}"),
        ),
        (DropInCm::Mckey, false) => (
            format!("-b {host_ip} {flags}"),
            format!("mckey -b {guest_ip} -s {flags}"),
        ),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut host = Command::new(exe);
    // Line-buffered, so that perftest's "waiting" line comes while it waits.
    host.env(softverbs_emu::engine::DEVICES_ENV, env.device_spec(device))
        .args(["run", "--", "stdbuf", "-oL", program])
        .args(host_args.split(' '))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut host, host_lines, guest) = if client {
        let guest = if case == DropInCm::Mckey {
            // A receiver listens on no port: it gets a moment to join.
            let guest = GuestProgram::start(env, &guest_cmd, None)?;
            std::thread::sleep(MCKEY_GUEST_JOIN);
            guest
        } else {
            GuestProgram::start(env, &guest_cmd, Some(("TCP", port)))?
        };
        let mut host = host.spawn().map_err(|e| format!("softverbs run: {e}"))?;
        let (_, lines) = tap_lines(host.stdout.take().ok_or("no host stdout")?);
        (host, lines, guest)
    } else {
        let mut host = host.spawn().map_err(|e| format!("softverbs run: {e}"))?;
        let (rx, lines) = tap_lines(host.stdout.take().ok_or("no host stdout")?);
        // rping's server prints nothing until a client comes: it listens within
        // milliseconds of its start; perftest says when it listens.
        let listening = match case {
            DropInCm::Rping => {
                std::thread::sleep(Duration::from_secs(2));
                true
            }
            DropInCm::Perftest(_) => {
                let seen = wait_for_line(
                    &rx,
                    PERFTEST_LISTENING,
                    Instant::now() + Duration::from_secs(30),
                );
                std::thread::sleep(Duration::from_secs(1));
                seen
            }
            // The receiver says when it joined and waits for the messages.
            DropInCm::Mckey => wait_for_line(
                &rx,
                MCKEY_RECEIVING,
                Instant::now() + Duration::from_secs(30),
            ),
        };
        if !listening {
            let _ = host.kill();
            let _ = host.wait();
            return Err(format!("{program} on the drop-in did not listen (or join)"));
        }
        (host, lines, GuestProgram::start(env, &guest_cmd, None)?)
    };
    let host_status =
        Watchdog::new(env).wait_exit(&mut host, WAIT, &format!("{program} on the drop-in"));
    let guest_out = guest.finish(env, true);
    // stdout went to the line tap: what remains is stderr.
    let host_text = host_lines.join().unwrap_or_default() + &output(host).unwrap_or_default();
    let host_status = host_status?;
    let guest_out = guest_out?;
    if !host_status.success() {
        return Err(format!(
            "{program} on the drop-in failed ({host_status}): {}",
            last_lines(&host_text)
        ));
    }
    let role = if client { "client" } else { "server" };
    match case {
        DropInCm::Rping => {
            for (who, text) in [("drop-in", &host_text), ("rxe", &guest_out)] {
                let pings = text.matches("ping data: rdma-ping-").count();
                if pings != RPING_COUNT {
                    return Err(format!(
                        "{who} rping printed {pings} of {RPING_COUNT} pings: {}",
                        last_lines(text)
                    ));
                }
            }
            Ok(format!(
                "unmodified rping on the drop-in ({role}) against rping on rxe: {RPING_COUNT} x {RPING_SIZE} B SEND/READ/WRITE cycles, verified on both sides (-V)"
            ))
        }
        DropInCm::Mckey => {
            for (who, text) in [("drop-in", &host_text), ("rxe", &guest_out)] {
                let joined = format!("joined dgid: ::ffff:{MCKEY_GROUP}");
                if !text.contains(&joined)
                    || !text.contains("data transfers complete")
                    || !text.contains("return status 0")
                {
                    return Err(format!("{who} mckey: {}", last_lines(text)));
                }
            }
            let (sender, receiver) = if client {
                ("the drop-in", "rxe")
            } else {
                ("rxe", "the drop-in")
            };
            Ok(format!(
                "unmodified mckey: {sender} sends {MCKEY_COUNT} x {MCKEY_SIZE} B to UD multicast group {MCKEY_GROUP}, joined through rdma_cm on both sides; {receiver} receives every one"
            ))
        }
        DropInCm::Perftest(p) => {
            let results = if p.ends_with("_lat") {
                "t_typical"
            } else {
                "BW average"
            };
            for (who, text) in [("drop-in", &host_text), ("rxe", &guest_out)] {
                if !text.contains("Data ex. method : rdma_cm") || !text.contains("remote address") {
                    return Err(format!(
                        "{who} {p} did not connect through rdma_cm: {}",
                        last_lines(text)
                    ));
                }
            }
            if !host_text.contains(results) && !guest_out.contains(results) {
                return Err(format!("no {p} results: {}", last_lines(&host_text)));
            }
            Ok(format!(
                "unmodified {p} -R on the drop-in ({role}) against {p} -R on rxe: connections and perftest's exchange over rdma_cm, {PERFTEST_ITERS} iterations"
            ))
        }
    }
}
