//! RC and UC verb scenarios against kernel rxe: one QP pair (softverbs on the lab link,
//! pyverbs on rxe0 in the guest), one opcode per scenario, every message size of the issue, in
//! either direction. Each step checks both completions (status, opcode, wr_id, byte_len, immediate
//! and its flag, QP numbers) and the bytes that landed.
//!
//! Immediate data: softverbs' `imm_data` is in host order, pyverbs' is the raw big-endian
//! field of `struct ibv_wc`/`ibv_send_wr`, so a value crosses as its byte swap.

use std::net::Ipv6Addr;
use std::time::Duration;

use softverbs::{
    AccessFlags, Context, Cq, Gid, Mr, Mtu, Pd, Qp, QpCap, QpType, RcConnectOptions, RcEndpoint,
    RdmaBuffer, RecvWr, RemoteAddr, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

use super::guest_peer::{GuestPeer, Reply};
use super::ibv_wc::{
    IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SEND, IBV_WC_WITH_IMM,
};
use super::lab_env::LabEnv;
use super::pattern::lab_pattern;
use crate::ibv_pingpong::IBV_UD_QKEY;

/// Bytes of each side's buffer: the largest message plus room behind it.
pub const BUF_BYTES: usize = (1 << 20) + 4096;
/// Bytes past a received message that must stay untouched.
pub(super) const GUARD_BYTES: usize = 64;
/// Offset of an atomic's target word and of its local result.
const ATOMIC_TARGET: usize = 0;
const ATOMIC_RESULT: usize = 64;
/// Local ACK timeout exponent of both QPs: about 1 s, generous for rxe under TCG.
pub const LAB_QP_TIMEOUT: u8 = 18;
/// Attempts of one UC step (see `run`).
const UC_ATTEMPTS: u32 = 3;
/// Longest wait for any one completion or guest reply.
pub(super) const WAIT: Duration = Duration::from_secs(60);
/// Longest wait for rxe's receive completion of a UC message softverbs has sent (its send
/// completed, so every frame has left): a frame the lab link dropped loses the message for
/// good, and on a loaded host 60 s per lost message made a UC case take minutes.
const UC_RECV_WAIT: Duration = Duration::from_secs(15);
/// Largest UC message softverbs sends to rxe (see `run`).
const UC_TO_RXE_MAX: usize = 64 << 10;

/// The operation a scenario exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND
    Send,
    /// SEND_WITH_IMM
    SendImm,
    /// RDMA WRITE
    Write,
    /// RDMA WRITE_WITH_IMM
    WriteImm,
    /// RDMA READ
    Read,
    /// ATOMIC CMP_AND_SWP
    CmpSwap,
    /// ATOMIC FETCH_AND_ADD
    FetchAdd,
}

impl Verb {
    /// Every verb, in table order.
    pub const ALL: [Verb; 7] = [
        Verb::Send,
        Verb::SendImm,
        Verb::Write,
        Verb::WriteImm,
        Verb::Read,
        Verb::CmpSwap,
        Verb::FetchAdd,
    ];

    /// peer.py's name, also the scenario name.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Send => "SEND",
            Verb::SendImm => "SEND_IMM",
            Verb::Write => "WRITE",
            Verb::WriteImm => "WRITE_IMM",
            Verb::Read => "READ",
            Verb::CmpSwap => "CMP_SWAP",
            Verb::FetchAdd => "FETCH_ADD",
        }
    }

    /// Whether it carries immediate data.
    pub(super) fn has_imm(self) -> bool {
        matches!(self, Verb::SendImm | Verb::WriteImm)
    }
}

/// The transport of a scenario's QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Transport {
    /// Scenario name prefix; peer.py's QP type is its lower case.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
        }
    }

    fn qp_type(self) -> QpType {
        match self {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        }
    }

    /// The verbs of the scenario table: UC has no READ and no atomics; UD sends only.
    pub fn verbs(self) -> &'static [Verb] {
        match self {
            Transport::Rc => &Verb::ALL,
            Transport::Uc => &Verb::ALL[..4],
            Transport::Ud => &Verb::ALL[..2],
        }
    }

    fn access(self) -> AccessFlags {
        match self {
            Transport::Rc => {
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC
                    | AccessFlags::MW_BIND
            }
            Transport::Uc => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            Transport::Ud => AccessFlags::LOCAL_WRITE,
        }
    }
}

/// One message of a scenario: what it is, its size, and the values that identify it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) verb: Verb,
    pub(super) len: usize,
    pub(super) wr_id: u64,
    /// Pattern seed of its bytes.
    pub(super) seed: u64,
    pub(super) imm: u32,
}

/// Who sends the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// softverbs is the requester, rxe the responder.
    SoftverbsToRxe,
    /// rxe is the requester, softverbs the responder.
    RxeToSoftverbs,
}

impl Direction {
    /// Both directions.
    pub const BOTH: [Direction; 2] = [Direction::SoftverbsToRxe, Direction::RxeToSoftverbs];

    /// Column text of the results table.
    pub fn label(self) -> &'static str {
        match self {
            Direction::SoftverbsToRxe => "softverbs -> rxe",
            Direction::RxeToSoftverbs => "rxe -> softverbs",
        }
    }
}

/// The message sizes of the issue at path MTU `mtu`.
pub fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 1 << 20]
}

/// Our side of the connection.
pub(super) struct Host {
    pub(super) cq: Cq,
    pub(super) qp: Qp,
    pub(super) mr: Mr,
    pub(super) pd: Pd,
    // Keeps the device open for the QP's lifetime.
    _ctx: Context,
}

pub(super) fn fail<T>(msg: impl Into<String>) -> Result<T, String> {
    Err(msg.into())
}

fn parse_gid(s: &str) -> Result<Gid, String> {
    let ip: Ipv6Addr = s.parse().map_err(|_| format!("bad GID {s:?}"))?;
    Ok(Gid(ip.octets()))
}

fn mtu_of(bytes: u32) -> Result<Mtu, String> {
    Mtu::from_bytes(bytes).ok_or_else(|| format!("{bytes} is not an IB MTU"))
}

/// The GID text pyverbs' GID() takes: eight groups of four hex digits.
pub(super) fn pyverbs_gid(gid: &Gid) -> String {
    gid.0
        .chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// Connects a fresh softverbs RC QP on `device` with a fresh peer.py QP at path MTU `mtu`.
pub(super) fn connect(env: &LabEnv, device: &str, mtu: u32) -> Result<(Host, GuestPeer), String> {
    connect_transport(env, device, mtu, Transport::Rc)
}

/// Starts a peer.py QP of `transport` in the guest and connects it with our fresh QP `qp`
/// (UD: activates both, each addressing the other), at path MTU `mtu`; `access` is what our
/// QP grants its peer.
pub(super) fn pair_with_guest(
    env: &LabEnv,
    qp: &Qp,
    transport: Transport,
    mtu: u32,
    access: AccessFlags,
) -> Result<GuestPeer, String> {
    let e = |x: softverbs::VerbsError| x.to_string();
    let qp_type_arg = transport.name().to_ascii_lowercase();
    let mut peer = GuestPeer::start(env, BUF_BYTES, &qp_type_arg, WAIT)?;
    let remote = RcEndpoint {
        qpn: GuestPeer::num(&peer.info, "qpn")? as u32,
        psn: GuestPeer::num(&peer.info, "psn")? as u32,
        gid: parse_gid(peer.info.get("gid").map(String::as_str).unwrap_or(""))?,
        udp_port: None,
    };
    let our_psn = 0x5a_5a5a ^ (remote.psn & 0xff);
    let local = qp.endpoint(our_psn, 1).map_err(e)?;
    let opts = RcConnectOptions {
        path_mtu: mtu_of(mtu)?,
        access,
        timeout: LAB_QP_TIMEOUT,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..RcConnectOptions::default()
    };
    match transport {
        Transport::Rc => qp.connect_rc(our_psn, &remote, &opts),
        Transport::Uc => qp.connect_uc(our_psn, &remote, &opts),
        Transport::Ud => qp.activate_ud(IBV_UD_QKEY, our_psn),
    }
    .map_err(e)?;
    peer.call(&format!(
        "connect qpn={} psn={} gid={} mtu={mtu} timeout={LAB_QP_TIMEOUT} retry=7",
        local.qpn,
        local.psn,
        pyverbs_gid(&local.gid)
    ))?;
    Ok(peer)
}

/// Connects (UD: activates, addressing the peer) a fresh softverbs QP of `transport` on
/// `device` with a fresh peer.py QP of the same type at path MTU `mtu`.
pub(super) fn connect_transport(
    env: &LabEnv,
    device: &str,
    mtu: u32,
    transport: Transport,
) -> Result<(Host, GuestPeer), String> {
    let e = |x: softverbs::VerbsError| x.to_string();
    let ctx = Context::open(device).map_err(e)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(256).map_err(e)?;
    let buffer = RdmaBuffer::new(BUF_BYTES).ok_or("buffer allocation failed")?;
    let access = transport.access();
    let mr = pd.register(buffer, access).map_err(e)?;
    let qp = pd
        .qp_builder()
        .qp_type(transport.qp_type())
        .cap(QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .build(&cq, &cq)
        .map_err(e)?;
    let peer = pair_with_guest(
        env,
        &qp,
        transport,
        mtu,
        AccessFlags(access.bits() & !AccessFlags::MW_BIND.bits()),
    )?;
    Ok((
        Host {
            cq,
            qp,
            mr,
            pd,
            _ctx: ctx,
        },
        peer,
    ))
}

impl Host {
    pub(super) fn sges(&self, offset: usize, len: usize) -> Result<Vec<Sge>, String> {
        if len == 0 {
            return Ok(Vec::new());
        }
        Ok(vec![self
            .mr
            .sge(offset, len as u32)
            .map_err(|e| e.to_string())?])
    }

    pub(super) fn post_send(&self, wr: SendWr) -> Result<(), String> {
        self.qp.post_send(&[wr]).map_err(|e| e.error.to_string())
    }

    pub(super) fn post_recv(&self, wr_id: u64, offset: usize, len: usize) -> Result<(), String> {
        let wr = RecvWr {
            wr_id,
            sg_list: self.sges(offset, len)?,
        };
        self.qp.post_recv(&[wr]).map_err(|e| e.error.to_string())
    }

    pub(super) fn poll(&self) -> Result<WorkCompletion, String> {
        self.cq.poll_one(WAIT).map_err(|e| e.to_string())
    }

    pub(super) fn write(&self, offset: usize, data: &[u8]) -> Result<(), String> {
        self.mr.write(offset, data).map_err(|e| e.to_string())
    }

    pub(super) fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; len];
        self.mr.read(offset, &mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn u64_at(&self, offset: usize) -> Result<u64, String> {
        let b = self.read(offset, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    pub(super) fn remote_of(peer: &GuestPeer) -> Result<RemoteAddr, String> {
        Ok(RemoteAddr {
            remote_addr: GuestPeer::num(&peer.info, "addr")?,
            rkey: GuestPeer::num(&peer.info, "rkey")? as u32,
        })
    }
}

/// Checks one of our completions.
pub(super) fn expect_host_wc(
    wc: &WorkCompletion,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: Option<usize>,
    qpn: u32,
) -> Result<(), String> {
    let ok = wc.status == WcStatus::Success
        && wc.wr_id == wr_id
        && wc.opcode == opcode
        && wc.qp_num == qpn
        && byte_len.is_none_or(|l| l == wc.byte_len as usize);
    if !ok {
        return fail(format!(
            "softverbs completion {wc:?}, expected wr_id {wr_id} {opcode:?} len {byte_len:?}"
        ));
    }
    Ok(())
}

/// Checks one of the guest's completions.
pub(super) fn expect_guest_wc(
    wc: &Reply,
    wr_id: u64,
    opcode: u64,
    byte_len: Option<usize>,
) -> Result<(), String> {
    let n = |k| GuestPeer::num(wc, k);
    let ok = n("status")? == 0
        && n("wr_id")? == wr_id
        && n("opcode")? == opcode
        && byte_len.is_none_or(|l| Some(l) == n("byte_len").ok().map(|b| b as usize));
    if !ok {
        return fail(format!(
            "rxe completion {wc:?}, expected wr_id {wr_id} opcode {opcode} len {byte_len:?}"
        ));
    }
    Ok(())
}

pub(super) fn guest_check(
    peer: &mut GuestPeer,
    offset: usize,
    len: usize,
    seed: u64,
) -> Result<(), String> {
    let r = peer.call(&format!("check offset={offset} length={len} seed={seed}"))?;
    if GuestPeer::num(&r, "match")? != 1 {
        return fail(format!(
            "rxe side: {len} bytes differ from what was sent, first at byte {:?}",
            r.get("first_diff")
        ));
    }
    Ok(())
}

pub(super) fn host_check(host: &Host, offset: usize, len: usize, seed: u64) -> Result<(), String> {
    check_landed(&host.read(offset, len + GUARD_BYTES)?, len, seed)
}

/// Checks that `got` (softverbs memory, zeroed before the message) starts with the `len`
/// bytes of pattern `seed` and holds only zeros after them.
pub(super) fn check_landed(got: &[u8], len: usize, seed: u64) -> Result<(), String> {
    let want = lab_pattern(seed, len);
    if got[..len] != want[..] {
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        return fail(format!(
            "softverbs side: {len} bytes differ from what was sent, first at byte {at:?}"
        ));
    }
    if got[len..].iter().any(|&b| b != 0) {
        return fail(format!(
            "softverbs side: bytes past the {len}-byte message were written"
        ));
    }
    Ok(())
}

/// Runs `verb` in `dir` at path MTU `mtu` for every size; `Ok` says what was covered.
pub fn run(
    env: &LabEnv,
    device: &str,
    transport: Transport,
    verb: Verb,
    dir: Direction,
    mtu: u32,
) -> Result<String, String> {
    let (mut host, mut peer) = connect_transport(env, device, mtu, transport)?;
    match verb {
        Verb::CmpSwap | Verb::FetchAdd => {
            atomics(&host, &mut peer, verb, dir)?;
            return Ok("compare match and mismatch / add with wrap-around, 8 B".into());
        }
        _ => {}
    }
    let mut list = sizes(mtu as usize);
    if transport == Transport::Uc && dir == Direction::SoftverbsToRxe {
        // softverbs sends faster than a TCG guest on a loaded host drains its NIC ring: a
        // 1024-frame UC message lost frames in 3 of 3 attempts at load 11, and UC never
        // resends. 64 KiB (64 packets) is the ping-pongs' UC limit too; rxe -> softverbs
        // still carries 1 MiB.
        for len in &mut list {
            *len = (*len).min(UC_TO_RXE_MAX);
        }
    }
    let mut retried = Vec::new();
    for (i, &len) in list.iter().enumerate() {
        let step = Step {
            verb,
            len,
            wr_id: 100 + i as u64,
            seed: (verb as u64) * 16 + i as u64 + 1,
            imm: 0x1234_5600 | i as u32,
        };
        for attempt in 1.. {
            let guest_qpn = GuestPeer::num(&peer.info, "qpn")? as u32;
            let our_qpn = host.qp.qp_num();
            let outcome = match dir {
                Direction::SoftverbsToRxe => {
                    let recv_wait = match transport {
                        Transport::Uc => UC_RECV_WAIT,
                        _ => WAIT,
                    };
                    softverbs_requests(&host, &mut peer, step, guest_qpn, recv_wait)
                }
                Direction::RxeToSoftverbs => {
                    rxe_requests(&host, &mut peer, step, our_qpn, guest_qpn)
                }
            };
            match outcome {
                Ok(()) => break,
                // UC never resends: a frame the lab link lost (a busy host or guest drops
                // some from a full socket buffer) loses its message, which is correct UC
                // behaviour. The step is run again on a fresh QP pair, and the retry is
                // reported; a real fault repeats on every attempt.
                Err(e) if transport == Transport::Uc && attempt < UC_ATTEMPTS => {
                    retried.push(format!("{len} B retried after: {e}"));
                    drop(peer);
                    (host, peer) = connect_transport(env, device, mtu, transport)?;
                }
                Err(e) => return Err(format!("{len} B: {e}")),
            }
        }
    }
    let sizes = list
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("/");
    Ok(if retried.is_empty() {
        format!("sizes {sizes}")
    } else {
        format!("sizes {sizes}; {}", retried.join("; "))
    })
}

fn softverbs_requests(
    host: &Host,
    peer: &mut GuestPeer,
    step: Step,
    guest_qpn: u32,
    recv_wait: Duration,
) -> Result<(), String> {
    let Step {
        verb,
        len,
        wr_id,
        seed,
        imm,
    } = step;
    let our_qpn = host.qp.qp_num();
    let remote = Host::remote_of(peer)?;
    let data = lab_pattern(seed, len);
    let recv_len = (len + GUARD_BYTES).min(BUF_BYTES);
    peer.call(&format!("zero offset=0 length={recv_len}"))?;
    host.write(0, &data)?;
    let consumes_recv = matches!(verb, Verb::Send | Verb::SendImm | Verb::WriteImm);
    if consumes_recv {
        peer.call(&format!(
            "post_recv wr_id={wr_id} offset=0 length={recv_len}"
        ))?;
    }
    let sg = host.sges(0, len)?;
    let wr = match verb {
        Verb::Send => SendWr::send(wr_id, sg),
        Verb::SendImm => SendWr::send_with_imm(wr_id, sg, imm),
        Verb::Write | Verb::WriteImm | Verb::Read => SendWr {
            opcode: match verb {
                Verb::Write => WrOpcode::RdmaWrite,
                Verb::WriteImm => WrOpcode::RdmaWriteWithImm,
                _ => WrOpcode::RdmaRead,
            },
            imm_data: imm,
            remote,
            ..SendWr::send(wr_id, sg)
        },
        Verb::CmpSwap | Verb::FetchAdd => return fail("atomics are run by `atomics`"),
    };
    if verb == Verb::Read {
        // READ goes the other way: the guest's bytes land in ours.
        peer.call(&format!("fill offset=0 length={len} seed={seed}"))?;
        host.write(0, &vec![0u8; recv_len])?;
    }
    host.post_send(wr)?;
    let (opcode, byte_len) = match verb {
        Verb::Read => (WcOpcode::RdmaRead, Some(len)),
        Verb::Write | Verb::WriteImm => (WcOpcode::RdmaWrite, None),
        _ => (WcOpcode::Send, None),
    };
    expect_host_wc(&host.poll()?, wr_id, opcode, byte_len, our_qpn)?;
    if verb == Verb::Read {
        return host_check(host, 0, len, seed);
    }
    if consumes_recv {
        let wc = peer.call(&format!("poll timeout_ms={}", recv_wait.as_millis()))?;
        let opcode = if verb == Verb::WriteImm {
            IBV_WC_RECV_RDMA_WITH_IMM
        } else {
            IBV_WC_RECV
        };
        expect_guest_wc(&wc, wr_id, opcode, Some(len))?;
        let flags = GuestPeer::num(&wc, "wc_flags")?;
        let with_imm = flags & IBV_WC_WITH_IMM != 0;
        if with_imm != verb.has_imm() {
            return fail(format!("rxe receive flags {flags:#x} for {}", verb.name()));
        }
        if verb.has_imm() && GuestPeer::num(&wc, "imm")? != u64::from(imm.swap_bytes()) {
            return fail(format!(
                "rxe received immediate {:?}, sent {imm:#x}",
                wc.get("imm")
            ));
        }
        if GuestPeer::num(&wc, "qp_num")? != u64::from(guest_qpn) {
            return fail(format!("rxe receive on QP {:?}", wc.get("qp_num")));
        }
    }
    guest_check(peer, 0, len, seed)
}

fn rxe_requests(
    host: &Host,
    peer: &mut GuestPeer,
    step: Step,
    our_qpn: u32,
    guest_qpn: u32,
) -> Result<(), String> {
    let Step {
        verb,
        len,
        wr_id,
        seed,
        imm,
    } = step;
    let recv_len = (len + GUARD_BYTES).min(BUF_BYTES);
    let consumes_recv = matches!(verb, Verb::Send | Verb::SendImm | Verb::WriteImm);
    if verb == Verb::Read {
        host.write(0, &lab_pattern(seed, len))?;
        peer.call(&format!("zero offset=0 length={recv_len}"))?;
    } else {
        host.write(0, &vec![0u8; recv_len])?;
        peer.call(&format!("fill offset=0 length={len} seed={seed}"))?;
    }
    if consumes_recv {
        let posted = if verb == Verb::WriteImm { 0 } else { recv_len };
        host.post_recv(wr_id, 0, posted)?;
    }
    let (raddr, rkey) = (host.mr.addr(), host.mr.rkey());
    peer.call(&format!(
        "post_send wr_id={wr_id} op={} offset=0 length={len} raddr={raddr} rkey={rkey} imm={}",
        verb.name(),
        imm.swap_bytes()
    ))?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    let (opcode, byte_len) = match verb {
        Verb::Read => (IBV_WC_RDMA_READ, Some(len)),
        Verb::Write | Verb::WriteImm => (IBV_WC_RDMA_WRITE, None),
        _ => (IBV_WC_SEND, None),
    };
    expect_guest_wc(&wc, wr_id, opcode, byte_len)?;
    if verb == Verb::Read {
        return guest_check(peer, 0, len, seed);
    }
    if consumes_recv {
        let wc = host.poll()?;
        let opcode = if verb == Verb::WriteImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        expect_host_wc(&wc, wr_id, opcode, Some(len), our_qpn)?;
        if wc.wc_flags.contains(WcFlags::WITH_IMM) != verb.has_imm()
            || (verb.has_imm() && wc.imm_data != imm)
        {
            return fail(format!("softverbs receive {wc:?}, sent immediate {imm:#x}"));
        }
        if wc.src_qp != guest_qpn {
            return fail(format!("softverbs receive from QP {:#x}", wc.src_qp));
        }
    }
    host_check(host, 0, len, seed)
}

/// Atomics: CMP_SWAP that matches then one that does not; FETCH_ADD across 2^64.
fn atomics(host: &Host, peer: &mut GuestPeer, verb: Verb, dir: Direction) -> Result<(), String> {
    let original: u64 = 0xfeed_face_cafe_beef;
    let steps: Vec<(u64, u64, u64, u64)> = match verb {
        // (compare_add, swap, expected original, expected new value)
        Verb::CmpSwap => vec![
            (
                original,
                0x0123_4567_89ab_cdef,
                original,
                0x0123_4567_89ab_cdef,
            ),
            (original, 42, 0x0123_4567_89ab_cdef, 0x0123_4567_89ab_cdef),
        ],
        _ => vec![(5, 0, u64::MAX - 1, 3), (u64::MAX, 0, 3, 2)],
    };
    let start = if verb == Verb::CmpSwap {
        original
    } else {
        u64::MAX - 1
    };
    let our_qpn = host.qp.qp_num();
    match dir {
        Direction::SoftverbsToRxe => {
            let remote = RemoteAddr {
                remote_addr: Host::remote_of(peer)?.remote_addr + ATOMIC_TARGET as u64,
                ..Host::remote_of(peer)?
            };
            peer.call(&format!("write_u64 offset={ATOMIC_TARGET} value={start}"))?;
            for (i, (compare_add, swap, want_old, want_new)) in steps.into_iter().enumerate() {
                let wr_id = 200 + i as u64;
                host.write(ATOMIC_RESULT, &[0xa5; 8])?;
                host.post_send(SendWr {
                    opcode: if verb == Verb::CmpSwap {
                        WrOpcode::AtomicCmpAndSwp
                    } else {
                        WrOpcode::AtomicFetchAndAdd
                    },
                    remote,
                    compare_add,
                    swap,
                    ..SendWr::send(wr_id, host.sges(ATOMIC_RESULT, 8)?)
                })?;
                let opcode = if verb == Verb::CmpSwap {
                    WcOpcode::CompSwap
                } else {
                    WcOpcode::FetchAdd
                };
                expect_host_wc(&host.poll()?, wr_id, opcode, Some(8), our_qpn)?;
                let old = host.u64_at(ATOMIC_RESULT)?;
                let new = GuestPeer::num(
                    &peer.call(&format!("read_u64 offset={ATOMIC_TARGET}"))?,
                    "value",
                )?;
                if (old, new) != (want_old, want_new) {
                    return fail(format!(
                        "step {i}: original {old:#x} (want {want_old:#x}), target now {new:#x} (want {want_new:#x})"
                    ));
                }
            }
        }
        Direction::RxeToSoftverbs => {
            host.write(ATOMIC_TARGET, &start.to_le_bytes())?;
            let raddr = host.mr.addr() + ATOMIC_TARGET as u64;
            let rkey = host.mr.rkey();
            for (i, (compare_add, swap, want_old, want_new)) in steps.into_iter().enumerate() {
                let wr_id = 200 + i as u64;
                peer.call(&format!("write_u64 offset={ATOMIC_RESULT} value=0"))?;
                let (cmp, add) = if verb == Verb::CmpSwap {
                    (compare_add, 0)
                } else {
                    (0, compare_add)
                };
                peer.call(&format!(
                    "post_send wr_id={wr_id} op={} offset={ATOMIC_RESULT} length=8 raddr={raddr} rkey={rkey} compare={cmp} swap={swap} add={add}",
                    verb.name()
                ))?;
                let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
                let opcode = if verb == Verb::CmpSwap {
                    IBV_WC_COMP_SWAP
                } else {
                    IBV_WC_FETCH_ADD
                };
                expect_guest_wc(&wc, wr_id, opcode, None)?;
                let old = GuestPeer::num(
                    &peer.call(&format!("read_u64 offset={ATOMIC_RESULT}"))?,
                    "value",
                )?;
                let new = host.u64_at(ATOMIC_TARGET)?;
                if (old, new) != (want_old, want_new) {
                    return fail(format!(
                        "step {i}: original {old:#x} (want {want_old:#x}), target now {new:#x} (want {want_new:#x})"
                    ));
                }
            }
        }
    }
    Ok(())
}
