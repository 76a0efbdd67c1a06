//! The UC transport, sans I/O: packets are handed from one QP to the other by the test, so
//! exactly chosen packets can be lost. A lost packet drops its whole message silently (no
//! completion, no corruption of the next message, the receive WQE used again); sends complete
//! as soon as their packets are out; nothing is ever acknowledged.

use softverbs_api::{
    qp::AhAttr, AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, QpType, RecvWr, SendWr,
    WcOpcode, WcStatus,
};
use softverbs_emu::memory::{MrTable, RdmaBuffer};
use softverbs_emu::sim::{FaultConfig, Side, SimPair};
use softverbs_emu::transport::{CompletionTarget, Env, OutPacket, Outputs, TransportQp};
use softverbs_emu::wire::RoceRepr;
use softverbs_testkit::qp_cap;
use softverbs_testkit::sge;

const PD: u32 = 1;
const MTU: usize = 256;

struct Node {
    mem: MrTable,
    qp: TransportQp,
    buf: RdmaBuffer,
    lkey: u32,
}

fn node(qpn: u32, peer_qpn: u32, peer_ip: [u8; 4]) -> Node {
    node_with_mtu(qpn, peer_qpn, peer_ip, Mtu::Mtu256)
}

fn node_with_mtu(qpn: u32, peer_qpn: u32, peer_ip: [u8; 4], path_mtu: Mtu) -> Node {
    let cap = qp_cap(16, 1);
    let mem = MrTable::new(8);
    let buf = RdmaBuffer::new(64 * 1024).unwrap();
    let keys = mem
        .register(
            PD,
            buf.addr(),
            buf.len() as u64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let mut qp = TransportQp::new(qpn, QpType::Uc, PD, false, cap);
    let attr = QpAttr {
        qp_state: QpState::Rts,
        path_mtu,
        dest_qp_num: peer_qpn,
        rq_psn: 500,
        sq_psn: 500,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ah_attr: AhAttr {
            dgid: Gid::from(std::net::Ipv4Addr::from(peer_ip)),
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::SQ_PSN
        | QpAttrMask::ACCESS_FLAGS;
    qp.apply_modify(&attr, mask, &mut Outputs::default());
    Node {
        mem,
        qp,
        buf,
        lkey: keys.lkey,
    }
}

fn pair() -> (Node, Node) {
    (
        node(0x11, 0x12, [127, 0, 0, 2]),
        node(0x12, 0x11, [127, 0, 0, 1]),
    )
}

/// Sends `data` (SEND_WITH_IMM carrying `imm`) from `a`: returns the packets and checks the
/// send completed at once.
fn send(a: &mut Node, wr_id: u64, data: &[u8], imm: u32) -> Vec<OutPacket> {
    a.buf.write(0, data).unwrap();
    let sge = sge(a.buf.addr(), data.len() as u32, a.lkey);
    let mut out = Outputs::default();
    let env = Env::new(&a.mem, 0);
    a.qp.post_send(
        &[SendWr::send_with_imm(wr_id, vec![sge], imm)],
        &env,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.completions.len(), 1, "a UC send completes once sent");
    let wc = out.completions[0].wc;
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(wc.byte_len as usize, data.len());
    assert_eq!(a.qp.timers.retransmit_at_ns, None, "no ACK timer on UC");
    out.packets
}

fn post_recv(b: &mut Node, wr_id: u64, slot: usize, len: u32) {
    let sge = sge(b.buf.addr() + (slot * 4096) as u64, len, b.lkey);
    b.qp.post_recv(
        &[RecvWr {
            wr_id,
            sg_list: vec![sge],
        }],
        &mut Outputs::default(),
    )
    .unwrap();
}

/// Hands `packets` to `b`; returns what `b` produced.
fn deliver(b: &mut Node, packets: &[&OutPacket]) -> Outputs {
    let mut out = Outputs::default();
    for p in packets {
        let (repr, _) = RoceRepr::parse(&p.bytes).unwrap();
        let env = Env::new(&b.mem, 0);
        b.qp.on_packet(&repr, &env, &mut out);
    }
    out
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn small_payloads_travel_in_their_packet_and_large_ones_stay_in_memory_until_sent() {
    let mut a = node_with_mtu(0x11, 0x12, [127, 0, 0, 2], Mtu::Mtu1024);
    let msg = data(5, 1024 + 100);
    a.buf.write(0, &msg).unwrap();
    let sge = sge(a.buf.addr(), msg.len() as u32, a.lkey);
    let mut out = Outputs::default();
    // As the engine drives it: payloads may be left in memory for the send.
    let env = Env {
        payload_by_reference: true,
        ..Env::new(&a.mem, 0)
    };
    a.qp.post_send(&[SendWr::send(1, vec![sge])], &env, &mut out)
        .unwrap();
    let [first, last] = &out.packets[..] else {
        panic!("{} packets for 1,124 bytes at MTU 1024", out.packets.len());
    };
    // 1,024 bytes: read from the MR as the packet leaves, right after the 12-byte BTH.
    let left = first
        .payload
        .expect("a full packet's payload stays in memory");
    assert_eq!(left.at, 12);
    // 100 bytes: copied now, and the packet is whole.
    assert_eq!(last.payload, None);
    let (repr, _) = RoceRepr::parse(&last.bytes).unwrap();
    assert_eq!(repr.payload, &msg[1024..]);
}

fn slot(b: &Node, slot: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    b.buf.read(slot * 4096, &mut v).unwrap();
    v
}

#[test]
fn a_lost_middle_packet_drops_its_message_only() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, 70, 0, 4096);
    post_recv(&mut b, 71, 1, 4096);
    let first = data(1, 3 * MTU);
    let second = data(2, 3 * MTU - 17);
    let p1 = send(&mut a, 1, &first, 0x1111);
    let p2 = send(&mut a, 2, &second, 0x2222);
    assert_eq!((p1.len(), p2.len()), (3, 3));
    let out = deliver(&mut b, &[&p1[0], &p1[2], &p2[0], &p2[1], &p2[2]]);
    assert!(out.packets.is_empty(), "UC never answers");
    assert_eq!(out.completions.len(), 1, "{:?}", out.completions);
    let wc = out.completions[0].wc;
    assert_eq!(out.completions[0].target, CompletionTarget::Recv);
    // The WQE the dropped message had started on is used again, for the next message.
    assert_eq!(
        (wc.wr_id, wc.status, wc.imm_data),
        (70, WcStatus::Success, 0x2222)
    );
    assert_eq!(wc.byte_len as usize, second.len());
    assert_eq!(
        slot(&b, 0, second.len()),
        second,
        "the next message is intact"
    );
    assert_eq!(b.qp.rq.len(), 1, "WQE 71 is still posted");
    assert!(b.qp.counters.dropped_packets >= 1);
}

#[test]
fn a_lost_first_or_last_packet_drops_the_message_and_the_next_one_lands() {
    for lost in [0usize, 2] {
        let (mut a, mut b) = pair();
        post_recv(&mut b, 80, 0, 4096);
        let first = data(3, 3 * MTU);
        let second = data(4, MTU + 1);
        let p1 = send(&mut a, 1, &first, 1);
        let p2 = send(&mut a, 2, &second, 2);
        let mut wire: Vec<&OutPacket> = p1
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != lost)
            .map(|(_, p)| p)
            .collect();
        wire.extend(p2.iter());
        let out = deliver(&mut b, &wire);
        let got: Vec<_> = out
            .completions
            .iter()
            .map(|c| (c.wc.wr_id, c.wc.imm_data))
            .collect();
        assert_eq!(got, vec![(80, 2)], "lost packet {lost}");
        assert_eq!(slot(&b, 0, second.len()), second, "lost packet {lost}");
    }
}

#[test]
fn a_message_longer_than_the_rc_ack_window_is_sent_whole() {
    // UC has no ACKs, so the RC window of unacknowledged PSNs must not hold it back: a
    // 200-packet message goes out in one post and lands whole.
    let (mut a, mut b) = pair();
    post_recv(&mut b, 80, 0, 64 * 1024);
    let long = data(3, 200 * MTU);
    let packets = send(&mut a, 1, &long, 0x3333);
    assert_eq!(packets.len(), 200);
    let out = deliver(&mut b, &packets.iter().collect::<Vec<_>>());
    assert_eq!(out.completions.len(), 1, "{:?}", out.completions);
    let wc = out.completions[0].wc;
    assert_eq!((wc.wr_id, wc.status), (80, WcStatus::Success));
    assert_eq!(wc.byte_len as usize, long.len());
    assert_eq!(slot(&b, 0, long.len()), long);
}

#[test]
fn no_receive_wqe_drops_silently_without_rnr() {
    let (mut a, mut b) = pair();
    let p1 = send(&mut a, 1, &data(5, 2 * MTU), 5);
    let out = deliver(&mut b, &[&p1[0], &p1[1]]);
    assert!(out.packets.is_empty() && out.completions.is_empty());
    assert_eq!(b.qp.counters.rnr_naks_sent, 0);
    // The QP is still fine: the next message with a WQE lands.
    post_recv(&mut b, 90, 0, 4096);
    let msg = data(6, 10);
    let p2 = send(&mut a, 2, &msg, 6);
    let out = deliver(&mut b, &[&p2[0]]);
    assert_eq!(out.completions.len(), 1);
    assert_eq!(out.completions[0].wc.imm_data, 6);
    assert_eq!(slot(&b, 0, msg.len()), msg);
}

#[test]
fn a_too_small_buffer_drops_the_message_and_keeps_the_qp() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, 95, 0, 100);
    let p1 = send(&mut a, 1, &data(7, 300), 7);
    let out = deliver(&mut b, &p1.iter().collect::<Vec<_>>());
    assert!(out.completions.is_empty(), "{:?}", out.completions);
    assert_eq!(b.qp.state(), QpState::Rts);
    let msg = data(8, 100);
    let p2 = send(&mut a, 2, &msg, 8);
    let out = deliver(&mut b, &[&p2[0]]);
    assert_eq!(out.completions[0].wc.wr_id, 95);
    assert_eq!(slot(&b, 0, 100), msg);
}

#[test]
fn read_and_atomics_are_refused_at_post_time_on_uc() {
    let (mut a, _) = pair();
    let sge = sge(a.buf.addr(), 8, a.lkey);
    for opcode in [
        softverbs_api::WrOpcode::RdmaRead,
        softverbs_api::WrOpcode::AtomicCmpAndSwp,
        softverbs_api::WrOpcode::AtomicFetchAndAdd,
    ] {
        let wr = SendWr {
            opcode,
            ..SendWr::send(1, vec![sge])
        };
        let env = Env::new(&a.mem, 0);
        let e =
            a.qp.post_send(&[wr], &env, &mut Outputs::default())
                .unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, 22), "{opcode:?}");
    }
}

/// Many multi-packet UC messages over a lossy, duplicating, reordering simulated wire: every
/// receive that completes holds exactly the message its immediate names, no message arrives
/// twice, and every receive WQE is accounted for (completed, or flushed at the end).
#[test]
fn under_random_faults_every_completed_receive_is_exact() {
    for seed in 1..=4u64 {
        let faults = FaultConfig {
            loss_per_mille: 100,
            dup_per_mille: 50,
            reorder_per_mille: 50,
            corrupt_per_mille: 10,
            ..FaultConfig::none()
        };
        let attrs = QpAttr {
            sq_psn: 7,
            rq_psn: 7,
            ..QpAttr::default()
        };
        let mut p = SimPair::new(QpType::Uc, seed, faults, Mtu::Mtu256, &attrs);
        const N: usize = 40;
        const LEN: usize = 700; // three packets
        let (src, lkey, _) = p.register(Side::A, N * LEN, AccessFlags::LOCAL_WRITE);
        let (dst, rlkey, _) = p.register(Side::B, N * 1024, AccessFlags::LOCAL_WRITE);
        for k in 0..N {
            p.write(Side::A, src + (k * LEN) as u64, &data(k as u8, LEN));
            let sge = sge(dst + (k * 1024) as u64, 1024, rlkey);
            p.post_recv(
                Side::B,
                &[RecvWr {
                    wr_id: 1000 + k as u64,
                    sg_list: vec![sge],
                }],
            )
            .unwrap();
        }
        for k in 0..N {
            let sge = sge(src + (k * LEN) as u64, LEN as u32, lkey);
            p.post_send(
                Side::A,
                &[SendWr::send_with_imm(k as u64, vec![sge], k as u32)],
            )
            .unwrap();
            p.run(10_000);
        }
        p.run(100_000);
        let sends = &p.a.completions;
        assert_eq!(sends.len(), N, "seed {seed}: every UC send completes");
        assert!(sends.iter().all(|c| c.wc.status == WcStatus::Success));
        let recvs: Vec<_> = p.b.completions.iter().map(|c| c.wc).collect();
        assert!(
            !recvs.is_empty() && recvs.len() < N,
            "seed {seed}: {} of {N} arrived",
            recvs.len()
        );
        let mut seen = std::collections::HashSet::new();
        for wc in &recvs {
            assert_eq!(wc.status, WcStatus::Success);
            assert!(
                seen.insert(wc.imm_data),
                "seed {seed}: message {} twice",
                wc.imm_data
            );
            assert_eq!(wc.byte_len as usize, LEN);
            let slot = (wc.wr_id - 1000) as usize;
            let got = p.read(Side::B, dst + (slot * 1024) as u64, LEN);
            assert_eq!(
                got,
                data(wc.imm_data as u8, LEN),
                "seed {seed}: message {}",
                wc.imm_data
            );
        }
        // Flush the rest: every WQE completes exactly once overall.
        p.modify_to_error(Side::B);
        let mut ids: Vec<u64> = p.b.completions.iter().map(|c| c.wc.wr_id).collect();
        ids.sort();
        assert_eq!(
            ids,
            (1000..1000 + N as u64).collect::<Vec<_>>(),
            "seed {seed}"
        );
    }
}
