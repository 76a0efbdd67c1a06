//! Two OS processes, one emulated device each, doing RC SEND/RECV over UDP on loopback:
//! `softverbs pingpong` as server and client, like ibv_rc_pingpong.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const LIMIT: Duration = Duration::from_secs(60);

/// Waits for `child` up to the limit; kills it if it overruns.
fn wait(mut child: Child, who: &str) -> (bool, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut out = String::new();
            if let Some(mut s) = child.stdout.take() {
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

fn pingpong_between_processes(size: usize, iters: u32, mtu: u32, octet: u8) {
    let server_ip = format!("127.20.{octet}.1");
    let client_ip = format!("127.20.{octet}.2");
    let mut server = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", format!("srv={server_ip}"))
        .args(["pingpong", "-d", "srv", "--listen", "127.0.0.1:0"])
        .args([
            "-s",
            &size.to_string(),
            "-n",
            &iters.to_string(),
            "-m",
            &mtu.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    // The server prints the side-channel address it listens on first.
    let mut first = String::new();
    let mut stdout = BufReader::new(server.stdout.take().expect("server stdout"));
    stdout.read_line(&mut first).expect("server's first line");
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected server output {first:?}"))
        .to_string();
    let client = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", format!("cli={client_ip}"))
        .args(["pingpong", "-d", "cli", "--connect", &addr])
        .args([
            "-s",
            &size.to_string(),
            "-n",
            &iters.to_string(),
            "-m",
            &mtu.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn client");
    server.stdout = Some(stdout.into_inner());
    let (client_ok, client_out) = wait(client, "client");
    let (server_ok, server_out) = wait(server, "server");
    assert!(client_ok, "client failed:\n{client_out}");
    assert!(server_ok, "server failed:\n{server_out}");
    let verified = format!("{iters} round trips of {size} bytes, every byte verified");
    assert!(client_out.contains(&verified), "client said:\n{client_out}");
    assert!(server_out.contains(&verified), "server said:\n{server_out}");
    // Each side saw the other's real device address as the peer GID.
    assert!(
        client_out.contains(&format!("::ffff:{server_ip}")),
        "{client_out}"
    );
    assert!(
        server_out.contains(&format!("::ffff:{client_ip}")),
        "{server_out}"
    );
}

#[test]
fn rc_pingpong_small_messages() {
    pingpong_between_processes(64, 50, 1024, 1);
}

#[test]
fn rc_pingpong_multi_packet_messages() {
    pingpong_between_processes(100_000, 10, 4096, 2);
}

#[test]
fn pingpong_rejects_a_missing_device() {
    let out = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", "only=127.20.3.1")
        .args(["pingpong", "-d", "nosuch", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no device named \"nosuch\""), "{err}");
}
