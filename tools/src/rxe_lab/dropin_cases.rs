//! An unmodified Debian `ibv_rc_pingpong` on the host, on softverbs through the drop-in
//! libibverbs.so.1 (`softverbs run --`, crate softverbs-ibverbs), against the same program on
//! the guest's kernel rxe, in both roles. Both programs check every received buffer (`-c`)
//! and must exit 0 with their report; the side channel crosses ssh port forwards as in
//! pingpong_cases.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::lab_env::{free_local_port, LabEnv};
use super::scenario::Direction;
use super::watchdog::Watchdog;
use crate::ibv_oob::IBV_PINGPONG_PORT;

/// Message size: four packets at path MTU 1024, one at 4096 would be too easy.
pub const SIZE: usize = 4096;
/// Round trips.
const ITERS: u64 = 20;
/// Longest wait for either program.
const WAIT: Duration = Duration::from_secs(90);
/// The guest program is killed after this long whatever happens.
const GUEST_LIFETIME_S: u64 = 120;

/// `ibv_rc_pingpong` through the drop-in on `device` against rxe0; softverbs is the client
/// (sends first) for `SoftverbsToRxe`.
pub fn run(env: &LabEnv, device: &str, dir: Direction, mtu: u32) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let common = format!("-e -c -m {mtu} -s {SIZE} -n {ITERS}");
    let guest_cmd = format!(
        "exec timeout {GUEST_LIFETIME_S} ibv_rc_pingpong -d rxe0 -g 1 {common} -p {IBV_PINGPONG_PORT}"
    );
    let port = free_local_port()?;
    let mut host = Command::new(exe);
    host.env(softverbs_emu::engine::DEVICES_ENV, env.device_spec(device))
        .args(["run", "--", "ibv_rc_pingpong", "-d", device, "-g", "1"])
        .args(common.split(' '))
        .args(["-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut guest_lines = None;
    let (mut host, mut guest) = match dir {
        // rxe serves; our client connects through a -L forward once the guest listens.
        Direction::SoftverbsToRxe => {
            let (guest, all) = env.start_tcp_server(
                &guest_cmd,
                IBV_PINGPONG_PORT,
                port,
                "ibv_rc_pingpong in the guest",
            )?;
            guest_lines = Some(all);
            let host = host
                .arg("127.0.0.1")
                .spawn()
                .map_err(|e| format!("softverbs run: {e}"))?;
            (host, guest)
        }
        // We serve; the guest connects through a -R forward once our program listens.
        Direction::RxeToSoftverbs => {
            let mut host = host.spawn().map_err(|e| format!("softverbs run: {e}"))?;
            if let Err(e) = wait_listening(port) {
                let _ = host.kill();
                let _ = host.wait();
                return Err(e);
            }
            let forward = format!("{IBV_PINGPONG_PORT}:127.0.0.1:{port}");
            let guest =
                env.spawn_guest(&["-R".into(), forward], &format!("{guest_cmd} 127.0.0.1"))?;
            (host, guest)
        }
    };
    let mut watchdog = Watchdog::new(env);
    let host_status = watchdog.wait_exit(&mut host, WAIT, "ibv_rc_pingpong on the drop-in");
    if host_status.is_err() {
        let _ = guest.kill();
    }
    let guest_status = watchdog.wait_exit(&mut guest, WAIT, "ibv_rc_pingpong on rxe");
    let host_text = output(host)?;
    let guest_text = output(guest)?
        + &guest_lines
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
    if !host_status?.success() || !guest_status?.success() {
        return Err(format!(
            "drop-in side: {} / rxe side: {}",
            last_lines(&host_text),
            last_lines(&guest_text)
        ));
    }
    let report = |text: &str| {
        text.lines()
            .find(|l| l.contains(" iters in "))
            .map(str::trim)
            .map(String::from)
    };
    match (report(&host_text), report(&guest_text)) {
        (Some(h), Some(g))
            if h.starts_with(&ITERS.to_string()) && g.starts_with(&ITERS.to_string()) =>
        {
            Ok(format!(
                "{ITERS} x {SIZE} B each way, buffers checked by both (-c); drop-in: {h}; rxe: {g}"
            ))
        }
        _ => Err(format!(
            "no \"{ITERS} iters\" report: drop-in: {} / rxe: {}",
            last_lines(&host_text),
            last_lines(&guest_text)
        )),
    }
}

/// A finished program's stdout and stderr (what its pipes still hold).
pub(super) fn output(child: Child) -> Result<String, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

/// The last lines of a program's output, for an error message.
pub(super) fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

/// Waits until something on this host listens on TCP `port` (read from /proc/net/tcp and
/// tcp6, without connecting: ibv_rc_pingpong's server accepts one connection only).
fn wait_listening(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let needle = format!(":{port:04X} ");
    while Instant::now() < deadline {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f).is_ok_and(|t| {
                t.lines().any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
                })
            })
        });
        if listening {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "ibv_rc_pingpong on the drop-in did not listen on port {port}"
    ))
}
