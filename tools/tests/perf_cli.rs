//! `softverbs perf` as the built binary, a few iterations of every test in both one-process
//! links and between two processes: each must exit 0 with the completions counted and the
//! data verified. Speed is never asserted here (that is what the command is for).

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

/// The devices of this file's one-process runs: a 127.x range of its own, so that the tests
/// pass beside a softverbs program on the default devices (127.0.0.1 and 127.0.0.2).
const OWN_DEVICES: &str = "perf0=127.24.0.1,perf1=127.24.0.2";

fn perf(args: &[&str]) -> Output {
    Command::new(BIN)
        .env("SOFTVERBS_DEVICES", OWN_DEVICES)
        .arg("perf")
        .args(args)
        .output()
        .expect("run softverbs")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// The number after `"key":` in a JSON document (the first occurrence).
fn field(json: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\":");
    let start = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + pat.len();
    let rest = &json[start..];
    let end = rest.find([',', '}']).expect("value end");
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{key} in {json}"))
}

#[test]
fn every_test_completes_and_verifies_on_both_links() {
    for link in ["udp", "inproc"] {
        for (test, size) in [
            ("write_bw", 5000usize),
            ("read_bw", 5000),
            ("send_bw", 5000),
            ("atomic_bw", 8),
        ] {
            let size_arg = size.to_string();
            let o = perf(&[
                test,
                "--loopback",
                "--link",
                link,
                "-s",
                &size_arg,
                "-n",
                "40",
                "-q",
                "2",
                "-Q",
                "8",
                "--json",
            ]);
            let out = text(&o);
            assert!(o.status.success(), "{test} over {link}: {out}");
            assert_eq!(field(&out, "iterations"), 80.0, "{test} {link}: {out}");
            assert_eq!(field(&out, "bytes") as usize, size, "{out}");
            // Every verified byte: the target buffer (writes, sends, reads) or the counter.
            let expect = if test == "atomic_bw" {
                8.0 * 80.0
            } else {
                size as f64
            };
            assert_eq!(
                field(&out, "verified_bytes"),
                expect,
                "{test} {link}: {out}"
            );
            // One signaled WR in 8 per QP: 40 / 8 = 5 each (send_bw counts sends too).
            assert_eq!(field(&out, "completions"), 10.0, "{test} {link}: {out}");
        }
        for (test, verified) in [
            ("write_lat", 30.0),
            ("send_lat", 2.0 * 30.0 + 2.0),
            ("read_lat", 2.0),
            ("atomic_lat", 8.0 * 30.0 + 8.0),
        ] {
            let o = perf(&[test, "--loopback", "--link", link, "-n", "30", "--json"]);
            let out = text(&o);
            assert!(o.status.success(), "{test} over {link}: {out}");
            assert_eq!(field(&out, "iterations"), 30.0, "{out}");
            assert_eq!(
                field(&out, "verified_bytes"),
                verified,
                "{test} {link}: {out}"
            );
            assert!(
                field(&out, "t_min_us") <= field(&out, "t_typical_us"),
                "{out}"
            );
        }
    }
}

/// A softverbs program holding the default devices' UDP port (as a running demo or
/// pingpong does) does not make the one-process tests fail.
#[test]
fn loopback_runs_beside_a_process_on_the_default_devices() {
    // Held where free; where a real softverbs process holds them, that is the case itself.
    let _held: Vec<_> = ["127.0.0.1:4791", "127.0.0.2:4791"]
        .iter()
        .filter_map(|a| std::net::UdpSocket::bind(a).ok())
        .collect();
    // Devices of its own: the other one-process tests of this file run meanwhile on theirs.
    let o = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", "beside0=127.24.0.3,beside1=127.24.0.4")
        .args([
            "perf",
            "write_bw",
            "--loopback",
            "-s",
            "4096",
            "-n",
            "20",
            "--json",
        ])
        .output()
        .expect("run softverbs");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(field(&out, "iterations"), 20.0, "{out}");
}

#[test]
fn a_size_sweep_reports_every_size() {
    let o = perf(&[
        "write_bw",
        "--loopback",
        "--link",
        "inproc",
        "-a",
        "--max-size",
        "64",
        "-n",
        "10",
        "-Q",
        "5",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for size in [2, 4, 8, 16, 32, 64] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(&size.to_string())),
            "size {size} missing: {out}"
        );
    }
}

/// A TCP port for a side channel: one the OS just gave out and took back, so no user
/// process holds it.
fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string()
}

/// Runs `softverbs perf TEST` as a server (with `server_args`) and a client (with
/// `client_args`) in two processes on devices of their own (`devices`: `srv=IP,cli=IP`, so
/// that the loopback tests running meanwhile keep theirs); both outputs, client first.
fn run_pair(
    port: &str,
    devices: &str,
    test: &str,
    server_args: &[&str],
    client_args: &[&str],
) -> (Output, Output) {
    run_pair_faulty(port, devices, test, server_args, client_args, "")
}

/// [`run_pair`] with the client's device losing, duplicating or reordering what it sends
/// as `client_faults` (a `SOFTVERBS_FAULTS` spec) says.
fn run_pair_faulty(
    port: &str,
    devices: &str,
    test: &str,
    server_args: &[&str],
    client_args: &[&str],
    client_faults: &str,
) -> (Output, Output) {
    let server = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", devices)
        .args(["perf", test, "-d", "srv", "-p", port])
        .args(server_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("server");
    let client = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", devices)
        .env("SOFTVERBS_FAULTS", client_faults)
        .args(["perf", test, "127.0.0.1", "-d", "cli", "-p", port])
        .args(client_args)
        .output()
        .expect("client");
    (client, server.wait_with_output().expect("server output"))
}

/// [`run_pair`] with `args` plus `--json` on both sides, the client also with
/// `client_args`; both outputs as text after checking that both exited 0.
fn two_processes(
    port: &str,
    devices: &str,
    test: &str,
    args: &[&str],
    client_args: &[&str],
) -> (String, String) {
    let server_args = [args, &["--json"]].concat();
    let client_args = [args, &["--json"], client_args].concat();
    let (client, server) = run_pair(port, devices, test, &server_args, &client_args);
    let (c, s) = (text(&client), text(&server));
    assert!(client.status.success(), "client: {c}\nserver: {s}");
    assert!(server.status.success(), "server: {s}\nclient: {c}");
    (c, s)
}

#[test]
fn two_processes_over_the_side_channel() {
    let args = ["-n", "50", "-Q", "10"];
    let (c, s) = two_processes(
        &free_port(),
        "srv=127.24.10.41,cli=127.24.10.42",
        "send_bw",
        &args,
        &[],
    );
    assert_eq!(field(&c, "iterations"), 50.0, "{c}");
    // The server counted 50 receives and verified the last message's 65536 bytes.
    assert_eq!(field(&s, "handled"), 50.0, "{s}");
    assert_eq!(field(&s, "verified_bytes"), 65536.0, "{s}");
}

/// WRITE ping-pong past 256 round trips (the one-byte tags wrap through 0, as perftest's)
/// between two processes: the server writes first and counts to its own -n.
#[test]
fn write_lat_between_two_processes_counts_every_round_trip() {
    let (c, s) = two_processes(
        &free_port(),
        "srv=127.24.10.45,cli=127.24.10.46",
        "write_lat",
        &["-n", "300", "-s", "64"],
        &[],
    );
    assert_eq!(field(&c, "iterations"), 300.0, "{c}");
    assert_eq!(field(&s, "handled"), 300.0, "{s}");
}

/// A WRITE ping-pong sweep whose client loses a third of what it sends: a lost last WRITE
/// of a size goes again on the retransmission timer, so the client must wait for it to
/// complete before it prepares its buffer for the next size. One that did not sent the
/// server that WRITE without its tag (found against ib_write_lat in the rxe lab), and the
/// server waited in vain.
#[test]
fn a_lossy_write_lat_sweep_finishes_every_size_before_the_next() {
    let args = ["-a", "--max-size", "4096", "-n", "5", "--json"];
    let (client, server) = run_pair_faulty(
        &free_port(),
        "srv=127.24.10.55,cli=127.24.10.56",
        "write_lat",
        &args,
        &args,
        "loss=330,seed=7",
    );
    let (c, s) = (text(&client), text(&server));
    assert!(client.status.success(), "client: {c}\nserver: {s}");
    assert!(server.status.success(), "server: {s}\nclient: {c}");
    // Every size of both sides: 2 B to 4 KiB, 5 round trips each.
    let want: Vec<f64> = (1..=12).map(|k| f64::from(1u32 << k)).collect();
    assert_eq!(every(&c, "bytes"), want, "{c}");
    assert_eq!(every(&s, "bytes"), want, "{s}");
    assert_eq!(every(&c, "iterations"), [5.0; 12], "{c}");
    assert_eq!(every(&s, "handled"), [5.0; 12], "{s}");
}

/// The number after every `"key":` in a JSON document, in order.
fn every(json: &str, key: &str) -> Vec<f64> {
    let pat = format!("\"{key}\":");
    json.match_indices(&pat)
        .map(|(at, _)| field(&json[at..], key))
        .collect()
}

/// Tests without a report after them (send_bw, as perftest's) leave the count to each
/// side's -n: a server expecting more than the client sends says so, instead of passing,
/// even with `--no-verify` (which skips data checks, not counts).
#[test]
fn a_send_bw_server_counts_to_its_own_iterations() {
    let (client, server) = run_pair(
        &free_port(),
        "srv=127.24.10.47,cli=127.24.10.48",
        "send_bw",
        &["-n", "50", "--no-verify"],
        &["-n", "30"],
    );
    let s = text(&server);
    assert_eq!(server.status.code(), Some(1), "server: {s}");
    assert!(
        s.contains("receives completed: 30, expected 50"),
        "server: {s}\nclient: {}",
        text(&client)
    );
}

/// `--no-verify` (for a peer that is real perftest, whose buffer holds its own bytes) skips
/// a READ client's data check, and only that: the completions are still counted.
#[test]
fn a_read_client_checks_the_data_unless_told_not_to() {
    let devices = "srv=127.24.10.43,cli=127.24.10.44";
    let args = ["-n", "20", "-s", "8192"];
    for (port, extra, verified) in [
        (&free_port(), &[][..], 8192.0),
        (&free_port(), &["--no-verify"][..], 0.0),
    ] {
        let (c, _) = two_processes(port, devices, "read_bw", &args, extra);
        assert_eq!(field(&c, "iterations"), 20.0, "{extra:?}: {c}");
        assert_eq!(field(&c, "verified_bytes"), verified, "{extra:?}: {c}");
    }
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    for args in [
        &["write_bw", "--loopback", "-q", "0"][..],
        &["write_bw", "--loopback", "-s", "10", "-a"],
        &["atomic_bw", "--loopback", "-s", "16"],
        &["write_bw", "--loopback", "-m", "1000"],
        &["write_bw", "--loopback", "-D", "-1"],
        &["write_bw", "--loopback", "-l", "500"],
        &["write_lat", "--loopback", "-q", "2"],
        &["write_bw", "--link", "inproc"],
        &["udp-baseline", "127.0.0.1"],
        &["write_bw", "no.such.host.invalid"],
        &["write_bw", "--loopback", "--no-verify"],
        &["write_bw", "--loopback", "--rounds", "3"],
        &["write_bw", "--loopback", "--baseline", "--rounds", "0"],
        &["write_bw", "--loopback", "--contend", "65"],
        &["send_lat", "--pairs", "4"],
        &["send_bw", "--loopback", "--pairs", "4"],
        &["send_lat", "--loopback", "--pairs", "4", "-a"],
        &["send_lat", "--loopback", "--pairs", "65"],
    ] {
        let o = perf(args);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}");
        assert!(!out.contains("panicked"), "{args:?}: {out}");
    }
}

#[test]
fn udp_baseline_measures_every_method_and_the_ping_pong() {
    let o = perf(&["udp-baseline", "-s", "1024", "--json"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(field(&out, "datagram_bytes"), 1024.0 + 16.0, "{out}");
    assert!(out.contains("sendmmsg"), "{out}");
    // Without a test the baseline sends a WRITE's datagrams: one of 1024 + BTH (12) + RETH (16) + ICRC (4).
    assert!(
        out.contains("\"verb\":\"WRITE\",\"verb_datagrams\":[1056]"),
        "{out}"
    );
    assert!(out.contains("WRITE datagrams, GSO + GRO"), "{out}");
    assert!(field(&out, "bw_mbs") > 0.0, "{out}");
    assert!(field(&out, "uniform_mbs") > 0.0, "{out}");
    assert!(field(&out, "half_rtt_us") > 0.0, "{out}");
}

/// A one-process run of `args` over the in-process link with the baseline measured; checks
/// that it succeeded and that its ratio is its bandwidth over the baseline's, and returns
/// its JSON.
fn with_baseline(args: &[&str]) -> String {
    let mut all = vec!["--loopback", "--link", "inproc"];
    all.extend(args);
    all.extend(["--baseline", "--json"]);
    let o = perf(&all);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let ratio = field(&out, "ratio_to_udp");
    let (bw, base) = (field(&out, "bw_avg_mbs"), field(&out, "bw_mbs"));
    assert!(base > 0.0, "{out}");
    assert!((ratio - bw / base).abs() <= 1e-9 * ratio.max(1.0), "{out}");
    out
}

#[test]
fn baseline_ratios_come_with_the_results() {
    let out = with_baseline(&["write_bw", "-s", "4096", "-n", "20"]);
    assert_eq!(field(&out, "datagram_bytes"), 4096.0 + 16.0, "{out}");
    assert!(out.contains("\"verb_datagrams\":[4128]"), "{out}");
}

#[test]
fn a_read_bw_baseline_sends_read_responses() {
    let out = with_baseline(&["read_bw", "-s", "2048", "-m", "1024", "-n", "20"]);
    // READ RESPONSE FIRST and LAST, each with an AETH.
    assert!(
        out.contains("\"verb\":\"READ\",\"verb_datagrams\":[1044,1044]"),
        "{out}"
    );
}

/// The numbers of the array after `"key":` (the first occurrence), `[[a,b],[c]]` flattened.
fn numbers(json: &str, key: &str) -> Vec<f64> {
    let pat = format!("\"{key}\":");
    let start = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + pat.len();
    let (mut depth, mut end) = (0, start);
    for (i, c) in json[start..].char_indices() {
        depth += match c {
            '[' => 1,
            ']' => -1,
            _ => 0,
        };
        if depth == 0 {
            end = start + i;
            break;
        }
    }
    json[start..end]
        .split(['[', ']', ','])
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap_or_else(|_| panic!("{key} in {json}")))
        .collect()
}

#[test]
fn rounds_report_the_median_round_with_every_ratio() {
    let out = with_baseline(&["write_bw", "-s", "4096", "-n", "20", "--rounds", "3"]);
    let mut ratios = numbers(&out, "round_ratios");
    assert_eq!(ratios.len(), 3, "{out}");
    assert!(ratios.iter().all(|&r| r > 0.0), "{out}");
    ratios.sort_by(f64::total_cmp);
    // The row shown is the median round's, baseline included (checked by with_baseline).
    assert_eq!(field(&out, "ratio_to_udp"), ratios[1], "{out}");
}

#[test]
fn a_latency_baseline_times_an_empty_poll_beside_raw_udps_empty_receive() {
    let args = [
        "send_lat",
        "--loopback",
        "--link",
        "inproc",
        "-s",
        "8",
        "-n",
        "50",
    ];
    let o = perf(&[&args[..], &["--baseline", "--json"]].concat());
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    // Both are costs of real calls: more than nothing, less than a millisecond.
    for key in ["empty_poll_ns", "empty_receive_ns"] {
        let ns = field(&out, key);
        assert!(ns > 0.0 && ns < 1e6, "{key} {ns}: {out}");
    }
    // The text says both; without --baseline neither is measured.
    let o = perf(&[&args[..], &["--baseline"]].concat());
    assert!(
        text(&o).contains("an empty poll of the CQ after the test:"),
        "{}",
        text(&o)
    );
    let o = perf(&[&args[..], &["--json"]].concat());
    assert!(text(&o).contains("\"empty_poll_ns\":null"), "{}", text(&o));
}

/// The processes whose command line is `softverbs contender <parent>`.
fn contenders_of(parent: u32) -> usize {
    let wanted = format!("contender\0{parent}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmd| String::from_utf8_lossy(cmd).contains(&wanted))
        .count()
}

#[test]
fn contend_runs_its_competitors_for_the_command_and_stops_them_after() {
    let mut child = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", OWN_DEVICES)
        .args(["perf", "send_lat", "--loopback", "-s", "8", "-n", "400"])
        .args(["--json", "--contend", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run softverbs");
    // While it runs, its two competitors run (looked for until the command ends).
    let mut seen = 0;
    for _ in 0..200 {
        seen = seen.max(contenders_of(child.id()));
        if seen == 2 || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{json}");
    assert_eq!(seen, 2, "two competitors while the command ran");
    assert_eq!(field(&json, "contenders"), 2.0);
    assert!(field(&json, "load_start") >= 0.0 && field(&json, "load_end") >= 0.0);
    assert_eq!(contenders_of(pid), 0, "none left after the command");
}

#[test]
fn pairs_run_alone_then_together_and_every_pair_counts_its_round_trips() {
    // In-process link: no sockets, so nothing clashes with a benchmark run beside the tests.
    let o = perf(&[
        "send_lat",
        "--loopback",
        "--link",
        "inproc",
        "-s",
        "8",
        "-n",
        "150",
        "--pairs",
        "3",
        "--json",
    ]);
    let json = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(field(&json, "pairs"), 3.0);
    // The lone pair, then three together: 150 round trips and 8 x 151 bytes checked each.
    assert_eq!(every(&json, "iterations"), [150.0; 4]);
    assert_eq!(every(&json, "verified_bytes"), [1208.0; 4]);
    assert!(field(&json, "together_round_trips_per_s") > 0.0);
    let worst = field(&json, "worst_median_over_alone");
    assert!(worst.is_finite() && worst > 0.0, "{json}");
}

/// `--shared`: the same test between two processes on one shared device and on two
/// devices, in one command, with both figures and their ratio; misuse is refused.
#[test]
fn shared_compares_one_device_with_two_in_one_command() {
    let o = perf(&["send_lat", "--shared", "-s", "8", "-n", "50", "--json"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let (two, one) = (field(&out, "two_devices"), field(&out, "one_shared_device"));
    assert!(two > 0.0 && one > 0.0, "{out}");
    let ratio = field(&out, "ratio");
    assert!((ratio - one / two).abs() < 1e-6 * ratio.max(1.0), "{out}");
    let o = perf(&["write_bw", "--shared", "--loopback"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--shared runs its own two processes"),
        "{}",
        text(&o)
    );
}

/// perftest's defaults: latency tests run at a tx depth of 1, so every message is signaled
/// (CQ moderation is lowered to the depth) and waited for; bandwidth tests at 128 and 100.
#[test]
fn latency_tests_take_perftests_depth_and_moderation_unless_given() {
    let settings = |args: &[&str]| {
        let mut all = vec!["--loopback", "--link", "inproc", "-n", "20", "--json"];
        all.extend_from_slice(args);
        let o = perf(&all);
        let out = text(&o);
        assert!(o.status.success(), "{args:?}: {out}");
        (field(&out, "tx_depth"), field(&out, "cq_mod"), out)
    };
    for test in ["send_lat", "write_lat"] {
        let (depth, cq_mod, out) = settings(&[test]);
        assert_eq!((depth, cq_mod), (1.0, 1.0), "{out}");
        assert_eq!(field(&out, "iterations"), 20.0, "{out}");
    }
    let (depth, cq_mod, _) = settings(&["write_bw"]);
    assert_eq!((depth, cq_mod), (128.0, 100.0));
    // A moderation above the depth is lowered to it, as perftest does.
    let (depth, cq_mod, out) = settings(&["send_lat", "-t", "8"]);
    assert_eq!((depth, cq_mod), (8.0, 8.0), "{out}");
    let (depth, cq_mod, out) = settings(&["send_lat", "-t", "128", "-Q", "16"]);
    assert_eq!((depth, cq_mod), (128.0, 16.0), "{out}");
    assert_eq!(field(&out, "iterations"), 20.0, "{out}");
}
