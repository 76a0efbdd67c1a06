//! `softverbs pingpong --ibv`: a ping-pong that an unmodified rdma-core `ibv_rc_pingpong` on
//! the other end takes for one of its own: same side channel ([`crate::ibv_oob`]), same
//! order (the client sends first; each side sends its next message once its last send and
//! the peer's message have both completed), same QP settings (RTR with
//! max_dest_rd_atomic 1 and min_rnr_timer 12; RTS with retry_cnt 7 and rnr_retry 7).
//!
//! What is checked: ibv_rc_pingpong sends from the buffer it receives into, so it echoes the
//! last message it got (its first message, as a client, is its initial 0x7b fill). Every
//! message softverbs receives is compared with what that echo must be, and every completion's
//! status, opcode, length and QP number are checked.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softverbs::{
    AccessFlags, Mtu, QpAttr, QpAttrMask, QpState, RcConnectOptions, RcEndpoint, RecvWr, SendWr,
    VerbsError, VerbsResult, WcOpcode, WcStatus,
};

use crate::ibv_oob::{decode_dest, encode_dest, DEST_MSG_LEN, DONE_MSG};
use crate::rc_pair::{pattern, RcSide};

/// The byte ibv_rc_pingpong fills its buffer with before the first exchange.
pub const IBV_PINGPONG_FILL: u8 = 0x7b;
/// Receives kept posted.
const RECV_DEPTH: u32 = 4;
/// Pause between attempts to reach a peer whose side channel is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(250);

/// Parameters of one run.
#[derive(Debug, Clone)]
pub struct IbvPingpongConfig {
    /// softverbs device.
    pub device: String,
    /// Message size in bytes (at least 1, as for ibv_rc_pingpong).
    pub size: usize,
    /// Messages each way.
    pub iters: u64,
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent of our QP.
    pub qp_timeout: u8,
    /// Longest wait for the side channel or for any one completion.
    pub wait: Duration,
    /// Behave as ibv_rc_pingpong itself: send back the last message received (the 0x7b fill
    /// before any), check no data. For testing the checking mode without rdma-core.
    pub echo: bool,
}

/// Which end of the side channel we are.
pub enum IbvRole {
    /// Accept one connection on this listener (bound by the caller, so it can start the peer
    /// after the port is open).
    Server(TcpListener),
    /// Connect to this address, retrying until [`IbvPingpongConfig::wait`] passes.
    Client(SocketAddr),
}

/// What a successful run saw.
#[derive(Debug, Clone)]
pub struct IbvPingpongReport {
    /// Our endpoint.
    pub local: RcEndpoint,
    /// The peer's endpoint.
    pub remote: RcEndpoint,
    /// Messages sent and received (each).
    pub iters: u64,
    /// Time of the message exchange.
    pub elapsed: Duration,
}

fn io_err(what: &str, e: std::io::Error) -> VerbsError {
    VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(5),
        message: format!("side channel ({what}): {e}"),
    }
}

/// Runs one side to the end; `Ok` only if every message and completion was as expected.
pub fn run(cfg: &IbvPingpongConfig, role: IbvRole) -> VerbsResult<IbvPingpongReport> {
    if cfg.size == 0 || cfg.size > u32::MAX as usize {
        return Err(VerbsError::inval("message size must be 1 ..= 2^32-1 bytes"));
    }
    let side = RcSide::new(&cfg.device, cfg.size, RECV_DEPTH)?;
    // Receives are posted in INIT, before the exchange, as ibv_rc_pingpong does; connecting
    // later goes INIT -> INIT -> RTR -> RTS.
    side.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: AccessFlags::empty(),
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    for i in 0..RECV_DEPTH {
        post_recv(&side, cfg.size, u64::from(i))?;
    }
    // Like ibv_rc_pingpong: a random 24-bit PSN.
    let my_psn = random_psn();
    let local = side.qp.endpoint(my_psn, 1)?;
    let opts = RcConnectOptions {
        path_mtu: cfg.mtu,
        timeout: cfg.qp_timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        access: AccessFlags::empty(),
        ..RcConnectOptions::default()
    };
    let is_client = matches!(role, IbvRole::Client(_));
    let remote = match role {
        IbvRole::Server(listener) => {
            let (mut stream, _) = accept(&listener, cfg.wait)?;
            stream
                .set_read_timeout(Some(cfg.wait))
                .map_err(|e| io_err("timeout", e))?;
            let mut msg = [0u8; DEST_MSG_LEN];
            stream
                .read_exact(&mut msg)
                .map_err(|e| io_err("reading the client's address", e))?;
            let remote = decode_dest(&msg)?;
            side.qp.connect_rc(my_psn, &remote, &opts)?;
            stream
                .write_all(&encode_dest(&local))
                .map_err(|e| io_err("sending our address", e))?;
            // The client's "done" (or its closing the connection) ends the exchange.
            let mut done = [0u8; DONE_MSG.len()];
            let _ = stream.read_exact(&mut done);
            remote
        }
        IbvRole::Client(addr) => {
            let remote = client_exchange(addr, &encode_dest(&local), cfg.wait)?;
            side.qp.connect_rc(my_psn, &remote, &opts)?;
            remote
        }
    };

    let started = Instant::now();
    // ibv_rc_pingpong's loop: counts of completed sends and receives, and what is pending.
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let (mut send_pending, mut recv_pending) = (false, true);
    // In echo mode, what the next send carries.
    let mut echo_buf = vec![IBV_PINGPONG_FILL; cfg.size];
    let send = |seq: u64, echo_buf: &[u8]| {
        let data = if cfg.echo {
            echo_buf.to_vec()
        } else {
            pattern(seq, cfg.size)
        };
        post_send(&side, &data, seq)
    };
    if is_client && cfg.iters > 0 {
        send(0, &echo_buf)?;
        send_pending = true;
    }
    let mut got = vec![0u8; cfg.size];
    while rcnt < cfg.iters || scnt < cfg.iters {
        let wc = side.cq.poll_one(cfg.wait)?;
        if wc.status != WcStatus::Success || wc.qp_num != local.qpn {
            return Err(VerbsError::inval(format!("completion {wc:?}")));
        }
        match wc.opcode {
            WcOpcode::Send => {
                if !send_pending || wc.wr_id != scnt {
                    return Err(VerbsError::inval(format!(
                        "unexpected send completion {wc:?}"
                    )));
                }
                scnt += 1;
                send_pending = false;
            }
            WcOpcode::Recv => {
                if wc.byte_len as usize != cfg.size || wc.src_qp != remote.qpn {
                    return Err(VerbsError::inval(format!("receive {rcnt}: {wc:?}")));
                }
                side.recv_mr.read(0, &mut got)?;
                let expected = expected_message(is_client, rcnt, cfg.size);
                if cfg.echo {
                    echo_buf.copy_from_slice(&got);
                } else if got != expected {
                    let at = got.iter().zip(&expected).position(|(a, b)| a != b);
                    return Err(VerbsError::inval(format!(
                        "message {rcnt}: data differs from the expected echo at byte {at:?}"
                    )));
                }
                rcnt += 1;
                recv_pending = false;
                post_recv(&side, cfg.size, wc.wr_id)?;
            }
            other => {
                return Err(VerbsError::inval(format!(
                    "unexpected {other:?} completion"
                )))
            }
        }
        if scnt < cfg.iters && !send_pending && !recv_pending {
            send(scnt, &echo_buf)?;
            send_pending = true;
            recv_pending = true;
        }
    }
    Ok(IbvPingpongReport {
        local,
        remote,
        iters: cfg.iters,
        elapsed: started.elapsed(),
    })
}

/// The `n`-th message we must receive: an ibv_rc_pingpong server echoes our message `n`; a
/// client first sends its fill, then echoes our message `n - 1`.
pub fn expected_message(we_are_client: bool, n: u64, size: usize) -> Vec<u8> {
    match (we_are_client, n) {
        (true, n) => pattern(n, size),
        (false, 0) => vec![IBV_PINGPONG_FILL; size],
        (false, n) => pattern(n - 1, size),
    }
}

fn post_recv(side: &RcSide, size: usize, wr_id: u64) -> VerbsResult<()> {
    side.qp
        .post_recv(&[RecvWr {
            wr_id,
            sg_list: vec![side.recv_mr.sge(0, size as u32)?],
        }])
        .map_err(|e| e.error)
}

fn post_send(side: &RcSide, data: &[u8], seq: u64) -> VerbsResult<()> {
    side.send_mr.write(0, data)?;
    side.qp
        .post_send(&[SendWr::send(
            seq,
            vec![side.send_mr.sge(0, data.len() as u32)?],
        )])
        .map_err(|e| e.error)
}

fn accept(listener: &TcpListener, wait: Duration) -> VerbsResult<(TcpStream, SocketAddr)> {
    // Non-blocking accept in a bounded loop: a peer that never comes is an error, not a hang.
    listener
        .set_nonblocking(true)
        .map_err(|e| io_err("listener", e))?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false).map_err(|e| io_err("accept", e))?;
                return Ok((s, a));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io_err("waiting for the client", e)),
        }
    }
}

/// Connects, sends our address, reads the server's, says done. A connection that closes
/// before the answer (a forwarder whose server is not listening yet) is retried.
fn client_exchange(
    addr: SocketAddr,
    ours: &[u8; DEST_MSG_LEN],
    wait: Duration,
) -> VerbsResult<RcEndpoint> {
    let deadline = Instant::now() + wait;
    loop {
        let attempt = (|| -> std::io::Result<[u8; DEST_MSG_LEN]> {
            let mut s = TcpStream::connect_timeout(&addr, wait)?;
            s.set_read_timeout(Some(wait))?;
            s.write_all(ours)?;
            let mut msg = [0u8; DEST_MSG_LEN];
            s.read_exact(&mut msg)?;
            s.write_all(DONE_MSG)?;
            Ok(msg)
        })();
        match attempt {
            Ok(msg) => return decode_dest(&msg),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof
                        | ErrorKind::ConnectionRefused
                        | ErrorKind::ConnectionReset
                ) && Instant::now() + CONNECT_RETRY < deadline =>
            {
                std::thread::sleep(CONNECT_RETRY)
            }
            Err(e) => return Err(io_err(&format!("exchanging addresses with {addr}"), e)),
        }
    }
}

fn random_psn() -> u32 {
    // No RNG dependency: the clock's low bits and the PID are random enough for a PSN.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ std::process::id().rotate_left(12)) & 0xff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_echoes() {
        assert_eq!(expected_message(true, 3, 8), pattern(3, 8));
        assert_eq!(expected_message(false, 0, 4), vec![0x7b; 4]);
        assert_eq!(expected_message(false, 5, 8), pattern(4, 8));
    }
}
