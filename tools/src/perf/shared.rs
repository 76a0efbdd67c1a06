//! `--shared`: the test between two processes on ONE device, whose port they share (see
//! docs/shared-devices.md), against two processes on two devices each bound alone
//! (`SOFTVERBS_SHARE_PORT=0`, the path before sharing), in alternating rounds of one
//! command. Each round runs this binary twice per placement (server and client, perftest's
//! side channel on a free TCP port); the client's JSON figures are collected, and the
//! median of each placement is printed with their ratio. The devices are `perf-shared0`
//! on 127.30.250.1 and `perf-shared1` on 127.30.250.2, out of the way of the defaults.

use std::net::TcpListener;
use std::process::{Command, Stdio};

use super::args::PerfArgs;
use crate::json::{json_num, json_str};

const DEVICES: &str = "perf-shared0=127.30.250.1,perf-shared1=127.30.250.2";
const SHARE_PORT_ENV: &str = "SOFTVERBS_SHARE_PORT";

/// Where the two processes' devices are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Each on its own device, bound alone.
    TwoDevices,
    /// Both on one device, sharing its port.
    OneDevice,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::TwoDevices => "two devices",
            Placement::OneDevice => "one shared device",
        }
    }
}

/// Runs the comparison; `Err` names what went wrong (a run that failed, unparsable output).
pub fn run(args: &PerfArgs) -> Result<(), String> {
    if args.loopback || args.server.is_some() || args.test.verb().is_none() || args.pairs > 1 {
        return Err(
            "--shared runs its own two processes: no server host, --loopback, --pairs or \
             udp-baseline"
                .into(),
        );
    }
    let latency = args.test.is_latency();
    let rounds = args.rounds.max(1);
    let mut figures: Vec<(f64, f64)> = Vec::new();
    for _ in 0..rounds {
        let two = one_run(args, Placement::TwoDevices)?;
        let one = one_run(args, Placement::OneDevice)?;
        figures.push((two, one));
    }
    let ratios: Vec<f64> = figures.iter().map(|&(two, one)| one / two).collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let two = median(figures.iter().map(|f| f.0).collect());
    let one = median(figures.iter().map(|f| f.1).collect());
    let ratio = median(ratios.clone());
    let (what, unit) = if latency {
        ("typical half round trip", "us")
    } else {
        ("average bandwidth", "MB/s")
    };
    if args.json {
        let list: Vec<String> = ratios.iter().map(|&r| json_num(r)).collect();
        println!(
            "{{\"test\":{},\"shared\":true,\"figure\":{},\"unit\":{},\"two_devices\":{},\
             \"one_shared_device\":{},\"ratio\":{},\"round_ratios\":[{}]}}",
            json_str(args.test.name()),
            json_str(what),
            json_str(unit),
            json_num(two),
            json_num(one),
            json_num(ratio),
            list.join(",")
        );
    } else {
        println!(
            "{} between two processes, {what} ({unit}), median of {rounds} round(s):",
            args.test.name()
        );
        println!("  {:<20} {two:>12.2}", Placement::TwoDevices.name());
        println!("  {:<20} {one:>12.2}", Placement::OneDevice.name());
        let per_round: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "  one / two: {ratio:.3} (rounds: {}; {})",
            per_round.join(" "),
            if latency {
                "above 1 is slower"
            } else {
                "below 1 is slower"
            }
        );
    }
    Ok(())
}

/// The options passed on to both sides.
fn passed_on(args: &PerfArgs) -> Vec<String> {
    let mut v = vec![
        args.test.name().to_string(),
        "--json".into(),
        "-m".into(),
        args.mtu.to_string(),
        "-q".into(),
        args.qps.to_string(),
        "-l".into(),
        args.post_list.to_string(),
        "-I".into(),
        args.inline_size.to_string(),
    ];
    if let Some(depth) = args.tx_depth {
        v.extend(["-t".into(), depth.to_string()]);
    }
    if let Some(cq_mod) = args.cq_mod {
        v.extend(["-Q".into(), cq_mod.to_string()]);
    }
    if let Some(size) = args.size {
        v.extend(["-s".into(), size.to_string()]);
    }
    if let Some(iters) = args.iters {
        v.extend(["-n".into(), iters.to_string()]);
    }
    if let Some(secs) = args.duration {
        v.extend(["-D".into(), secs.to_string()]);
    }
    v
}

/// One server and one client run in `placement`; the client's figure.
fn one_run(args: &PerfArgs, placement: Placement) -> Result<f64, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("finding a free TCP port: {e}"))?
        .port()
        .to_string();
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let (share, client_device) = match placement {
        Placement::TwoDevices => ("0", "perf-shared1"),
        Placement::OneDevice => ("1", "perf-shared0"),
    };
    let side = |extra: &[&str]| {
        let mut c = Command::new(&exe);
        c.env("SOFTVERBS_DEVICES", DEVICES)
            .env(SHARE_PORT_ENV, share)
            .arg("perf")
            .args(passed_on(args))
            .args(["-p", &port])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = side(&["-d", "perf-shared0"])
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let client = side(&["127.0.0.1", "-d", client_device])
        .output()
        .map_err(|e| format!("running the client: {e}"))?;
    let server = server
        .wait_with_output()
        .map_err(|e| format!("waiting for the server: {e}"))?;
    let text = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    };
    if !client.status.success() || !server.status.success() {
        return Err(format!(
            "{}: a run failed\nclient: {}\nserver: {}",
            placement.name(),
            text(&client),
            text(&server)
        ));
    }
    let key = if args.test.is_latency() {
        "t_typical_us"
    } else {
        "bw_avg_mbs"
    };
    let out = String::from_utf8_lossy(&client.stdout);
    number_after(&out, key).ok_or_else(|| {
        format!(
            "{}: no {key} in the client's output {out}",
            placement.name()
        )
    })
}

/// The number after `"key":` in a JSON text.
fn number_after(json: &str, key: &str) -> Option<f64> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &json[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::number_after;

    #[test]
    fn numbers_are_found_after_their_key() {
        let j = r#"{"results":[{"bytes":8,"t_typical_us":4.25,"x":1e3}]}"#;
        assert_eq!(number_after(j, "t_typical_us"), Some(4.25));
        assert_eq!(number_after(j, "x"), Some(1000.0));
        assert_eq!(number_after(j, "nope"), None);
    }
}
