//! UD scenarios against kernel rxe: SEND and SEND_WITH_IMM datagrams of 0, 1, MTU-1 and MTU
//! bytes between a softverbs UD QP and a pyverbs UD QP, in either direction. Besides data and
//! completion fields (byte_len counts the 40-byte GRH area, the GRH flag, src_qp, immediate),
//! each receive's GRH area is checked byte by byte: 20 unused bytes, then the sender's IPv4
//! header with the right addresses, length and checksum. A datagram with a wrong Q_Key must
//! be dropped by the receiver, and one larger than the port MTU refused by softverbs at post.

use std::net::Ipv4Addr;

use softverbs::{Ah, AhAttr, Gid, SendWr, UdDest, VerbsError, WcFlags, WcOpcode, WrOpcode};

use super::guest_pair::{
    check_landed, connect_transport, expect_guest_wc, expect_host_wc, fail, guest_check, Host,
    GUARD_BYTES, WAIT,
};
use super::guest_peer::GuestPeer;
use super::ibv_wc::{IBV_WC_GRH, IBV_WC_RECV, IBV_WC_SEND, IBV_WC_WITH_IMM};
use super::lab_env::LabEnv;
use super::pattern::lab_pattern;
use super::scenario::{Direction, Step, Transport, Verb};
use crate::ibv_pingpong::{GRH_BYTES, IBV_UD_QKEY};

/// A Q_Key neither QP has: datagrams carrying it must be dropped.
const WRONG_QKEY: u32 = 0x2222_2222;

/// Datagram sizes at path MTU `mtu` (UD messages are at most one packet).
pub fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu]
}

/// Bytes of the IPv4 packet that carries a UD SEND of `len` bytes: IPv4, UDP, BTH, DETH,
/// the immediate if any, the payload padded to 4 bytes, ICRC.
fn ipv4_total_len(len: usize, imm: bool) -> usize {
    20 + 8 + 12 + 8 + if imm { 4 } else { 0 } + len.div_ceil(4) * 4 + 4
}

/// Checks a GRH area as rxe and softverbs fill it for an IPv4 sender.
pub(super) fn check_grh(
    grh: &[u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    len: usize,
    imm: bool,
) -> Result<(), String> {
    if grh.len() != GRH_BYTES || grh[..20].iter().any(|&b| b != 0) {
        return fail(format!(
            "GRH area {grh:02x?}: the first 20 bytes are not zero"
        ));
    }
    let ip = &grh[20..];
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let checks = [
        (ip[0] == 0x45, "version/IHL is not 0x45"),
        (ip[9] == 17, "protocol is not UDP"),
        (ip[12..16] == src.octets(), "wrong source address"),
        (ip[16..20] == dst.octets(), "wrong destination address"),
        (total == ipv4_total_len(len, imm), "wrong total length"),
        (
            (folded + (folded >> 16)) & 0xffff == 0xffff,
            "bad header checksum",
        ),
    ];
    for (ok, what) in checks {
        if !ok {
            return fail(format!("GRH area IPv4 header {ip:02x?}: {what}"));
        }
    }
    Ok(())
}

fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// An AH on our PD towards the guest.
fn guest_ah(host: &Host, env: &LabEnv) -> Result<Ah, String> {
    host.pd
        .create_ah(&AhAttr {
            dgid: Gid::from(env.guest_ip),
            sgid_index: 1,
            port_num: 1,
            hop_limit: 64,
            ..AhAttr::default()
        })
        .map_err(|e| e.to_string())
}

/// Runs UD `verb` (SEND or SEND_IMM) in `dir` at path MTU `mtu` for every size.
pub fn run(
    env: &LabEnv,
    device: &str,
    verb: Verb,
    dir: Direction,
    mtu: u32,
) -> Result<String, String> {
    let (host, mut peer) = connect_transport(env, device, mtu, Transport::Ud)?;
    let ah = guest_ah(&host, env)?;
    let dest = ah.dest(GuestPeer::num(&peer.info, "qpn")? as u32, IBV_UD_QKEY);
    let list = sizes(mtu as usize);
    for (i, &len) in list.iter().enumerate() {
        let step = Step {
            verb,
            len,
            wr_id: 300 + i as u64,
            seed: 40 + (verb as u64) * 16 + i as u64,
            imm: 0x0bad_0000 | i as u32,
        };
        match dir {
            Direction::SoftverbsToRxe => softverbs_sends(env, &host, &mut peer, dest, step),
            Direction::RxeToSoftverbs => rxe_sends(env, &host, &mut peer, step),
        }
        .map_err(|e| format!("{len} B: {e}"))?;
    }
    let extra = match dir {
        Direction::SoftverbsToRxe => {
            // One byte over the port MTU: refused at post, nothing sent.
            let port_mtu = host
                .qp
                .pd()
                .context()
                .query_port(1)
                .map_err(|e| e.to_string())?
                .active_mtu
                .bytes() as usize;
            let wr = SendWr {
                ud: Some(dest),
                ..SendWr::send(1, host.sges(0, port_mtu + 1)?)
            };
            match host.qp.post_send(&[wr]) {
                Err(e) if matches!(e.error, VerbsError::InvalidArgument(_)) => {}
                other => {
                    return fail(format!(
                        "a {} B datagram (port MTU + 1) was not refused with EINVAL: {other:?}",
                        port_mtu + 1
                    ))
                }
            }
            wrong_qkey_dropped_by_rxe(&host, &mut peer, dest)?;
            format!("; port MTU+1 ({} B) refused with EINVAL", port_mtu + 1)
        }
        Direction::RxeToSoftverbs => {
            wrong_qkey_dropped_by_softverbs(&host, &mut peer)?;
            String::new()
        }
    };
    Ok(format!(
        "sizes {}, GRH bytes and src_qp checked; wrong Q_Key dropped{extra}",
        list.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("/")
    ))
}

fn softverbs_sends(
    env: &LabEnv,
    host: &Host,
    peer: &mut GuestPeer,
    dest: UdDest,
    step: Step,
) -> Result<(), String> {
    let Step {
        verb,
        len,
        wr_id,
        seed,
        imm,
    } = step;
    let recv_len = GRH_BYTES + len + GUARD_BYTES;
    peer.call(&format!("zero offset=0 length={recv_len}"))?;
    peer.call(&format!(
        "post_recv wr_id={wr_id} offset=0 length={recv_len}"
    ))?;
    host.write(0, &lab_pattern(seed, len))?;
    let wr = SendWr {
        opcode: if verb.has_imm() {
            WrOpcode::SendWithImm
        } else {
            WrOpcode::Send
        },
        imm_data: imm,
        ud: Some(dest),
        ..SendWr::send(wr_id, host.sges(0, len)?)
    };
    host.post_send(wr)?;
    expect_host_wc(&host.poll()?, wr_id, WcOpcode::Send, None, host.qp.qp_num())?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, wr_id, IBV_WC_RECV, Some(GRH_BYTES + len))?;
    let flags = GuestPeer::num(&wc, "wc_flags")?;
    let want_flags = IBV_WC_GRH | if verb.has_imm() { IBV_WC_WITH_IMM } else { 0 };
    if flags & (IBV_WC_GRH | IBV_WC_WITH_IMM) != want_flags {
        return fail(format!(
            "rxe receive flags {flags:#x}, want {want_flags:#x}"
        ));
    }
    if GuestPeer::num(&wc, "src_qp")? != u64::from(host.qp.qp_num()) {
        return fail(format!("rxe receive from QP {:?}", wc.get("src_qp")));
    }
    if verb.has_imm() && GuestPeer::num(&wc, "imm")? != u64::from(imm.swap_bytes()) {
        return fail(format!(
            "rxe received immediate {:?}, sent {imm:#x}",
            wc.get("imm")
        ));
    }
    let grh = peer.call(&format!("hex offset=0 length={GRH_BYTES}"))?;
    let grh = hex_bytes(grh.get("hex").map(String::as_str).unwrap_or(""))?;
    check_grh(&grh, env.host_ip, env.guest_ip, len, verb.has_imm())?;
    guest_check(peer, GRH_BYTES, len, seed)?;
    let tail = peer.call(&format!(
        "check_zero offset={} length={GUARD_BYTES}",
        GRH_BYTES + len
    ))?;
    if GuestPeer::num(&tail, "zero")? != 1 {
        return fail("rxe side: bytes past the datagram were written");
    }
    Ok(())
}

fn rxe_sends(env: &LabEnv, host: &Host, peer: &mut GuestPeer, step: Step) -> Result<(), String> {
    let Step {
        verb,
        len,
        wr_id,
        seed,
        imm,
    } = step;
    let recv_len = GRH_BYTES + len + GUARD_BYTES;
    host.write(0, &vec![0u8; recv_len])?;
    host.post_recv(wr_id, 0, recv_len)?;
    peer.call(&format!("fill offset=0 length={len} seed={seed}"))?;
    peer.call(&format!(
        "post_send wr_id={wr_id} op={} offset=0 length={len} imm={}",
        verb.name(),
        imm.swap_bytes()
    ))?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, wr_id, IBV_WC_SEND, None)?;
    let wc = host.poll()?;
    expect_host_wc(
        &wc,
        wr_id,
        WcOpcode::Recv,
        Some(GRH_BYTES + len),
        host.qp.qp_num(),
    )?;
    let guest_qpn = GuestPeer::num(&peer.info, "qpn")? as u32;
    if !wc.wc_flags.contains(WcFlags::GRH)
        || wc.wc_flags.contains(WcFlags::WITH_IMM) != verb.has_imm()
        || (verb.has_imm() && wc.imm_data != imm)
        || wc.src_qp != guest_qpn
    {
        return fail(format!(
            "softverbs receive {wc:?}: want GRH flag, src_qp {guest_qpn:#x}, immediate {imm:#x} if any"
        ));
    }
    let got = host.read(0, recv_len)?;
    check_grh(
        &got[..GRH_BYTES],
        env.guest_ip,
        env.host_ip,
        len,
        verb.has_imm(),
    )?;
    check_landed(&got[GRH_BYTES..], len, seed)
}

/// We send a datagram with a Q_Key rxe's QP does not have, then a right one: rxe must have
/// dropped the first, so its one posted receive holds the second.
fn wrong_qkey_dropped_by_rxe(
    host: &Host,
    peer: &mut GuestPeer,
    dest: UdDest,
) -> Result<(), String> {
    let len = 16;
    peer.call(&format!("zero offset=0 length={}", GRH_BYTES + len))?;
    peer.call(&format!(
        "post_recv wr_id=900 offset=0 length={}",
        GRH_BYTES + len
    ))?;
    for (wr_id, seed, qkey) in [(901, 91, WRONG_QKEY), (902, 92, IBV_UD_QKEY)] {
        host.write(0, &lab_pattern(seed, len))?;
        host.post_send(SendWr {
            ud: Some(UdDest {
                remote_qkey: qkey,
                ..dest
            }),
            ..SendWr::send(wr_id, host.sges(0, len)?)
        })?;
        expect_host_wc(&host.poll()?, wr_id, WcOpcode::Send, None, host.qp.qp_num())?;
    }
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, 900, IBV_WC_RECV, Some(GRH_BYTES + len))?;
    guest_check(peer, GRH_BYTES, len, 92).map_err(|e| format!("after a wrong-Q_Key datagram: {e}"))
}

/// The same the other way: rxe sends with a wrong Q_Key, then the right one.
fn wrong_qkey_dropped_by_softverbs(host: &Host, peer: &mut GuestPeer) -> Result<(), String> {
    let len = 16;
    host.write(0, &vec![0u8; GRH_BYTES + len])?;
    host.post_recv(900, 0, GRH_BYTES + len)?;
    for (wr_id, seed, qkey) in [(901, 91, WRONG_QKEY), (902, 92, IBV_UD_QKEY)] {
        peer.call(&format!("fill offset=0 length={len} seed={seed}"))?;
        peer.call(&format!(
            "post_send wr_id={wr_id} op=SEND offset=0 length={len} qkey={qkey}"
        ))?;
        let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
        expect_guest_wc(&wc, wr_id, IBV_WC_SEND, None)?;
    }
    let wc = host.poll()?;
    expect_host_wc(
        &wc,
        900,
        WcOpcode::Recv,
        Some(GRH_BYTES + len),
        host.qp.qp_num(),
    )?;
    let got = host.read(GRH_BYTES, len)?;
    if got != lab_pattern(92, len) {
        return fail(
            "after a wrong-Q_Key datagram from rxe, the receive does not hold the right one",
        );
    }
    Ok(())
}
