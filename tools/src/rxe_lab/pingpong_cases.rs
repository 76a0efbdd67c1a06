//! Unmodified rdma-core `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong` in the guest against `softverbs pingpong --ibv`, in both roles. The side channel crosses ssh port forwards on 127.0.0.1 (`-R` when the
//! guest is the client, `-L` when it serves), so the guest needs no route to the host.

use std::net::{SocketAddr, TcpListener};
use std::process::Child;
use std::time::Duration;

use softverbs::Mtu;

use super::guest_pair::LAB_QP_TIMEOUT;
use super::lab_env::{free_local_port, LabEnv};
use super::scenario::Direction;
use super::watchdog::Watchdog;
use crate::ibv_oob::IBV_PINGPONG_PORT;
use crate::ibv_pingpong::{self, IbvKind, IbvPingpongConfig, IbvRole};

/// Longest wait for the side channel or any one completion.
const WAIT: Duration = Duration::from_secs(60);
/// The guest program is killed after this many seconds whatever happens, so that a failed
/// case never leaves it holding the side channel's port.
const GUEST_LIFETIME_S: u64 = 150;
/// Longest wait for the guest program to exit once our side is done.
const GUEST_EXIT_WAIT: Duration = Duration::from_secs(30);

/// QPs of the ibv_srq_pingpong runs (its -q).
const SRQ_QPS: usize = 4;
/// The programs run, in table order.
pub const KINDS: [IbvKind; 4] = [IbvKind::Rc, IbvKind::Uc, IbvKind::Ud, IbvKind::Srq(SRQ_QPS)];

/// Message sizes of `kind` at path MTU `mtu`: the issue's, except 0 B (the programs have no
/// empty messages); UD messages are single packets. UC and SRQ stop at 64 KiB: a 1 MiB UC
/// message is a thousand-frame burst that the TCG guest's 256-entry NIC ring drops part of
/// while the program runs, and UC never resends (the UC verb scenarios carry 1 MiB, with the
/// guest idle); the SRQ program's QPs all receive into one buffer.
pub fn sizes(kind: IbvKind, mtu: usize) -> Vec<usize> {
    match kind {
        IbvKind::Rc => vec![1, mtu - 1, mtu, mtu + 1, 1 << 20],
        IbvKind::Uc => vec![1, mtu - 1, mtu, mtu + 1, 64 << 10],
        IbvKind::Ud => vec![1, mtu - 1, mtu],
        IbvKind::Srq(_) => vec![1, mtu, mtu + 1, 64 << 10],
    }
}

fn iters_for(size: usize) -> u64 {
    if size >= 1 << 20 {
        4
    } else {
        20
    }
}

fn wait_guest(env: &LabEnv, mut child: Child) -> Result<String, String> {
    Watchdog::new(env).wait_exit(
        &mut child,
        GUEST_EXIT_WAIT,
        "the ping-pong program in the guest",
    )?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the ping-pong program in the guest failed ({}): {}",
            out.status,
            text.trim()
        ));
    }
    Ok(text)
}

/// One ping-pong of `kind` with `size`-byte messages at path MTU `mtu`; `dir` names who sends
/// first (the client is the first sender).
pub fn run(
    env: &LabEnv,
    device: &str,
    kind: IbvKind,
    dir: Direction,
    mtu: u32,
    size: usize,
) -> Result<String, String> {
    let iters = iters_for(size);
    let cfg = IbvPingpongConfig {
        kind,
        device: device.to_string(),
        size,
        iters,
        mtu: Mtu::from_bytes(mtu).ok_or("bad MTU")?,
        qp_timeout: LAB_QP_TIMEOUT,
        wait: WAIT,
        echo: false,
    };
    let program = kind.program();
    let kind_args = match kind {
        // ibv_ud_pingpong has no path MTU: its messages are bounded by the port's.
        IbvKind::Ud => String::new(),
        IbvKind::Srq(n) => format!("-m {mtu} -q {n}"),
        IbvKind::Rc | IbvKind::Uc => format!("-m {mtu}"),
    };
    // -e: the program sleeps on CQ events instead of busy-polling, which would starve rxe
    // of the guest's one CPU (a UC message lost that way is never resent).
    let guest_cmd = format!(
        "exec timeout {GUEST_LIFETIME_S} {program} -e -d rxe0 -g 1 {kind_args} -s {size} -n {iters} -p {IBV_PINGPONG_PORT}"
    );
    let (report, child) = match dir {
        // softverbs sends first: it is the client, rxe serves.
        Direction::SoftverbsToRxe => {
            let port = free_local_port()?;
            let child = env.spawn_guest(
                &[
                    "-L".into(),
                    format!("127.0.0.1:{port}:127.0.0.1:{IBV_PINGPONG_PORT}"),
                ],
                &guest_cmd,
            )?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            (ibv_pingpong::run(&cfg, IbvRole::Client(addr)), child)
        }
        Direction::RxeToSoftverbs => {
            let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            let child = env.spawn_guest(
                &["-R".into(), format!("{IBV_PINGPONG_PORT}:127.0.0.1:{port}")],
                &format!("{guest_cmd} 127.0.0.1"),
            )?;
            (ibv_pingpong::run(&cfg, IbvRole::Server(listener)), child)
        }
    };
    match report {
        Ok(r) => {
            wait_guest(env, child)?;
            Ok(format!(
                "{iters} x {size} B each way, echoes verified, {:.0} ms",
                r.elapsed.as_secs_f64() * 1e3
            ))
        }
        Err(e) => {
            // Our ssh child only; the guest side ends by its own timeout.
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            Err(e.to_string())
        }
    }
}
