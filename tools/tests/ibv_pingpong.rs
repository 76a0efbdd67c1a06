//! `softverbs pingpong --ibv` (rdma-core ibv_rc_pingpong's side channel and echo order)
//! between two processes on loopback: the checking mode against `--echo`, which behaves as
//! ibv_rc_pingpong itself, in both roles; and the check failing when the peer does not echo.
//! Against real rdma-core it runs in the rxe lab (`softverbs rxe-lab run`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const LIMIT: Duration = Duration::from_secs(60);

/// Waits for `child` up to the limit; kills it if it overruns. (success, stdout + stderr)
fn wait(mut child: Child, who: &str) -> (bool, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut out = String::new();
            if let Some(mut s) = child.stdout.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut out);
            }
            if let Some(mut s) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut out);
            }
            return (status.success(), out);
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{who} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a server and a client; `*_echo` selects ibv_rc_pingpong behaviour for that side.
/// Returns (server ok, server output, client ok, client output).
fn run_pair(
    octet: u8,
    size: usize,
    server_echo: bool,
    client_echo: bool,
    timeout_secs: u64,
) -> (bool, String, bool, String) {
    run_kind_pair("rc", octet, size, server_echo, client_echo, timeout_secs)
}

/// As [`run_pair`], with the ping-pong program `kind` (rc, uc, ud, srq with 4 QPs).
fn run_kind_pair(
    kind: &str,
    octet: u8,
    size: usize,
    server_echo: bool,
    client_echo: bool,
    timeout_secs: u64,
) -> (bool, String, bool, String) {
    let spawn = |device: &str, ip: String, role: &[&str], echo: bool| {
        let mut c = Command::new(BIN);
        c.env("SOFTVERBS_DEVICES", format!("{device}={ip}"))
            .args([
                "pingpong", "--ibv", "--kind", kind, "--num-qp", "4", "-d", device,
            ])
            .args(role)
            .args(["-s", &size.to_string(), "-n", "12", "-m", "1024"])
            .args(["--timeout-secs", &timeout_secs.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if echo {
            c.arg("--echo");
        }
        c.spawn().expect("spawn")
    };
    let mut server = spawn(
        "srv",
        format!("127.21.{octet}.1"),
        &["--listen", "127.0.0.1:0"],
        server_echo,
    );
    let mut first = String::new();
    let mut stdout = BufReader::new(server.stdout.take().expect("server stdout"));
    stdout.read_line(&mut first).expect("server's first line");
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected server output {first:?}"))
        .to_string();
    let client = spawn(
        "cli",
        format!("127.21.{octet}.2"),
        &["--connect", &addr],
        client_echo,
    );
    server.stdout = Some(stdout.into_inner());
    let (client_ok, client_out) = wait(client, "client");
    let (server_ok, server_out) = wait(server, "server");
    (server_ok, server_out, client_ok, client_out)
}

#[test]
fn checking_server_against_an_echoing_client() {
    let (sok, sout, cok, cout) = run_pair(1, 3000, false, true, 20);
    assert!(sok && cok, "server:\n{sout}\nclient:\n{cout}");
    assert!(
        sout.contains("12 messages of 3000 bytes each way, every echo verified"),
        "{sout}"
    );
    assert!(cout.contains("echoed"), "{cout}");
}

#[test]
fn checking_client_against_an_echoing_server() {
    let (sok, sout, cok, cout) = run_pair(2, 1025, true, false, 20);
    assert!(sok && cok, "server:\n{sout}\nclient:\n{cout}");
    assert!(
        cout.contains("12 messages of 1025 bytes each way, every echo verified"),
        "{cout}"
    );
}

#[test]
fn a_peer_that_does_not_echo_fails_the_check() {
    // Both sides check; the server's first received message is the client's own data, not
    // the 0x7b fill an ibv_rc_pingpong client starts with.
    let (sok, sout, _cok, _cout) = run_pair(3, 64, false, false, 3);
    assert!(!sok, "server passed without an echoing peer:\n{sout}");
    assert!(
        sout.contains("message 0: data differs from the expected echo at byte Some(0)"),
        "{sout}"
    );
}

#[test]
fn uc_ud_and_srq_side_channels_check_their_echoes_in_both_roles() {
    for (i, kind) in ["uc", "ud", "srq"].into_iter().enumerate() {
        for client_checks in [true, false] {
            let octet = 10 + 2 * i as u8 + u8::from(client_checks);
            let (sok, sout, cok, cout) =
                run_kind_pair(kind, octet, 700, client_checks, !client_checks, 20);
            assert!(sok && cok, "{kind}: server:\n{sout}\nclient:\n{cout}");
            let checker = if client_checks { &cout } else { &sout };
            assert!(
                checker.contains(&format!("ibv_{kind}_pingpong side channel"))
                    && checker.contains("12 messages of 700 bytes each way, every echo verified"),
                "{kind}: {checker}"
            );
        }
    }
}

#[test]
fn a_ud_message_over_the_port_mtu_is_refused() {
    let (sok, sout, _, _) = run_kind_pair("ud", 20, 4097, false, true, 3);
    assert!(!sok, "{sout}");
    assert!(sout.contains("larger than the port MTU (4096)"), "{sout}");
}
