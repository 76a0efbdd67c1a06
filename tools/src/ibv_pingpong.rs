//! `softverbs pingpong --ibv`: a ping-pong that an unmodified rdma-core `ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong` or `ibv_srq_pingpong` on the other end takes for one
//! of its own: same side channel ([`crate::ibv_oob`]; the SRQ program exchanges 256 address
//! lines, one per possible QP), same message order, same QP settings (RC: RTR with
//! max_dest_rd_atomic 1 and min_rnr_timer 12, RTS with retry_cnt 7 and rnr_retry 7; UD:
//! Q_Key 0x11111111 and a 40-byte GRH area in front of every receive).
//!
//! The order, as in those programs: the client sends first (on every QP); a QP sends its next
//! message once its last send and a message from the peer have both completed, until each
//! side has sent `iters` messages in all and received as many.
//!
//! What is checked: the rc/uc/ud programs send from the buffer they receive into, so they
//! echo the last message they got (their first message, as a client, is the initial 0x7b
//! fill); every message softverbs receives is compared with what that echo must be. The SRQ
//! program shares one zero-filled buffer among its QPs, so which message it echoes is not
//! defined: there softverbs always sends [`SRQ_MESSAGE_BYTE`] and every byte that comes back
//! must be that or the program's zero fill, and at least one echo must carry ours. Every completion's status, opcode, length,
//! QP and source QP (and for UD the GRH flag) is checked.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softverbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, Mr, Mtu, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpState,
    QpType, RcConnectOptions, RcEndpoint, RdmaBuffer, RecvWr, SendWr, Srq, SrqAttr, VerbsError,
    VerbsResult, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

use crate::ibv_oob::{decode_dest, encode_dest, DEST_MSG_LEN, DONE_MSG};
use crate::rc_pair::pattern;

/// The byte the rdma-core rc/uc/ud ping-pong programs fill their buffer with before the first
/// exchange (ibv_srq_pingpong zeroes its buffer).
pub const IBV_PINGPONG_FILL: u8 = 0x7b;
/// What softverbs sends to ibv_srq_pingpong.
pub const SRQ_MESSAGE_BYTE: u8 = 0x5a;
/// Q_Key of ibv_ud_pingpong's QPs.
pub const IBV_UD_QKEY: u32 = 0x1111_1111;
/// Bytes of the GRH area in front of a UD receive.
pub const GRH_BYTES: usize = 40;
/// Address lines ibv_srq_pingpong exchanges whatever its QP count (its MAX_QP).
pub const SRQ_PINGPONG_LINES: usize = 256;
/// Receives kept posted per QP.
const RECV_DEPTH_PER_QP: usize = 4;
/// Pause between attempts to reach a peer whose side channel is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(250);
/// Pending bits of a QP, as the rdma-core programs keep them.
const PENDING_RECV: u8 = 1;
const PENDING_SEND: u8 = 2;

/// Which rdma-core program is on the other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IbvKind {
    /// ibv_rc_pingpong.
    Rc,
    /// ibv_uc_pingpong.
    Uc,
    /// ibv_ud_pingpong.
    Ud,
    /// ibv_srq_pingpong with this many RC QPs (its `-q`, 16 by default) on one SRQ.
    Srq(usize),
}

impl IbvKind {
    /// Parses `rc`, `uc`, `ud` or `srq` (`num_qp` is used for `srq`).
    pub fn parse(s: &str, num_qp: usize) -> VerbsResult<IbvKind> {
        match s {
            "rc" => Ok(IbvKind::Rc),
            "uc" => Ok(IbvKind::Uc),
            "ud" => Ok(IbvKind::Ud),
            "srq" if (1..SRQ_PINGPONG_LINES).contains(&num_qp) => Ok(IbvKind::Srq(num_qp)),
            "srq" => Err(VerbsError::inval(format!(
                "--num-qp {num_qp}: ibv_srq_pingpong takes 1 ..= {}",
                SRQ_PINGPONG_LINES - 1
            ))),
            other => Err(VerbsError::inval(format!(
                "--kind {other:?}: expected rc, uc, ud or srq"
            ))),
        }
    }

    /// The rdma-core program's name.
    pub fn program(self) -> &'static str {
        match self {
            IbvKind::Rc => "ibv_rc_pingpong",
            IbvKind::Uc => "ibv_uc_pingpong",
            IbvKind::Ud => "ibv_ud_pingpong",
            IbvKind::Srq(_) => "ibv_srq_pingpong",
        }
    }

    fn qp_type(self) -> QpType {
        match self {
            IbvKind::Uc => QpType::Uc,
            IbvKind::Ud => QpType::Ud,
            IbvKind::Rc | IbvKind::Srq(_) => QpType::Rc,
        }
    }

    fn num_qp(self) -> usize {
        match self {
            IbvKind::Srq(n) => n,
            _ => 1,
        }
    }

    fn exchange_lines(self) -> usize {
        match self {
            IbvKind::Srq(_) => SRQ_PINGPONG_LINES,
            _ => 1,
        }
    }

    /// The program's buffer before the first exchange.
    fn fill(self) -> u8 {
        match self {
            IbvKind::Srq(_) => 0,
            _ => IBV_PINGPONG_FILL,
        }
    }

    fn grh_bytes(self) -> usize {
        if self == IbvKind::Ud {
            GRH_BYTES
        } else {
            0
        }
    }
}

/// Parameters of one run.
#[derive(Debug, Clone)]
pub struct IbvPingpongConfig {
    /// The program on the other end.
    pub kind: IbvKind,
    /// softverbs device.
    pub device: String,
    /// Message size in bytes (at least 1, as for the rdma-core programs; UD: at most the
    /// port MTU).
    pub size: usize,
    /// Messages each way (in all, over every QP).
    pub iters: u64,
    /// Path MTU (RC, UC, SRQ).
    pub mtu: Mtu,
    /// Local ACK timeout exponent of our QPs (RC, SRQ).
    pub qp_timeout: u8,
    /// Longest wait for the side channel or for any one completion.
    pub wait: Duration,
    /// Behave as the rdma-core program itself: send back the last message received (the
    /// 0x7b fill before any), check no data. For testing the checking mode without rdma-core.
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
    /// Our endpoint (of the first QP).
    pub local: RcEndpoint,
    /// The peer's endpoint (of its first QP).
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

/// Our resources: QPs on one CQ (and for SRQ one SRQ), a send buffer and one receive slot
/// per receive WR.
struct Side {
    kind: IbvKind,
    cq: Cq,
    qps: Vec<Qp>,
    srq: Option<Srq>,
    pd: Pd,
    send_mr: Mr,
    recv_mr: Mr,
    slot_bytes: usize,
    ctx: Context,
}

impl Side {
    fn new(cfg: &IbvPingpongConfig) -> VerbsResult<Side> {
        let kind = cfg.kind;
        let ctx = Context::open(&cfg.device)?;
        let pd = ctx.alloc_pd()?;
        let recv_wrs = RECV_DEPTH_PER_QP * kind.num_qp();
        let cq = ctx.create_cq((recv_wrs + 2 * kind.num_qp()) as u32)?;
        let slot_bytes = cfg.size + kind.grh_bytes();
        let alloc = |n| RdmaBuffer::new(n).ok_or_else(|| VerbsError::nomem("buffer allocation"));
        let send_mr = pd.register(alloc(cfg.size)?, AccessFlags::LOCAL_WRITE)?;
        let recv_mr = pd.register(alloc(slot_bytes * recv_wrs)?, AccessFlags::LOCAL_WRITE)?;
        let srq = match kind {
            IbvKind::Srq(_) => Some(
                pd.create_srq(&SrqAttr {
                    max_wr: recv_wrs as u32,
                    max_sge: 1,
                    srq_limit: 0,
                })?
                .0,
            ),
            _ => None,
        };
        let mut qps = Vec::new();
        for _ in 0..kind.num_qp() {
            let mut builder = pd.qp_builder().qp_type(kind.qp_type()).cap(QpCap {
                max_send_wr: 2,
                max_recv_wr: if srq.is_some() {
                    0
                } else {
                    RECV_DEPTH_PER_QP as u32
                },
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            });
            if let Some(srq) = &srq {
                builder = builder.srq(srq);
            }
            qps.push(builder.build(&cq, &cq)?);
        }
        Ok(Side {
            kind,
            cq,
            qps,
            srq,
            pd,
            send_mr,
            recv_mr,
            slot_bytes,
            ctx,
        })
    }

    /// INIT as the rdma-core programs set it before posting receives.
    fn to_init(&self) -> VerbsResult<()> {
        for qp in &self.qps {
            let mut attr = QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: 1,
                ..QpAttr::default()
            };
            let mut mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
            if self.kind == IbvKind::Ud {
                attr.qkey = IBV_UD_QKEY;
                mask = mask | QpAttrMask::QKEY;
            } else {
                mask = mask | QpAttrMask::ACCESS_FLAGS;
            }
            qp.modify(&attr, mask)?;
        }
        Ok(())
    }

    /// Posts receive slot `slot` on QP `qp` (or the SRQ).
    fn post_recv(&self, qp: usize, slot: usize) -> VerbsResult<()> {
        let wr = RecvWr {
            wr_id: slot as u64,
            sg_list: vec![self
                .recv_mr
                .sge(slot * self.slot_bytes, self.slot_bytes as u32)?],
        };
        match &self.srq {
            Some(srq) => srq.post_recv(&[wr]),
            None => self.qps[qp].post_recv(&[wr]),
        }
        .map_err(|e| e.error)
    }

    /// Brings our QPs to RTS towards `remote` (one endpoint per QP).
    fn connect(
        &self,
        cfg: &IbvPingpongConfig,
        my_psns: &[u32],
        remote: &[RcEndpoint],
    ) -> VerbsResult<Option<Ah>> {
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
        for (i, qp) in self.qps.iter().enumerate() {
            match self.kind {
                IbvKind::Rc | IbvKind::Srq(_) => qp.connect_rc(my_psns[i], &remote[i], &opts)?,
                IbvKind::Uc => qp.connect_uc(my_psns[i], &remote[i], &opts)?,
                IbvKind::Ud => qp.activate_ud(IBV_UD_QKEY, my_psns[i])?,
            }
        }
        if self.kind != IbvKind::Ud {
            return Ok(None);
        }
        let ah = self.pd.create_ah(&AhAttr {
            dgid: remote[0].gid,
            sgid_index: 1,
            port_num: 1,
            hop_limit: 64,
            ..AhAttr::default()
        })?;
        Ok(Some(ah))
    }
}

/// Runs one side to the end; `Ok` only if every message and completion was as expected.
pub fn run(cfg: &IbvPingpongConfig, role: IbvRole) -> VerbsResult<IbvPingpongReport> {
    if cfg.size == 0 || cfg.size > u32::MAX as usize - GRH_BYTES {
        return Err(VerbsError::inval(
            "message size must be 1 ..= 2^32-41 bytes",
        ));
    }
    let side = Side::new(cfg)?;
    if cfg.kind == IbvKind::Ud {
        let port_mtu = side.ctx.query_port(1)?.active_mtu.bytes();
        if cfg.size > port_mtu as usize {
            return Err(VerbsError::inval(format!(
                "a UD message of {} bytes is larger than the port MTU ({port_mtu})",
                cfg.size
            )));
        }
    }
    // Receives are posted in INIT, before the exchange, as the rdma-core programs do;
    // connecting later goes INIT -> INIT -> RTR -> RTS.
    side.to_init()?;
    let num_qp = cfg.kind.num_qp();
    for slot in 0..RECV_DEPTH_PER_QP * num_qp {
        side.post_recv(slot % num_qp, slot)?;
    }
    let my_psns: Vec<u32> = (0..num_qp).map(|i| random_psn(i as u32)).collect();
    let mut local = Vec::new();
    for (qp, &psn) in side.qps.iter().zip(&my_psns) {
        local.push(qp.endpoint(psn, 1)?);
    }
    let mut lines: Vec<[u8; DEST_MSG_LEN]> = local.iter().map(encode_dest).collect();
    // The SRQ program's unused lines are all zeros, as its memset leaves them.
    lines.resize(cfg.kind.exchange_lines(), encode_dest(&zero_endpoint()));
    let is_client = matches!(role, IbvRole::Client(_));
    let (remote, ah) = match role {
        IbvRole::Server(listener) => {
            let (mut stream, _) = crate::tcp_accept::accept_within(&listener, cfg.wait)
                .map_err(|e| io_err("waiting for the client", e))?;
            stream
                .set_read_timeout(Some(cfg.wait))
                .map_err(|e| io_err("timeout", e))?;
            let remote = read_lines(&mut stream, lines.len())?;
            let ah = side.connect(cfg, &my_psns, &remote)?;
            stream
                .write_all(&lines.concat())
                .map_err(|e| io_err("sending our addresses", e))?;
            // The client's "done" (or its closing the connection) ends the exchange.
            let mut done = [0u8; DONE_MSG.len()];
            let _ = stream.read_exact(&mut done);
            (remote, ah)
        }
        IbvRole::Client(addr) => {
            let remote = client_exchange(addr, &lines, cfg.wait)?;
            let ah = side.connect(cfg, &my_psns, &remote)?;
            (remote, ah)
        }
    };
    let started = Instant::now();
    exchange(cfg, &side, &remote, ah.as_ref(), is_client)?;
    Ok(IbvPingpongReport {
        local: local[0],
        remote: remote[0],
        iters: cfg.iters,
        elapsed: started.elapsed(),
    })
}

/// The message loop of the rdma-core programs, with every completion and message checked.
fn exchange(
    cfg: &IbvPingpongConfig,
    side: &Side,
    remote: &[RcEndpoint],
    ah: Option<&Ah>,
    is_client: bool,
) -> VerbsResult<()> {
    let num_qp = side.qps.len();
    let (mut scnt, mut rcnt, mut posted) = (0u64, 0u64, 0u64);
    let mut pending = vec![PENDING_RECV; num_qp];
    // In echo mode, what the next send carries.
    let mut echo_buf = vec![cfg.kind.fill(); cfg.size];
    let srq = matches!(cfg.kind, IbvKind::Srq(_));
    let mut echoes_of_ours = 0u64;
    let mut send = |qp: usize, echo_buf: &[u8]| -> VerbsResult<()> {
        let data = if cfg.echo {
            echo_buf.to_vec()
        } else if srq {
            vec![SRQ_MESSAGE_BYTE; cfg.size]
        } else {
            pattern(posted, cfg.size)
        };
        side.send_mr.write(0, &data)?;
        let wr = SendWr {
            ud: ah.map(|ah| ah.dest(remote[qp].qpn, IBV_UD_QKEY)),
            ..SendWr::send(posted, vec![side.send_mr.sge(0, data.len() as u32)?])
        };
        posted += 1;
        side.qps[qp].post_send(&[wr]).map_err(|e| e.error)
    };
    if is_client {
        for (qp, p) in pending.iter_mut().enumerate() {
            send(qp, &echo_buf)?;
            *p |= PENDING_SEND;
        }
    }
    let grh = cfg.kind.grh_bytes();
    let mut got = vec![0u8; cfg.size];
    while rcnt < cfg.iters || scnt < cfg.iters {
        let wc = side.cq.poll_one(cfg.wait)?;
        let qp = side
            .qps
            .iter()
            .position(|q| q.qp_num() == wc.qp_num)
            .filter(|_| wc.status == WcStatus::Success)
            .ok_or_else(|| VerbsError::inval(format!("completion {wc:?}")))?;
        match wc.opcode {
            WcOpcode::Send if pending[qp] & PENDING_SEND != 0 => {
                scnt += 1;
                pending[qp] &= !PENDING_SEND;
            }
            WcOpcode::Recv => {
                check_receive(&wc, cfg, remote[qp].qpn, grh, rcnt)?;
                let slot = wc.wr_id as usize;
                side.recv_mr.read(slot * side.slot_bytes + grh, &mut got)?;
                if cfg.echo {
                    echo_buf.copy_from_slice(&got);
                } else if srq {
                    let fill = cfg.kind.fill();
                    if let Some(at) = got.iter().position(|&b| b != fill && b != SRQ_MESSAGE_BYTE) {
                        return Err(VerbsError::inval(format!(
                            "message {rcnt}: byte {at} is {:#04x}, neither ours nor the fill",
                            got[at]
                        )));
                    }
                    echoes_of_ours += u64::from(got.contains(&SRQ_MESSAGE_BYTE));
                } else if got != expected_message(is_client, rcnt, cfg.size) {
                    let expected = expected_message(is_client, rcnt, cfg.size);
                    let at = got.iter().zip(&expected).position(|(a, b)| a != b);
                    return Err(VerbsError::inval(format!(
                        "message {rcnt}: data differs from the expected echo at byte {at:?}"
                    )));
                }
                rcnt += 1;
                pending[qp] &= !PENDING_RECV;
                side.post_recv(qp, slot)?;
            }
            _ => return Err(VerbsError::inval(format!("unexpected completion {wc:?}"))),
        }
        if scnt < cfg.iters && pending[qp] == 0 {
            send(qp, &echo_buf)?;
            pending[qp] = PENDING_RECV | PENDING_SEND;
        }
    }
    if srq && !cfg.echo && echoes_of_ours == 0 {
        return Err(VerbsError::inval("none of the peer's messages echoed ours"));
    }
    Ok(())
}

fn check_receive(
    wc: &WorkCompletion,
    cfg: &IbvPingpongConfig,
    src_qp: u32,
    grh: usize,
    n: u64,
) -> VerbsResult<()> {
    let grh_flag_ok = wc.wc_flags.contains(WcFlags::GRH) == (cfg.kind == IbvKind::Ud);
    if wc.byte_len as usize != cfg.size + grh || wc.src_qp != src_qp || !grh_flag_ok {
        return Err(VerbsError::inval(format!(
            "receive {n}: {wc:?}, want {} bytes from QP {src_qp:#x}",
            cfg.size + grh
        )));
    }
    Ok(())
}

/// The `n`-th message we must receive: a server peer echoes our message `n`; a client peer
/// first sends its fill, then echoes our message `n - 1`.
pub fn expected_message(we_are_client: bool, n: u64, size: usize) -> Vec<u8> {
    match (we_are_client, n) {
        (true, n) => pattern(n, size),
        (false, 0) => vec![IBV_PINGPONG_FILL; size],
        (false, n) => pattern(n - 1, size),
    }
}

fn zero_endpoint() -> RcEndpoint {
    RcEndpoint {
        qpn: 0,
        psn: 0,
        gid: softverbs::Gid([0; 16]),
        udp_port: None,
    }
}

fn read_lines(stream: &mut TcpStream, count: usize) -> VerbsResult<Vec<RcEndpoint>> {
    let mut msg = [0u8; DEST_MSG_LEN];
    (0..count)
        .map(|_| {
            stream
                .read_exact(&mut msg)
                .map_err(|e| io_err("reading the peer's addresses", e))?;
            decode_dest(&msg)
        })
        .collect()
}

/// Connects, sends our address lines, reads as many of the server's, says done. A
/// connection that closes before the answer (a forwarder whose server is not listening yet)
/// is retried.
fn client_exchange(
    addr: SocketAddr,
    ours: &[[u8; DEST_MSG_LEN]],
    wait: Duration,
) -> VerbsResult<Vec<RcEndpoint>> {
    let deadline = Instant::now() + wait;
    loop {
        let attempt = (|| -> std::io::Result<Vec<u8>> {
            let mut s = TcpStream::connect_timeout(&addr, wait)?;
            s.set_read_timeout(Some(wait))?;
            s.write_all(&ours.concat())?;
            let mut msgs = vec![0u8; DEST_MSG_LEN * ours.len()];
            s.read_exact(&mut msgs)?;
            s.write_all(DONE_MSG)?;
            Ok(msgs)
        })();
        match attempt {
            Ok(msgs) => return msgs.chunks(DEST_MSG_LEN).map(decode_dest).collect(),
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

fn random_psn(salt: u32) -> u32 {
    // No RNG dependency: the clock's low bits and the PID are random enough for a PSN.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ std::process::id().rotate_left(12) ^ salt.wrapping_mul(0x9e37_79b9)) & 0xff_ffff
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

    #[test]
    fn kinds_parse_and_bad_ones_are_einval() {
        assert_eq!(IbvKind::parse("ud", 16).unwrap(), IbvKind::Ud);
        assert_eq!(IbvKind::parse("srq", 4).unwrap(), IbvKind::Srq(4));
        assert_eq!(IbvKind::parse("srq", 0).unwrap_err().errno(), 22);
        assert_eq!(IbvKind::parse("srq", 256).unwrap_err().errno(), 22);
        assert_eq!(IbvKind::parse("xrc", 1).unwrap_err().errno(), 22);
    }
}
