//! What a lab run found: one row per scenario x direction x MTU, with the checks of its
//! capture, printed as the markdown table of docs/rxe-lab.md.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Outcome of one row.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Every check passed.
    Pass,
    /// A check failed: why.
    Fail(String),
    /// The first attempt failed (why), a second one on fresh QPs and guest programs passed.
    /// Shown as such in the table and the summary, never as a plain pass.
    PassOnRetry(String),
}

/// One row of the results table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Scenario name (e.g. `RC WRITE`).
    pub scenario: String,
    /// Who requests.
    pub direction: String,
    /// Path MTU.
    pub mtu: u32,
    /// What was covered (sizes ...).
    pub covered: String,
    /// Outcome.
    pub verdict: Verdict,
    /// Wall time.
    pub elapsed: Duration,
    /// The capture's checks (decode --verify and tshark), when there was one.
    pub capture: String,
    /// The capture file, when one was recorded.
    pub capture_file: Option<std::path::PathBuf>,
}

/// Checks a capture: `softverbs decode --verify` (ICRC and byte-exact re-emission of every
/// RoCE packet); where python3 is installed, the ICRC once more by an independent script;
/// where tshark is installed, no malformed or error-level expert frame and at least one frame
/// tshark dissects as InfiniBand. `Ok` summarises, `Err` says what failed.
pub fn check_capture(file: &Path) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("decode")
        .arg("--verify")
        .arg(file)
        .output()
        .map_err(|e| format!("running softverbs decode: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().last().unwrap_or("").to_string();
    if !out.status.success() {
        return Err(format!("decode --verify failed: {summary}"));
    }
    let roce: usize = summary
        .split(", ")
        .find_map(|p| p.strip_suffix(" roce").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    if roce == 0 {
        return Err(format!("capture holds no RoCE packet: {summary}"));
    }
    let independent = match independent_icrc_check(file) {
        Ok(None) => "python3 ICRC: not installed".to_string(),
        Ok(Some(line)) => format!("python3 ICRC: {line}"),
        Err(e) => return Err(e),
    };
    let tshark = match tshark_errors(file) {
        Ok(None) => "tshark: not installed".to_string(),
        Ok(Some(n)) => format!("tshark: {n} IB frames, 0 malformed"),
        Err(e) => return Err(e),
    };
    Ok(format!(
        "{roce} RoCE pkts, ICRC ok; {independent}; {tshark}"
    ))
}

/// tools/rxe-lab/icrc_check.py: the ICRC recomputed with Python's zlib, sharing no code
/// with softverbs.
const ICRC_CHECK_PY: &str = include_str!("../../rxe-lab/icrc_check.py");

/// `Ok(None)` without python3; `Ok(Some(summary))` if every ICRC is right.
fn independent_icrc_check(file: &Path) -> Result<Option<String>, String> {
    use std::io::Write;
    let child = Command::new("python3")
        .args(["-", &file.to_string_lossy()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return Ok(None);
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ICRC_CHECK_PY.as_bytes())
            .map_err(|e| format!("python3 ICRC check: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("python3 ICRC check: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or("").to_string();
    if out.status.success() {
        Ok(Some(last))
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "python3 ICRC check failed: {} {}",
            text.lines().take(3).collect::<Vec<_>>().join("; "),
            err.lines().last().unwrap_or("")
        ))
    }
}

/// Wireshark's heuristics that guess an upper protocol (RPC-over-RDMA, SMB Direct, ...) from
/// a SEND's payload bytes. The lab's payloads are test patterns, which these heuristics
/// misread as malformed packets of their protocol (rxe's own 1-byte SENDs included), so they
/// are off: the check is about the RoCE headers.
const PAYLOAD_HEURISTICS: [&str; 10] = [
    "rpcrdma_infiniband",
    "smcr_infiniband",
    "smb_direct_infiniband",
    "nvme_rdma",
    "lnet_ib",
    "iser_infiniband",
    "eth_over_ib",
    "mellanox_eoib",
    "sdp_infiniband",
    "fc_infiniband",
];

/// Wireshark's expert severity "error" (PI_ERROR), as tshark prints `_ws.expert.severity`.
const EXPERT_ERROR: u64 = 0x0080_0000;

/// `Ok(None)` without tshark; `Ok(Some(ib_frames))` if clean; `Err` names bad frames.
/// One tshark pass over the file (each pass over a sweep's capture of 170 000 frames costs
/// about 20 s of a loaded core; this used to take two).
fn tshark_errors(file: &Path) -> Result<Option<usize>, String> {
    let mut c = Command::new("tshark");
    for h in PAYLOAD_HEURISTICS {
        c.args(["--disable-heuristic", h]);
    }
    let out = c
        .arg("-r")
        .arg(file)
        .args([
            "-Y",
            "infiniband || _ws.malformed || _ws.expert.severity >= \"error\"",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "frame.protocols",
            "-e",
            "_ws.expert.severity",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => return Err(format!("tshark failed: {}", o.status)),
        Err(_) => return Ok(None),
    };
    let verdict = tshark_verdict(&String::from_utf8_lossy(&out));
    match verdict {
        Err(bad) => Err(format!("tshark flags frames {}", bad.join(","))),
        Ok(0) => Err("tshark dissects no InfiniBand frame".into()),
        Ok(n) => Ok(Some(n)),
    }
}

/// Reads tshark's `frame.number TAB frame.protocols TAB severities` lines: the count of
/// InfiniBand frames, or the numbers of the frames that are malformed or carry an expert
/// item of severity error or worse.
fn tshark_verdict(fields: &str) -> Result<usize, Vec<String>> {
    let (mut ib, mut bad) = (0, Vec::new());
    for line in fields.lines() {
        let mut cols = line.split('\t');
        let number = cols.next().unwrap_or("").to_string();
        let protocols = cols.next().unwrap_or("");
        let severe = cols
            .next()
            .unwrap_or("")
            .split(',')
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .any(|v| v >= EXPERT_ERROR);
        if severe || protocols.split(':').any(|p| p == "_ws.malformed") {
            bad.push(number);
        } else if protocols.split(':').any(|p| p == "infiniband") {
            ib += 1;
        }
    }
    if bad.is_empty() {
        Ok(ib)
    } else {
        Err(bad)
    }
}

/// The markdown table of `rows`.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | direction | path MTU | covered | result | time | capture |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let verdict = match &r.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::Fail(why) => format!("**FAIL**: {}", why.replace('|', "/")),
            Verdict::PassOnRetry(why) => {
                format!("pass on retry (first try: {})", why.replace('|', "/"))
            }
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} s | {} |\n",
            r.scenario,
            r.direction,
            r.mtu,
            r.covered,
            verdict,
            r.elapsed.as_secs_f64(),
            r.capture.replace('|', "/")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::tshark_verdict;

    #[test]
    fn tshark_fields_are_judged() {
        let clean = "1\teth:ethertype:ip:udp:infiniband:data\t\n2\teth:ethertype:ip:udp:infiniband\t2097152\n";
        assert_eq!(tshark_verdict(clean), Ok(2));
        // A RoCE packet cut inside its BTH, as tshark 4.0 prints it.
        let cut = "1\teth:ethertype:ip:udp:infiniband\t8388608,8388608,8388608\n";
        assert_eq!(tshark_verdict(cut), Err(vec!["1".to_string()]));
        let malformed = "7\teth:ethertype:ip:udp:infiniband:_ws.malformed\t\n";
        assert_eq!(tshark_verdict(malformed), Err(vec!["7".to_string()]));
        assert_eq!(tshark_verdict(""), Ok(0));
    }
}
