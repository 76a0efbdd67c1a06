//! An SRQ on the softverbs side fed by rxe senders: two softverbs RC QPs share one SRQ, each
//! connected to its own pyverbs QP in the guest, and both guests send interleaved messages of
//! several sizes. Every receive must complete on the QP its sender is connected to, in that
//! sender's order, with the sender's QP as src_qp, and its buffer (one per SRQ WR, used once)
//! must hold exactly the bytes sent.

use softverbs::{
    AccessFlags, Context, QpCap, RdmaBuffer, RecvWr, SrqAttr, WcOpcode, WcStatus, WorkCompletion,
};

use super::guest_pair::{check_landed, expect_guest_wc, fail, pair_with_guest, GUARD_BYTES, WAIT};
use super::guest_peer::GuestPeer;
use super::ibv_wc::IBV_WC_SEND;
use super::lab_env::LabEnv;
use super::scenario::Transport;

/// Senders in the guest (each its own QP and ssh session).
const SENDERS: usize = 2;
/// Messages each sender sends.
const MESSAGES: usize = 4;
/// Bytes of each SRQ WR's buffer slot.
const SLOT_BYTES: usize = 3 * 4096 + 2 * GUARD_BYTES;

/// Message `k`'s size at path MTU `mtu`: below, at and above one packet.
fn size_of(k: usize, mtu: usize) -> usize {
    [1, mtu, mtu + 1, 2 * mtu + 7][k % 4]
}

fn seed_of(sender: usize, k: usize) -> u64 {
    (100 + sender * 16 + k) as u64
}

/// Runs the scenario at path MTU `mtu` (rxe is always the sender).
pub fn run(env: &LabEnv, device: &str, mtu: u32) -> Result<String, String> {
    let e = |x: softverbs::VerbsError| x.to_string();
    let ctx = Context::open(device).map_err(e)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(256).map_err(e)?;
    let wrs = SENDERS * MESSAGES;
    let buffer = RdmaBuffer::new(wrs * SLOT_BYTES).ok_or("buffer allocation failed")?;
    let mr = pd.register(buffer, AccessFlags::LOCAL_WRITE).map_err(e)?;
    let (srq, _) = pd
        .create_srq(&SrqAttr {
            max_wr: wrs as u32,
            max_sge: 1,
            srq_limit: 0,
        })
        .map_err(e)?;
    let mut qps = Vec::new();
    let mut peers = Vec::new();
    for _ in 0..SENDERS {
        let qp = pd
            .qp_builder()
            .srq(&srq)
            .cap(QpCap {
                max_send_wr: 4,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .build(&cq, &cq)
            .map_err(e)?;
        peers.push(pair_with_guest(
            env,
            &qp,
            Transport::Rc,
            mtu,
            AccessFlags::empty(),
        )?);
        qps.push(qp);
    }
    let slots: Vec<RecvWr> = (0..wrs)
        .map(|slot| {
            Ok(RecvWr {
                wr_id: slot as u64,
                sg_list: vec![mr.sge(slot * SLOT_BYTES, SLOT_BYTES as u32).map_err(e)?],
            })
        })
        .collect::<Result<_, String>>()?;
    srq.post_recv(&slots).map_err(|x| x.error.to_string())?;
    // Interleaved: message k of every sender before message k + 1 of any.
    for k in 0..MESSAGES {
        for (s, peer) in peers.iter_mut().enumerate() {
            let len = size_of(k, mtu as usize);
            peer.call(&format!(
                "fill offset={} length={len} seed={}",
                k * SLOT_BYTES,
                seed_of(s, k)
            ))?;
            peer.call(&format!(
                "post_send wr_id={k} op=SEND offset={} length={len}",
                k * SLOT_BYTES
            ))?;
        }
    }
    for (s, peer) in peers.iter_mut().enumerate() {
        for k in 0..MESSAGES {
            let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
            expect_guest_wc(&wc, k as u64, IBV_WC_SEND, None)
                .map_err(|x| format!("sender {s}: {x}"))?;
        }
    }
    let mut next = [0usize; SENDERS];
    let mut used = vec![false; wrs];
    for _ in 0..wrs {
        let wc = cq.poll_one(WAIT).map_err(e)?;
        let s = qps
            .iter()
            .position(|qp| qp.qp_num() == wc.qp_num)
            .ok_or_else(|| format!("completion on an unknown QP: {wc:?}"))?;
        let k = next[s];
        next[s] += 1;
        check_receive(&wc, &peers[s], s, k, mtu as usize, &mut used)?;
        let mut got = vec![0u8; SLOT_BYTES];
        mr.read(wc.wr_id as usize * SLOT_BYTES, &mut got)
            .map_err(e)?;
        check_landed(&got, size_of(k, mtu as usize), seed_of(s, k))
            .map_err(|x| format!("sender {s} message {k}, SRQ slot {}: {x}", wc.wr_id))?;
    }
    Ok(format!(
        "{SENDERS} rxe senders x {MESSAGES} messages ({}) into one SRQ of {wrs} WRs; order, QP, src_qp, bytes checked",
        (0..MESSAGES)
            .map(|k| format!("{} B", size_of(k, mtu as usize)))
            .collect::<Vec<_>>()
            .join("/")
    ))
}

fn check_receive(
    wc: &WorkCompletion,
    peer: &GuestPeer,
    s: usize,
    k: usize,
    mtu: usize,
    used: &mut [bool],
) -> Result<(), String> {
    let len = size_of(k, mtu);
    let slot = wc.wr_id as usize;
    let src = GuestPeer::num(&peer.info, "qpn")? as u32;
    if wc.status != WcStatus::Success
        || wc.opcode != WcOpcode::Recv
        || wc.byte_len as usize != len
        || wc.src_qp != src
        || slot >= used.len()
        || used[slot]
    {
        return fail(format!(
            "sender {s} message {k}: {wc:?}; want a {len} B receive from QP {src:#x} in an unused slot"
        ));
    }
    used[slot] = true;
    Ok(())
}
