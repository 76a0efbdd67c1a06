//! One softverbs QP on the lab link paired with a peer.py QP on rxe0 in the guest
//! ([`Host`] and [`GuestPeer`]), and the checks every scenario makes: both sides' completions
//! and the bytes that landed (with a guard of untouched bytes behind them).

use std::net::Ipv6Addr;
use std::time::Duration;

use softverbs::{
    AccessFlags, Context, Cq, Gid, Mr, Mtu, Pd, Qp, QpCap, RcConnectOptions, RcEndpoint,
    RdmaBuffer, RecvWr, RemoteAddr, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};

use super::guest_peer::{GuestPeer, Reply};
use super::lab_env::LabEnv;
use super::pattern::lab_pattern;
use super::scenario::Transport;
use crate::ibv_pingpong::IBV_UD_QKEY;

/// Bytes of each side's buffer: the largest message plus room behind it.
pub const BUF_BYTES: usize = (1 << 20) + 4096;
/// Bytes past a received message that must stay untouched.
pub(super) const GUARD_BYTES: usize = 64;
/// Local ACK timeout exponent of both QPs: about 1 s, generous for rxe under TCG.
pub const LAB_QP_TIMEOUT: u8 = 18;
/// Longest wait for any one completion or guest reply.
pub(super) const WAIT: Duration = Duration::from_secs(60);

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

    pub(super) fn u64_at(&self, offset: usize) -> Result<u64, String> {
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
