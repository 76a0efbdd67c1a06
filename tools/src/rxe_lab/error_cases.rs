//! RC scenarios where the responder says no, against kernel rxe in either direction: the NAKs
//! and the completion statuses they lead to must mean the same on both stacks.
//!
//! - RNR: a SEND reaches a QP with no receive posted; the responder answers RNR NAK (seen on
//!   rxe's hw_counters), the requester retries (rnr_retry 7 = forever) and the SEND completes
//!   once the receive is posted, data intact.
//! - WRITE with a wrong rkey and READ past the end of the region: NAK remote access error,
//!   the requester completes with IBV_WC_REM_ACCESS_ERR, the responder's memory is untouched.

use std::time::{Duration, Instant};

use softverbs::{RemoteAddr, SendWr, WcOpcode, WcStatus, WrOpcode};

use super::guest_pair::{
    connect, expect_guest_wc, expect_host_wc, fail, guest_check, host_check, Host, BUF_BYTES,
    GUARD_BYTES, WAIT,
};
use super::guest_peer::GuestPeer;
use super::ibv_wc::{IBV_WC_RECV, IBV_WC_REM_ACCESS_ERR, IBV_WC_SEND};
use super::lab_env::LabEnv;
use super::pattern::lab_pattern;
use super::scenario::Direction;

/// Bytes of the RNR SEND (two packets at MTU 1024, one at 4096).
const RNR_SEND_BYTES: usize = 1500;
/// How often the RNR counter is looked at while waiting for the first RNR NAK.
const COUNTER_POLL: Duration = Duration::from_millis(100);

/// The error scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCase {
    /// SEND to a QP without a posted receive.
    Rnr,
    /// RDMA WRITE with an rkey the responder never gave out.
    WriteBadRkey,
    /// RDMA READ of a range that runs one byte past the responder's region.
    ReadOutOfBounds,
}

impl ErrorCase {
    /// Every case, in table order.
    pub const ALL: [ErrorCase; 3] = [
        ErrorCase::Rnr,
        ErrorCase::WriteBadRkey,
        ErrorCase::ReadOutOfBounds,
    ];

    /// Scenario name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCase::Rnr => "RC SEND RNR NAK",
            ErrorCase::WriteBadRkey => "RC WRITE bad rkey",
            ErrorCase::ReadOutOfBounds => "RC READ out of bounds",
        }
    }
}

fn rxe_counter(peer: &mut GuestPeer, name: &str) -> Result<u64, String> {
    GuestPeer::num(&peer.call(&format!("counter name={name}"))?, "value")
}

/// Waits (bounded) until rxe's counter `name` exceeds `before`.
fn wait_counter(peer: &mut GuestPeer, name: &str, before: u64) -> Result<u64, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = rxe_counter(peer, name)?;
        if now > before {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return fail(format!("rxe's {name} stayed at {before} for {WAIT:?}"));
        }
        std::thread::sleep(COUNTER_POLL);
    }
}

/// Runs `case` in `dir` at path MTU `mtu`; `Ok` says what was seen.
pub fn run(
    env: &LabEnv,
    device: &str,
    case: ErrorCase,
    dir: Direction,
    mtu: u32,
) -> Result<String, String> {
    let (host, mut peer) = connect(env, device, mtu)?;
    match case {
        ErrorCase::Rnr => rnr(&host, &mut peer, dir),
        ErrorCase::WriteBadRkey | ErrorCase::ReadOutOfBounds => {
            access_error(&host, &mut peer, case, dir)
        }
    }
}

fn rnr(host: &Host, peer: &mut GuestPeer, dir: Direction) -> Result<String, String> {
    let len = RNR_SEND_BYTES;
    let seed = 99;
    let wr_id = 7;
    let our_qpn = host.qp.qp_num();
    match dir {
        Direction::SoftverbsToRxe => {
            // rxe is the responder: it counts the RNR NAKs it sends.
            let before = rxe_counter(peer, "send_rnr_err")?;
            host.write(0, &lab_pattern(seed, len))?;
            peer.call(&format!("zero offset=0 length={}", len + GUARD_BYTES))?;
            host.post_send(SendWr::send(wr_id, host.sges(0, len)?))?;
            let after = wait_counter(peer, "send_rnr_err", before)?;
            peer.call(&format!(
                "post_recv wr_id={wr_id} offset=0 length={}",
                len + GUARD_BYTES
            ))?;
            expect_host_wc(&host.poll()?, wr_id, WcOpcode::Send, None, our_qpn)?;
            let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
            expect_guest_wc(&wc, wr_id, IBV_WC_RECV, Some(len))?;
            guest_check(peer, 0, len, seed)?;
            Ok(format!(
                "rxe sent {} RNR NAK(s), SEND of {len} B completed after the receive was posted",
                after - before
            ))
        }
        Direction::RxeToSoftverbs => {
            // rxe is the requester: it counts the RNR NAKs it receives from softverbs.
            let before = rxe_counter(peer, "rcvd_rnr_err")?;
            host.write(0, &vec![0u8; len + GUARD_BYTES])?;
            peer.call(&format!("fill offset=0 length={len} seed={seed}"))?;
            peer.call(&format!(
                "post_send wr_id={wr_id} op=SEND offset=0 length={len}"
            ))?;
            let after = wait_counter(peer, "rcvd_rnr_err", before)?;
            host.post_recv(wr_id, 0, len + GUARD_BYTES)?;
            let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
            expect_guest_wc(&wc, wr_id, IBV_WC_SEND, None)?;
            expect_host_wc(&host.poll()?, wr_id, WcOpcode::Recv, Some(len), our_qpn)?;
            host_check(host, 0, len, seed)?;
            Ok(format!(
                "softverbs sent {} RNR NAK(s) (rxe's rcvd_rnr_err), SEND of {len} B completed after the receive was posted",
                after - before
            ))
        }
    }
}

fn access_error(
    host: &Host,
    peer: &mut GuestPeer,
    case: ErrorCase,
    dir: Direction,
) -> Result<String, String> {
    let len = 256;
    let wr_id = 9;
    let (op, wr_opcode) = match case {
        ErrorCase::WriteBadRkey => ("WRITE", WrOpcode::RdmaWrite),
        _ => ("READ", WrOpcode::RdmaRead),
    };
    match dir {
        Direction::SoftverbsToRxe => {
            let our_qpn = host.qp.qp_num();
            let good = Host::remote_of(peer)?;
            let remote = match case {
                ErrorCase::WriteBadRkey => RemoteAddr {
                    rkey: good.rkey ^ 0x0000_ff00,
                    ..good
                },
                // The last `len - 1` bytes of the region plus one byte past it.
                _ => RemoteAddr {
                    remote_addr: good.remote_addr + (BUF_BYTES - len + 1) as u64,
                    ..good
                },
            };
            peer.call(&format!("zero offset=0 length={BUF_BYTES}"))?;
            host.write(0, &lab_pattern(5, len))?;
            host.post_send(SendWr {
                opcode: wr_opcode,
                remote,
                ..SendWr::send(wr_id, host.sges(0, len)?)
            })?;
            let wc = host.poll()?;
            if wc.wr_id != wr_id || wc.qp_num != our_qpn || wc.status != WcStatus::RemAccessErr {
                return fail(format!(
                    "softverbs completion {wc:?}, expected REM_ACCESS_ERR"
                ));
            }
            // Nothing landed on the rxe side: its region is still all zero.
            let r = peer.call(&format!("check_zero offset=0 length={BUF_BYTES}"))?;
            if GuestPeer::num(&r, "zero")? != 1 {
                return fail(format!("rxe memory changed: {r:?}"));
            }
            Ok(format!(
                "softverbs {op} completed with REM_ACCESS_ERR, rxe memory untouched"
            ))
        }
        Direction::RxeToSoftverbs => {
            let (raddr, rkey) = match case {
                ErrorCase::WriteBadRkey => (host.mr.addr(), host.mr.rkey() ^ 0x0000_ff00),
                _ => (
                    host.mr.addr() + (BUF_BYTES - len + 1) as u64,
                    host.mr.rkey(),
                ),
            };
            host.write(0, &vec![0u8; BUF_BYTES])?;
            peer.call(&format!("fill offset=0 length={len} seed=5"))?;
            peer.call(&format!(
                "post_send wr_id={wr_id} op={op} offset=0 length={len} raddr={raddr} rkey={rkey}"
            ))?;
            let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
            let status = GuestPeer::num(&wc, "status")?;
            if GuestPeer::num(&wc, "wr_id")? != wr_id || status != IBV_WC_REM_ACCESS_ERR {
                return fail(format!(
                    "rxe completion {wc:?}, expected status {IBV_WC_REM_ACCESS_ERR} (REM_ACCESS_ERR)"
                ));
            }
            let mut all = vec![0u8; BUF_BYTES];
            host.mr.read(0, &mut all).map_err(|e| e.to_string())?;
            if all.iter().any(|&b| b != 0) {
                return fail("softverbs memory changed");
            }
            Ok(format!(
                "rxe {op} completed with REM_ACCESS_ERR, softverbs memory untouched"
            ))
        }
    }
}
