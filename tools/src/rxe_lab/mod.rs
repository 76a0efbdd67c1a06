//! `softverbs rxe-lab build|up|down|status|run`: the interop lab against the Linux kernel's
//! rxe driver in a qemu VM (docs/rxe-lab.md). `build`, `up`, `down` and `status` are the
//! shell script tools/rxe-lab/lab.sh; `run` drives the scenarios from here, with softverbs on
//! the lab link in this process.

mod capture_set;
mod cm_cases;
mod cm_peers;
mod dropin_cases;
mod dropin_cm_cases;
mod error_cases;
mod guest_pair;
mod guest_peer;
mod ibv_wc;
mod inv_cases;
mod lab_env;
mod line_tap;
mod pattern;
mod perf_cases;
mod perftest_cases;
mod pingpong_cases;
mod plan;
mod qmp;
mod results;
mod scenario;
mod shared_cases;
mod srq_cases;
mod trim;
mod ud_cases;
mod verb_cases;
mod watchdog;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use softverbs::{register_device, DeviceConfig, LinkConfig};

use lab_env::LabEnv;
use plan::{Case, CaseKind};
use results::{Row, Verdict};
use scenario::Direction;

/// Exit code of `run` when no lab is usable (the scenarios were skipped, not passed).
pub const EXIT_SKIPPED: u8 = 77;
/// Name of softverbs' device on the lab link.
const LAB_DEVICE: &str = "lab";

/// Arguments of `softverbs rxe-lab`.
#[derive(clap::Args)]
pub struct RxeLabArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build the guest image (debootstrap; cached by recipe hash outside the clone).
    Build,
    /// Boot the guest under qemu (TCG) and create rxe0 on its lab NIC.
    Up,
    /// Stop the guest and remove the run state (safe to call when nothing runs).
    Down,
    /// Say whether a lab is up.
    Status,
    /// Run the interop scenarios against a lab that is up.
    Run(RunArgs),
    /// Record the repository's kernel-rxe captures (conformance/lab_*.pcap) and their
    /// README sections with a lab that is up.
    Capture(CaptureArgs),
}

/// Arguments of `softverbs rxe-lab capture`.
#[derive(clap::Args)]
pub struct CaptureArgs {
    /// The capture folder (with its README.md) to write into; default: the repository's
    /// conformance/ this binary was built from.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `softverbs rxe-lab run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Only scenarios whose name contains this text (e.g. `WRITE`, `pingpong`).
    #[arg(long)]
    only: Option<String>,
    /// Path MTUs to run at.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    mtu: Vec<u32>,
    /// Write the results table here too (markdown).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Do not record captures.
    #[arg(long)]
    no_capture: bool,
    /// The whole matrix (about 18 minutes on 2 cores; run it before a release), not the
    /// subset CI runs (docs/rxe-lab.md, "What the CI stage runs and why").
    #[arg(long)]
    full: bool,
}

/// The lab script: `SOFTVERBS_LAB_SCRIPTS/lab.sh`, else the one beside this crate's sources.
fn lab_script() -> PathBuf {
    match std::env::var_os("SOFTVERBS_LAB_SCRIPTS") {
        Some(dir) => PathBuf::from(dir).join("lab.sh"),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/rxe-lab/lab.sh")),
    }
}

/// Runs the subcommand.
pub fn run(args: &RxeLabArgs) -> ExitCode {
    let script_action = match &args.action {
        Action::Build => "build",
        Action::Up => "up",
        Action::Down => "down",
        Action::Status => "status",
        Action::Run(run_args) => return run_scenarios(run_args),
        Action::Capture(capture_args) => return record_captures(capture_args),
    };
    match Command::new("bash")
        .arg(lab_script())
        .arg(script_action)
        .status()
    {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(1, 255) as u8),
        Err(e) => {
            eprintln!("rxe-lab: running {}: {e}", lab_script().display());
            ExitCode::FAILURE
        }
    }
}

/// The cases of this run: the CI subset or (`--full`) all, then `--only`.
fn cases_of_run(args: &RunArgs) -> Vec<Case> {
    let mut cases = plan::full(&args.mtu);
    if !args.full {
        cases.retain(plan::in_ci);
    }
    if let Some(only) = &args.only {
        cases.retain(|c| c.scenario.contains(only.as_str()));
    }
    cases
}

/// Loads the lab's settings, registers softverbs' lab device, installs the guest's peer
/// program, teaches our station the guest's MAC and empties the capture folder.
fn prepare() -> Result<(LabEnv, PathBuf), ExitCode> {
    let env = match LabEnv::load() {
        Ok(env) => env,
        Err(why) => {
            println!("rxe interop skipped: {why}");
            return Err(ExitCode::from(EXIT_SKIPPED));
        }
    };
    if let Err(e) = register_device(DeviceConfig {
        link: LinkConfig::QemuSocket {
            frames_local: env.frames_local,
            frames_peer: env.frames_peer,
        },
        netdev_mtu: env.mtu,
        ..DeviceConfig::new(LAB_DEVICE, env.host_ip.into())
    }) {
        eprintln!("rxe-lab: registering the lab device: {e}");
        return Err(ExitCode::FAILURE);
    }
    if let Err(e) = guest_peer::install(&env) {
        println!("rxe interop skipped: {e}");
        return Err(ExitCode::from(EXIT_SKIPPED));
    }
    prime_arp(&env);
    let capture_dir = env.run.join("captures");
    if let Err(e) = std::fs::create_dir_all(&capture_dir) {
        eprintln!("rxe-lab: {}: {e}", capture_dir.display());
        return Err(ExitCode::FAILURE);
    }
    remove_old_captures(&capture_dir);
    Ok((env, capture_dir))
}

/// `softverbs rxe-lab capture`.
fn record_captures(args: &CaptureArgs) -> ExitCode {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance")));
    let (env, capture_dir) = match prepare() {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    match capture_set::record(&env, LAB_DEVICE, &capture_dir, &out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rxe-lab capture: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_scenarios(args: &RunArgs) -> ExitCode {
    let (env, capture_dir) = match prepare() {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    println!(
        "rxe lab: guest rxe0 at {}, softverbs device {}",
        env.guest_ip,
        env.device_spec(LAB_DEVICE)
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for (i, case) in cases_of_run(args).into_iter().enumerate() {
        let row = run_with_retry(&env, &capture_dir, i, &case, !args.no_capture);
        let verdict = match &row.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::PassOnRetry(_) => "pass on retry".to_string(),
            Verdict::Fail(why) => format!("FAIL: {why}"),
        };
        print_row(&row, &verdict);
        rows.push(row);
    }
    let table = results::table(&rows);
    let versions = std::fs::read_to_string(env.run.join("versions")).unwrap_or_default();
    let doc = format!(
        "Guest: {}\n\n{table}",
        versions.split_whitespace().collect::<Vec<_>>().join(", ")
    );
    let _ = std::fs::write(env.run.join("results.md"), &doc);
    if let Some(path) = &args.results {
        if let Err(e) = std::fs::write(path, &doc) {
            eprintln!("rxe-lab: writing {}: {e}", path.display());
        }
    }
    let passed = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Pass))
        .count();
    let failed = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Fail(_)))
        .count();
    let retried = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::PassOnRetry(_)))
        .count();
    println!(
        "rxe interop: {} passed, {failed} failed in {:.0} s ({retried} of the passes on retry; table: {})",
        passed + retried,
        started.elapsed().as_secs_f64(),
        env.run.join("results.md").display()
    );
    if failed > 0 || rows.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `case`, and once more on fresh QPs and guest programs if it fails: a loaded host
/// can wedge one case (issue 26); a real fault fails both.
fn run_with_retry(
    env: &LabEnv,
    capture_dir: &std::path::Path,
    index: usize,
    case: &Case,
    capture: bool,
) -> Row {
    let row = run_case(env, capture_dir, index, case, "", capture);
    let Verdict::Fail(first) = &row.verdict else {
        return row;
    };
    // The guest's side of a failure the watchdog did not catch (a program's own timeout),
    // taken before its programs are ended: what the retry's pass would otherwise hide.
    let first = if first.contains("guest state in") {
        first.clone()
    } else {
        let who = format!("{} mtu {}: {first}", case.scenario, case.mtu);
        let saved = watchdog::save_guest_state(env, &who);
        format!("{first}; guest state in {saved}")
    };
    print_row(&row, &format!("FAIL: {first} (retrying once)"));
    end_guest_programs(env);
    let retry = run_case(env, capture_dir, index, case, "-retry", capture);
    match retry.verdict {
        Verdict::Pass => Row {
            verdict: Verdict::PassOnRetry(first),
            ..retry
        },
        Verdict::Fail(second) => {
            end_guest_programs(env);
            Row {
                verdict: Verdict::Fail(format!("{second} (first try: {first})")),
                ..retry
            }
        }
        Verdict::PassOnRetry(_) => retry,
    }
}

/// Deletes the captures of earlier runs: a full run leaves several GB of them (a sweep's
/// capture is up to 240 MB), and the folder would otherwise grow with every run.
fn remove_old_captures(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "pcap") {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Ends what a failed case may have left running in the guest (every guest program runs
/// under `timeout`), so that a server still listening on its port cannot take the next
/// case's connection: one failure used to fail every perftest case after it.
fn end_guest_programs(env: &LabEnv) {
    let _ = env.ssh(&[]).arg("pkill -f '^timeout '; true").status();
}

/// Has the guest send us one datagram, so that its ARP request teaches our station its MAC
/// before the first scenario: packets sent while a MAC is unknown wait in a bounded queue,
/// and a UC message longer than that queue would lose its head.
fn prime_arp(env: &LabEnv) {
    let script = format!(
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'arp', ('{}', 9))\"",
        env.host_ip
    );
    let _ = env.ssh(&[]).arg(script).status();
    // The guest's ARP request and our reply cross the link within this.
    std::thread::sleep(std::time::Duration::from_secs(1));
}

fn print_row(row: &Row, verdict: &str) {
    println!(
        "{:<24} {:<17} mtu {:<5} {:>6.1} s  {verdict}  [{}]",
        row.scenario,
        row.direction,
        row.mtu,
        row.elapsed.as_secs_f64(),
        row.capture
    );
}

/// Runs one case; `attempt` ("" or "-retry") keeps a retry's capture beside the first's.
fn run_case(
    env: &LabEnv,
    capture_dir: &std::path::Path,
    index: usize,
    case: &Case,
    attempt: &str,
    capture: bool,
) -> Row {
    let started = Instant::now();
    let slug: String = format!(
        "{:03}-{}-{}-mtu{}{attempt}",
        index,
        case.scenario,
        match case.direction {
            Direction::SoftverbsToRxe => "sv2rxe",
            Direction::RxeToSoftverbs => "rxe2sv",
        },
        case.mtu
    )
    .chars()
    .map(|c| {
        if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        }
    })
    .collect();
    let file = capture_dir.join(format!("{slug}.pcap"));
    let cap = if capture {
        Some(qmp::Capture::start(
            &env.qmp,
            "lab",
            &format!("cap{index}{attempt}"),
            &file,
        ))
    } else {
        None
    };
    let outcome = match &cap {
        Some(Err(e)) => Err(format!("capture: {e}")),
        _ => match case.kind {
            CaseKind::Verb(transport, verb) => {
                verb_cases::run(env, LAB_DEVICE, transport, verb, case.direction, case.mtu)
            }
            CaseKind::Ud(verb) => ud_cases::run(env, LAB_DEVICE, verb, case.direction, case.mtu),
            CaseKind::SendInv => inv_cases::run(env, LAB_DEVICE, case.direction, case.mtu),
            CaseKind::Srq => srq_cases::run(env, LAB_DEVICE, case.mtu),
            CaseKind::Error(error) => {
                error_cases::run(env, LAB_DEVICE, error, case.direction, case.mtu)
            }
            CaseKind::Perftest(kind) => {
                perftest_cases::run(env, LAB_DEVICE, kind, case.direction, case.mtu)
            }
            CaseKind::Perf(kind) => {
                perf_cases::run(env, LAB_DEVICE, kind, case.direction, case.mtu)
            }
            CaseKind::DropIn => dropin_cases::run(env, LAB_DEVICE, case.direction, case.mtu),
            CaseKind::Cm(cm) => cm_cases::run(env, LAB_DEVICE, cm, case.direction),
            CaseKind::DropInCm(dropin) => {
                dropin_cm_cases::run(env, LAB_DEVICE, dropin, case.direction)
            }
            CaseKind::Pingpong(kind, size) => {
                pingpong_cases::run(env, LAB_DEVICE, kind, case.direction, case.mtu, size)
            }
            CaseKind::SharedDevice => shared_cases::run(env, LAB_DEVICE, case.mtu),
        },
    };
    let capture_result = match cap {
        Some(Ok(c)) => match c.stop() {
            Ok(file) => results::check_capture(&file),
            Err(e) => Err(format!("stopping the capture: {e}")),
        },
        Some(Err(e)) => Err(e),
        None => Ok("not recorded".to_string()),
    };
    let capture_file = capture.then(|| file.clone());
    let (covered, verdict) = match (outcome, &capture_result) {
        (Ok(covered), Ok(_)) => (covered, Verdict::Pass),
        (Ok(covered), Err(e)) => (covered, Verdict::Fail(format!("capture: {e}"))),
        (Err(e), _) => (String::new(), Verdict::Fail(e)),
    };
    Row {
        scenario: case.scenario.clone(),
        direction: case.direction.label().to_string(),
        mtu: case.mtu,
        covered,
        verdict,
        elapsed: started.elapsed(),
        capture: match capture_result {
            Ok(s) => s,
            Err(e) => e,
        },
        capture_file,
    }
}
