//! `softverbs rxe-lab capture`: records the repository's own kernel-rxe captures
//! (conformance/lab_*.pcap) with the lab, one per opcode family and QP type the lab
//! exercises, each trimmed to its interesting packets, and rewrites their sections of
//! conformance/README.md, which the conformance tests check the files against.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use softverbs::Context;

use super::error_cases::ErrorCase;
use super::lab_env::LabEnv;
use super::plan::{Case, CaseKind};
use super::qmp;
use super::results::Verdict;
use super::scenario::{Direction, Transport, Verb};
use super::trim::{self, MIDDLES_KEPT};

use Direction::{RxeToSoftverbs as RxeReq, SoftverbsToRxe as SvReq};

/// One capture of the set: the lab case that makes it and what it is for.
struct Spec {
    case: Case,
    /// What kernel rxe sends in it, for the README.
    shows: &'static str,
}

fn spec(
    kind: CaseKind,
    scenario: &str,
    direction: Direction,
    mtu: u32,
    shows: &'static str,
) -> Spec {
    Spec {
        case: Case {
            scenario: scenario.to_string(),
            direction,
            mtu,
            kind,
        },
        shows,
    }
}

/// The set: every request opcode with rxe as the requester, every response/ACK/NAK with
/// rxe as the responder, at path MTU 1024 (small packets) and once at 4096.
fn specs() -> Vec<Spec> {
    use CaseKind::{Error, Srq, Ud, Verb as V};
    let rc = |verb, dir, mtu, shows| {
        let name = format!("RC {}", Verb::name(verb));
        spec(V(Transport::Rc, verb), &name, dir, mtu, shows)
    };
    let uc = |verb, shows| {
        let name = format!("UC {}", Verb::name(verb));
        spec(V(Transport::Uc, verb), &name, RxeReq, 1024, shows)
    };
    vec![
        rc(Verb::Send, RxeReq, 1024, "rxe SEND ONLY/FIRST/MIDDLE/LAST (0 B to 1 MiB); softverbs' ACKs"),
        rc(Verb::SendImm, RxeReq, 1024, "rxe SEND ONLY/LAST with immediate"),
        rc(Verb::Write, RxeReq, 1024, "rxe RDMA WRITE ONLY/FIRST/MIDDLE/LAST (RETH)"),
        rc(Verb::WriteImm, RxeReq, 1024, "rxe RDMA WRITE ONLY/LAST with immediate"),
        rc(Verb::Write, RxeReq, 4096, "rxe RDMA WRITE at path MTU 4096"),
        rc(Verb::Read, RxeReq, 1024, "rxe RDMA READ requests; softverbs' READ responses"),
        rc(Verb::Read, SvReq, 1024, "rxe READ responses ONLY/FIRST/MIDDLE/LAST (AETH)"),
        rc(Verb::CmpSwap, RxeReq, 1024, "rxe CMP_SWAP requests (AtomicETH)"),
        rc(Verb::FetchAdd, RxeReq, 1024, "rxe FETCH_ADD requests (AtomicETH)"),
        rc(Verb::FetchAdd, SvReq, 1024, "rxe ATOMIC ACKNOWLEDGE (AtomicAckETH)"),
        spec(CaseKind::SendInv, "RC SEND_INV", RxeReq, 1024,
            "rxe SEND with invalidate (IETH) and WRITEs through a type 2 memory window; softverbs' NAK remote access after it"),
        uc(Verb::Send, "rxe UC SEND ONLY/FIRST/MIDDLE/LAST"),
        uc(Verb::SendImm, "rxe UC SEND with immediate"),
        uc(Verb::Write, "rxe UC RDMA WRITE ONLY/FIRST/MIDDLE/LAST"),
        uc(Verb::WriteImm, "rxe UC RDMA WRITE with immediate"),
        spec(Ud(Verb::Send), "UD SEND", RxeReq, 1024, "rxe UD SEND ONLY (DETH), a wrong Q_Key included"),
        spec(Ud(Verb::SendImm), "UD SEND_IMM", RxeReq, 1024, "rxe UD SEND ONLY with immediate"),
        spec(Srq, "RC SEND into SRQ", RxeReq, 1024, "two rxe RC QPs sending into one softverbs SRQ"),
        spec(Error(ErrorCase::Rnr), "RC SEND RNR NAK", SvReq, 1024,
            "rxe RNR NAK (FIRST of a 2-packet SEND) and NAK PSN sequence error (its LAST), then ACK"),
        spec(Error(ErrorCase::WriteBadRkey), "RC WRITE bad rkey", SvReq, 1024, "rxe NAK remote access error for a WRITE"),
        spec(Error(ErrorCase::ReadOutOfBounds), "RC READ out of bounds", SvReq, 1024, "rxe NAK remote access error for a READ"),
    ]
}

/// File name of a spec's capture in conformance/.
fn file_name(case: &Case) -> String {
    let stem: String = case
        .scenario
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = match case.direction {
        SvReq => "sv2rxe",
        RxeReq => "rxe2sv",
    };
    format!("lab_{stem}_{dir}_mtu{}.pcap", case.mtu)
}

/// Runs the set against the lab that is up and writes the trimmed captures and their README
/// sections into `out` (a folder with a README.md). Nothing is written unless every case
/// passed.
pub fn record(env: &LabEnv, device: &str, capture_dir: &Path, out: &Path) -> Result<(), String> {
    let readme_path = out.join("README.md");
    let readme = std::fs::read_to_string(&readme_path)
        .map_err(|e| format!("{}: {e}", readme_path.display()))?;
    let mut recorded: Vec<(Spec, PathBuf)> = Vec::new();
    for (i, s) in specs().into_iter().enumerate() {
        let row = super::run_with_retry(env, capture_dir, i, &s.case, true);
        let verdict = match &row.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::PassOnRetry(first) => format!("pass on retry (first try: {first})"),
            Verdict::Fail(why) => format!("FAIL: {why}"),
        };
        super::print_row(&row, &verdict);
        match (&row.verdict, &row.capture_file) {
            (Verdict::Fail(why), _) => return Err(format!("{}: {why}", s.case.scenario)),
            (_, Some(file)) => recorded.push((s, file.clone())),
            (_, None) => return Err(format!("{}: no capture", s.case.scenario)),
        }
    }
    let cm = capture_cm_request(env, device, capture_dir)?;
    let mut generated = String::from(
        "## The lab's captures (kernel rxe 10.77.0.2 against softverbs 10.77.0.1)\n\n\
         Made by `softverbs rxe-lab capture` (docs/rxe-lab.md), which runs each scenario below \
         against a lab that is up, records the guest NIC with qemu's filter-dump (both \
         directions, whole Ethernet frames) and keeps the RoCE frames only, with at most \
         2 MIDDLE packets per message (the rest of a 1 MiB message left out), so that the \
         set stays small. The sender of each packet is in its IP source: 10.77.0.2 is kernel \
         rxe (guest kernel, rdma-core and perftest versions as in docs/rxe-lab.md), \
         10.77.0.1 is softverbs. The scenarios and their checks are those of `softverbs \
         rxe-lab run` (docs/rxe-lab.md, \"What run checks\"). To regenerate all of them and \
         this part of the README:\n\n\
         ```sh\n\
         cargo build --release -p softverbs-tools && B=target/release/softverbs\n\
         $B rxe-lab up && $B rxe-lab capture; $B rxe-lab down\n\
         ```\n\n\
         | file | scenario | requester | path MTU | what it shows |\n|---|---|---|---|---|\n",
    );
    let mut sections = String::new();
    let mut total = 0;
    for (s, file) in &recorded {
        let name = file_name(&s.case);
        let summary = trim::trim(file, &out.join(&name), MIDDLES_KEPT)?;
        total += summary.file_bytes;
        let requester = match s.case.direction {
            SvReq => "softverbs",
            RxeReq => "rxe",
        };
        generated.push_str(&format!(
            "| `{name}` | {} | {requester} | {} | {} |\n",
            s.case.scenario, s.case.mtu, s.shows
        ));
        let how = format!(
            "`softverbs rxe-lab run --full --only \"{}\" --mtu {}`, {} (the case's {} capture, trimmed)",
            s.case.scenario,
            s.case.mtu,
            s.case.direction.label(),
            match s.case.kind {
                CaseKind::Verb(..) => "RC/UC verb",
                CaseKind::Ud(_) => "UD",
                CaseKind::Error(_) => "error",
                _ => "scenario",
            }
        );
        sections.push_str(&trim::readme_section(&name, &how, &summary));
    }
    let name = "lab_cm_req_rping_mtu1024.pcap";
    let summary = trim::trim(&cm, &out.join(name), MIDDLES_KEPT)?;
    total += summary.file_bytes;
    generated.push_str(&format!(
        "| `{name}` | rping -c | rxe | 1024 | rxe's RDMA CM ConnectRequest (UD SEND to QP1) and softverbs' ConnectReject 8 (invalid service ID) |\n"
    ));
    sections.push_str(&trim::readme_section(
        name,
        &format!("guest: `timeout {RPING_S} rping -c -a 10.77.0.1 -C 1`, softverbs' lab device open (its CM answers) and no listener on the host"),
        &summary,
    ));
    generated.push('\n');
    generated.push_str(&sections);
    std::fs::write(&readme_path, trim::replace_generated(&readme, &generated))
        .map_err(|e| format!("{}: {e}", readme_path.display()))?;
    println!(
        "rxe-lab capture: {} captures, {total} bytes, in {}",
        recorded.len() + 1,
        out.display()
    );
    Ok(())
}

/// How long rping may try: the kernel's CM resends an unanswered REQ every few seconds.
const RPING_S: u64 = 12;

/// rping as client in the guest towards softverbs' address, with softverbs' lab device open
/// (its station answers ARP, its CM answers QP1) and nothing listening: the capture holds
/// the kernel CM's ConnectRequest and softverbs' REJ "invalid service ID" (8). (The copy
/// in conformance/ predates the CM service: REQs resent unanswered, then REJ "timeout".)
fn capture_cm_request(env: &LabEnv, device: &str, capture_dir: &Path) -> Result<PathBuf, String> {
    let _ctx = Context::open(device).map_err(|e| format!("opening {device}: {e}"))?;
    let file = capture_dir.join("cm-rping-req.pcap");
    let cap = qmp::Capture::start(&env.qmp, "lab", "capcm", &file)?;
    let status = env
        .ssh(&[])
        .arg(format!(
            "timeout {RPING_S} rping -c -a {} -C 1 -v; true",
            env.host_ip
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    std::thread::sleep(Duration::from_millis(200));
    let file = cap.stop()?;
    status.map_err(|e| format!("rping over ssh: {e}"))?;
    Ok(file)
}
