//! Two host processes sharing the lab device (issue 29, docs/shared-devices.md, "How the lab
//! device is shared"): this process starts two `softverbs pingpong --ibv` processes on the
//! lab device at the same time, each against its own `ibv_rc_pingpong` on rxe0 in the guest
//! (on its own side-channel port, through its own ssh `-L` forward). Both must exit 0 with
//! every echo verified byte for byte, their QPNs must sit in two different slots of the
//! shared device, and their runs must overlap in time.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::dropin_cases::{last_lines, output};
use super::lab_env::{free_local_port, LabEnv};
use super::watchdog::Watchdog;
use crate::ibv_oob::IBV_PINGPONG_PORT;

/// Round trips of each pair.
const ITERS: u64 = 20;
/// Longest wait for either program of a pair.
const WAIT: Duration = Duration::from_secs(90);
/// The guest programs are killed after this long whatever happens.
const GUEST_LIFETIME_S: u64 = 120;

/// One pair: the guest's server (behind ssh) and our client process.
struct Pair {
    guest: Child,
    guest_text: std::thread::JoinHandle<String>,
    host: Child,
    started: Instant,
}

/// Message size at path MTU `mtu`: one byte over it, so every message is two packets.
pub fn size(mtu: u32) -> usize {
    mtu as usize + 1
}

/// Runs the two pairs at path MTU `mtu` on `device`; `Ok` says what was covered.
pub fn run(env: &LabEnv, device: &str, mtu: u32) -> Result<String, String> {
    let size = size(mtu);
    let mut pairs = Vec::new();
    // Both servers listen before either client starts, so that the clients run together.
    let mut guests = Vec::new();
    for i in 1..=2u16 {
        guests.push(start_guest(env, IBV_PINGPONG_PORT + i, mtu, size)?);
    }
    for (local_port, guest, guest_text) in guests {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let host = Command::new(exe)
            .env(softverbs_emu::engine::DEVICES_ENV, env.device_spec(device))
            .args(["pingpong", "--ibv", "-d", device])
            .args(["--connect", &format!("127.0.0.1:{local_port}")])
            .args(["-s", &size.to_string(), "-n", &ITERS.to_string()])
            .args(["-m", &mtu.to_string(), "--timeout-secs", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("softverbs pingpong: {e}"))?;
        pairs.push(Pair {
            guest,
            guest_text,
            host,
            started: Instant::now(),
        });
    }
    let mut watchdog = Watchdog::new(env);
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for (i, mut pair) in pairs.into_iter().enumerate() {
        let host_status = watchdog.wait_exit(&mut pair.host, WAIT, "softverbs pingpong");
        let ended = Instant::now();
        if host_status.is_err() {
            let _ = pair.guest.kill();
        }
        let guest_status = watchdog.wait_exit(&mut pair.guest, WAIT, "ibv_rc_pingpong on rxe");
        let host_text = output(pair.host)?;
        let guest_text = output(pair.guest)? + &pair.guest_text.join().unwrap_or_default();
        let ok = host_status?.success() && guest_status?.success();
        let report = host_text
            .lines()
            .find(|l| l.contains("every echo verified"))
            .map(str::to_string);
        match (ok, report) {
            (true, Some(r)) => reports.push((r, pair.started, ended)),
            _ => failures.push(format!(
                "pair {}: softverbs: {} / rxe: {}",
                i + 1,
                last_lines(&host_text),
                last_lines(&guest_text)
            )),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    let qpns: Vec<u32> = reports
        .iter()
        .map(|(r, _, _)| local_qpn(r))
        .collect::<Result<_, _>>()?;
    let slots: Vec<u32> = qpns.iter().map(|q| q >> 16).collect();
    if slots[0] == slots[1] || slots.contains(&0) {
        return Err(format!(
            "QPNs {:#x} and {:#x} are not in two slots of a shared device",
            qpns[0], qpns[1]
        ));
    }
    // The second client started after the first; it must have started before the first
    // ended, or the two did not share the device at the same time.
    let (first_end, second_start) = (reports[0].2, reports[1].1);
    if second_start >= first_end {
        return Err("the two ping-pongs did not overlap in time".into());
    }
    Ok(format!(
        "2 processes x {ITERS} x {size} B each way at once, every echo verified; QPNs {:#x} \
         (slot {}) and {:#x} (slot {})",
        qpns[0], slots[0], qpns[1], slots[1]
    ))
}

/// Starts `ibv_rc_pingpong` as a server on `guest_port` in the guest behind a fresh local
/// `-L` forward, and waits until it listens: (local port, ssh child, its output).
fn start_guest(
    env: &LabEnv,
    guest_port: u16,
    mtu: u32,
    size: usize,
) -> Result<(u16, Child, std::thread::JoinHandle<String>), String> {
    let local_port = free_local_port()?;
    // -e: the program sleeps on CQ events, leaving the guest's CPUs to rxe.
    let cmd = format!(
        "exec timeout {GUEST_LIFETIME_S} ibv_rc_pingpong -e -d rxe0 -g 1 -m {mtu} -s {size} -n {ITERS} -p {guest_port}"
    );
    let (guest, all) = env.start_tcp_server(
        &cmd,
        guest_port,
        local_port,
        &format!("ibv_rc_pingpong on port {guest_port}"),
    )?;
    Ok((local_port, guest, all))
}

/// The local QPN in a `softverbs pingpong --ibv` report (`local QP 0x15eee (...)`).
fn local_qpn(report: &str) -> Result<u32, String> {
    report
        .split("local QP 0x")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| format!("no local QP in {report:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_qpn_is_read_from_the_report() {
        let r = "ibv_rc_pingpong side channel: local QP 0x15eee (::ffff:10.77.0.1), remote QP \
                 0x12 (::ffff:10.77.0.2): 20 messages of 1025 bytes each way, every echo verified";
        assert_eq!(local_qpn(r), Ok(0x15eee));
        assert!(local_qpn("nothing").is_err());
    }
}
