//! The RC transport under the deterministic simulator: segmentation and ACK pattern, exactly-once
//! in-order delivery under loss / duplication / reordering / corruption, exact retry and RNR
//! exhaustion, PSN wrap-around, the unacked-PSN window, and same-seed determinism.
//!
//! `SOFTVERBS_SIM_SEEDS=N` runs N seeds of the randomized test instead of the default.

use softverbs_api::{AccessFlags, Mtu, QpAttr, RecvWr, SendWr, WcFlags, WcOpcode, WcStatus};
use softverbs_emu::sim::{FaultConfig, Side, SimPair, SimRng, TraceEvent};
use softverbs_emu::transport::CompletionTarget;
use softverbs_emu::wire::{Opcode, RoceRepr};
use softverbs_testkit::{recv_one, sge};

/// The simulator workload's attributes (ACK timeout code 10, ~4 ms of virtual time; RNR
/// timer code 1, 10 us; 4 READ / atomic resources each way) with these retry counts.
fn attrs(retry_cnt: u8, rnr_retry: u8) -> QpAttr {
    QpAttr {
        sq_psn: 100,
        rq_psn: 100,
        retry_cnt,
        rnr_retry,
        ..softverbs_emu::sim::workload::attrs()
    }
}

/// The (wr_id, status) of every completion a node produced, in order.
fn statuses(node: &softverbs_emu::sim::SimNode) -> Vec<(u64, WcStatus)> {
    node.completions
        .iter()
        .map(|c| (c.wc.wr_id, c.wc.status))
        .collect()
}

fn opcode_of(bytes: &[u8]) -> Opcode {
    RoceRepr::parse(bytes)
        .expect("own packets parse")
        .0
        .bth
        .opcode
}

#[test]
fn send_is_segmented_like_rxe_and_acked_once() {
    let mut p = SimPair::new_rc(1, FaultConfig::none(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, _) = p.register(Side::A, 3000, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, _) = p.register(Side::B, 3000, AccessFlags::LOCAL_WRITE);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    p.write(Side::A, src, &data);
    p.post_recv(Side::B, &[recv_one(9, dst, 3000, rlkey)])
        .unwrap();
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 3000, lkey)])])
        .unwrap();
    p.run(10_000);
    let a = p.sent_by(Side::A);
    let ops: Vec<Opcode> = a.iter().map(|b| opcode_of(b)).collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST
        ]
    );
    let reprs: Vec<_> = a.iter().map(|b| RoceRepr::parse(b).unwrap().0).collect();
    assert_eq!(
        reprs.iter().map(|r| r.bth.ack_req).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(
        reprs.iter().map(|r| r.bth.psn.value()).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    assert_eq!(
        reprs.iter().map(|r| r.payload.len()).collect::<Vec<_>>(),
        [1024, 1024, 952]
    );
    let b = p.sent_by(Side::B);
    assert_eq!(b.len(), 1, "one ACK for one AckReq packet");
    let ack = RoceRepr::parse(&b[0]).unwrap().0;
    assert_eq!(ack.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(ack.bth.psn.value(), 102);
    let aeth = ack.aeth.unwrap();
    assert_eq!((aeth.syndrome, aeth.msn), (0x1f, 1));
    assert_eq!(p.read(Side::B, dst, 3000), data);
    assert_eq!(p.b.completions.len(), 1);
    assert_eq!(p.b.completions[0].wc.byte_len, 3000);
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].wc.status, WcStatus::Success);
}

/// What the oracle expects of one message.
struct Expected {
    sender: Side,
    data: Vec<u8>,
    imm: Option<u32>,
    dst_addr: u64,
    index: usize,
}

/// One randomized run: both directions carry `messages` SENDs (some with immediate data) of
/// random sizes and SGE splits; returns a description of the first violation, if any.
fn run_oracle(seed: u64, faults: FaultConfig, messages: usize) -> Result<SimPair, String> {
    let mut rng = SimRng::new(seed ^ 0xA5A5);
    let mtu = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu4096][rng.below(4) as usize];
    let mut p = SimPair::new_rc(seed, faults, mtu, &attrs(7, 7));
    let max_len = 6000usize;
    let mut expected: Vec<Expected> = Vec::new();
    for side in [Side::A, Side::B] {
        let receiver = if side == Side::A { Side::B } else { Side::A };
        let (src, lkey, _) = p.register(side, max_len * messages, AccessFlags::LOCAL_WRITE);
        let (dst, rlkey, _) = p.register(receiver, max_len * messages, AccessFlags::LOCAL_WRITE);
        let mut recvs = Vec::new();
        let mut sends = Vec::new();
        for m in 0..messages {
            let len = match rng.below(4) {
                0 => rng.below(8) as usize,
                _ => rng.below(max_len as u64 + 1) as usize,
            };
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let base = (m * max_len) as u64;
            p.write(side, src + base, &data);
            let cut = if len == 0 {
                0
            } else {
                rng.below(len as u64) as u32
            };
            let gather = vec![
                sge(src + base, cut, lkey),
                sge(src + base + cut as u64, len as u32 - cut, lkey),
            ];
            let rcut = rng.below(max_len as u64) as u32;
            let scatter = vec![
                sge(dst + base, rcut, rlkey),
                sge(dst + base + rcut as u64, max_len as u32 - rcut, rlkey),
            ];
            let imm = rng.chance(500).then(|| rng.next_u64() as u32);
            recvs.push(RecvWr {
                wr_id: 1000 + m as u64,
                sg_list: scatter,
            });
            sends.push(match imm {
                Some(i) => SendWr::send_with_imm(m as u64, gather, i),
                None => SendWr::send(m as u64, gather),
            });
            expected.push(Expected {
                sender: side,
                data,
                imm,
                dst_addr: dst + base,
                index: m,
            });
        }
        p.post_recv(receiver, &recvs)
            .map_err(|e| format!("post_recv: {e}"))?;
        p.post_send(side, &sends)
            .map_err(|e| format!("post_send: {e}"))?;
    }
    p.run(2_000_000);
    p.heal();
    p.run(2_000_000);
    for e in &expected {
        let (side, data, imm, addr, m) = (&e.sender, &e.data, &e.imm, &e.dst_addr, &e.index);
        let receiver = if *side == Side::A { Side::B } else { Side::A };
        let got = p.read(receiver, *addr, data.len());
        if &got != data {
            return Err(format!(
                "seed {seed}: message {m} {side:?}->{receiver:?} bytes differ"
            ));
        }
        let sends: Vec<_> = p
            .node(*side)
            .completions
            .iter()
            .filter(|c| c.target == CompletionTarget::Send)
            .cloned()
            .collect();
        let recvs: Vec<_> = p
            .node(receiver)
            .completions
            .iter()
            .filter(|c| c.target == CompletionTarget::Recv)
            .cloned()
            .collect();
        if sends.len() != messages || recvs.len() != messages {
            return Err(format!(
                "seed {seed}: {side:?} has {} send and {receiver:?} {} recv completions, want {messages} each",
                sends.len(),
                recvs.len()
            ));
        }
        let s = sends[*m].wc;
        let r = recvs[*m].wc;
        if s.wr_id != *m as u64 || s.status != WcStatus::Success || s.opcode != WcOpcode::Send {
            return Err(format!("seed {seed}: send completion {m} is {s:?}"));
        }
        if r.wr_id != 1000 + *m as u64
            || r.status != WcStatus::Success
            || r.byte_len as usize != data.len()
        {
            return Err(format!("seed {seed}: recv completion {m} is {r:?}"));
        }
        if r.wc_flags.contains(WcFlags::WITH_IMM) != imm.is_some()
            || imm.is_some_and(|i| i != r.imm_data)
        {
            return Err(format!(
                "seed {seed}: recv completion {m} immediate {r:?}, want {imm:?}"
            ));
        }
    }
    Ok(p)
}

fn seeds() -> u64 {
    std::env::var("SOFTVERBS_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

#[test]
fn exactly_once_in_order_under_harsh_faults() {
    let mut corrupted_seen = 0;
    let mut dropped_seen = 0;
    for seed in 0..seeds() {
        let p = run_oracle(seed, FaultConfig::harsh(), 12)
            .unwrap_or_else(|e| panic!("{e} (replay: seed {seed})"));
        corrupted_seen += p
            .trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::IcrcRejected { .. }))
            .count();
        dropped_seen += p
            .trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::Dropped { .. }))
            .count();
    }
    // The faults really happened (otherwise this test proves nothing).
    assert!(
        corrupted_seen > 0 && dropped_seen > 0,
        "{corrupted_seen} corrupted, {dropped_seen} dropped"
    );
}

#[test]
fn clean_network_needs_no_retransmission() {
    let p = run_oracle(7, FaultConfig::none(), 20).unwrap();
    assert_eq!(p.a.qp.counters.retransmitted_packets, 0);
    assert_eq!(p.b.qp.counters.retransmitted_packets, 0);
}

#[test]
fn same_seed_same_trace() {
    let t1 = run_oracle(42, FaultConfig::harsh(), 8).unwrap().trace;
    let t2 = run_oracle(42, FaultConfig::harsh(), 8).unwrap().trace;
    assert_eq!(t1, t2);
    let t3 = run_oracle(43, FaultConfig::harsh(), 8).unwrap().trace;
    assert_ne!(t1, t3);
}

/// A network that loses every packet.
fn total_loss() -> FaultConfig {
    FaultConfig {
        loss_per_mille: 1000,
        ..FaultConfig::none()
    }
}

fn lonely_send(retry_cnt: u8, rnr_retry: u8, faults: FaultConfig, post_recv: bool) -> SimPair {
    let mut p = SimPair::new_rc(5, faults, Mtu::Mtu1024, &attrs(retry_cnt, rnr_retry));
    let (src, lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, _) = p.register(Side::B, 64, AccessFlags::LOCAL_WRITE);
    if post_recv {
        p.post_recv(Side::B, &[recv_one(1, dst, 64, rlkey)])
            .unwrap();
    }
    p.post_send(
        Side::A,
        &[
            SendWr::send(1, vec![sge(src, 64, lkey)]),
            SendWr::send(2, vec![]),
        ],
    )
    .unwrap();
    p.run(100_000);
    p
}

#[test]
fn retry_exhaustion_after_exactly_retry_cnt_retries() {
    for retry_cnt in [0u8, 1, 3, 6] {
        let p = lonely_send(retry_cnt, 7, total_loss(), true);
        let first_psn_sends = p
            .sent_by(Side::A)
            .iter()
            .filter(|b| RoceRepr::parse(b).unwrap().0.bth.psn.value() == 100)
            .count();
        assert_eq!(
            first_psn_sends,
            1 + retry_cnt as usize,
            "retry_cnt {retry_cnt}"
        );
        let wcs = statuses(&p.a);
        assert_eq!(
            wcs,
            [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
            "retry_cnt {retry_cnt}"
        );
        assert_eq!(p.a.qp.state(), softverbs_api::QpState::Err);
    }
}

#[test]
fn retry_cnt_7_never_gives_up() {
    let mut p = SimPair::new_rc(5, total_loss(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 64, lkey)])])
        .unwrap();
    assert_eq!(p.run(500), 500, "still retransmitting after 500 steps");
    assert!(p.a.completions.is_empty());
    assert!(p.a.qp.counters.ack_timeouts >= 400);
}

#[test]
fn rnr_exhaustion_after_exactly_rnr_retry_retries() {
    for rnr_retry in [0u8, 2, 5] {
        let p = lonely_send(7, rnr_retry, FaultConfig::none(), false);
        let rnr_naks = p
            .sent_by(Side::B)
            .iter()
            .filter(|b| {
                RoceRepr::parse(b)
                    .unwrap()
                    .0
                    .aeth
                    .is_some_and(|a| a.syndrome & 0xe0 == 0x20)
            })
            .count();
        assert_eq!(rnr_naks, 1 + rnr_retry as usize, "rnr_retry {rnr_retry}");
        let wcs = statuses(&p.a);
        assert_eq!(
            wcs,
            [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
        );
    }
}

#[test]
fn rnr_nak_carries_min_rnr_timer_and_delivery_resumes() {
    let mut p = SimPair::new_rc(5, FaultConfig::none(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, _) = p.register(Side::B, 64, AccessFlags::LOCAL_WRITE);
    p.write(Side::A, src, &[0x5a; 64]);
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 64, lkey)])])
        .unwrap();
    p.run(50);
    let b_sent = p.sent_by(Side::B);
    let first_nak = RoceRepr::parse(&b_sent[0]).unwrap().0;
    assert_eq!(first_nak.aeth.unwrap().syndrome, 0x20 | 1);
    assert!(p.a.completions.is_empty());
    p.post_recv(Side::B, &[recv_one(1, dst, 64, rlkey)])
        .unwrap();
    p.run(10_000);
    assert_eq!(p.read(Side::B, dst, 64), vec![0x5a; 64]);
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].wc.status, WcStatus::Success);
    assert_eq!(p.b.completions.len(), 1);
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let a = QpAttr {
        sq_psn: 0xff_fffd,
        rq_psn: 0xff_fffd,
        ..attrs(7, 7)
    };
    let mut p = SimPair::new_rc(
        3,
        FaultConfig {
            loss_per_mille: 100,
            ..FaultConfig::none()
        },
        Mtu::Mtu256,
        &a,
    );
    let (src, lkey, _) = p.register(Side::A, 2048, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, _) = p.register(Side::B, 2048, AccessFlags::LOCAL_WRITE);
    let data: Vec<u8> = (0..2048u32).map(|i| (i ^ (i >> 8)) as u8).collect();
    p.write(Side::A, src, &data);
    p.post_recv(Side::B, &[recv_one(1, dst, 2048, rlkey)])
        .unwrap();
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 2048, lkey)])])
        .unwrap();
    p.run(100_000);
    let psns: Vec<u32> = p
        .sent_by(Side::A)
        .iter()
        .map(|b| RoceRepr::parse(b).unwrap().0.bth.psn.value())
        .collect();
    assert!(
        psns.contains(&0xff_ffff) && psns.contains(&0) && psns.contains(&4),
        "{psns:x?}"
    );
    assert_eq!(p.read(Side::B, dst, 2048), data);
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].wc.status, WcStatus::Success);
}

#[test]
fn at_most_128_psns_unacknowledged() {
    let mut p = SimPair::new_rc(3, FaultConfig::none(), Mtu::Mtu256, &attrs(7, 7));
    let len = 256 * 1000;
    let (src, lkey, _) = p.register(Side::A, len, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, _) = p.register(Side::B, len, AccessFlags::LOCAL_WRITE);
    p.post_recv(Side::B, &[recv_one(1, dst, len as u32, rlkey)])
        .unwrap();
    p.post_send(
        Side::A,
        &[SendWr::send(1, vec![sge(src, len as u32, lkey)])],
    )
    .unwrap();
    // Before any packet is delivered, only the window went out.
    assert_eq!(p.sent_by(Side::A).len(), 128);
    p.run(100_000);
    let a = p.sent_by(Side::A);
    assert_eq!(a.len(), 1000);
    // Every 64th packet asks for an ACK so the window keeps moving (rxe's RXE_MAX_PKT_PER_ACK).
    let ack_reqs = a
        .iter()
        .filter(|b| RoceRepr::parse(b).unwrap().0.bth.ack_req)
        .count();
    assert!(ack_reqs >= 1000 / 64, "{ack_reqs}");
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.b.completions[0].wc.byte_len as usize, len);
}

#[test]
fn faults_with_a_small_retry_budget_still_complete() {
    // retry_cnt 6 survives moderate loss because one gap costs one retry, however many
    // packets of the window arrive after it; the budget refills on every ACK that advances.
    let moderate = FaultConfig {
        loss_per_mille: 50,
        dup_per_mille: 50,
        reorder_per_mille: 50,
        ..FaultConfig::none()
    };
    for seed in 0..32 {
        let mut rng = SimRng::new(seed);
        let mut p = SimPair::new_rc(seed, moderate, Mtu::Mtu256, &attrs(6, 6));
        let len = 64 * 1024;
        let (src, lkey, _) = p.register(Side::A, len, AccessFlags::LOCAL_WRITE);
        let (dst, rlkey, _) = p.register(Side::B, len, AccessFlags::LOCAL_WRITE);
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        p.write(Side::A, src, &data);
        let recv = recv_one(1, dst, len as u32, rlkey);
        p.post_recv(Side::B, &[recv]).unwrap();
        p.post_send(
            Side::A,
            &[SendWr::send(1, vec![sge(src, len as u32, lkey)])],
        )
        .unwrap();
        p.run(1_000_000);
        let wcs: Vec<_> = p.a.completions.iter().map(|c| c.wc.status).collect();
        assert_eq!(wcs, [WcStatus::Success], "seed {seed}");
        assert_eq!(p.read(Side::B, dst, len), data, "seed {seed}");
    }
}

#[test]
fn a_duplicated_sequence_nak_costs_one_retry_and_one_rewind() {
    use softverbs_emu::transport::{Env, Outputs};
    use softverbs_emu::wire::{AethRepr, BthRepr, NakCode, Psn};
    let mut p = SimPair::new_rc(9, FaultConfig::none(), Mtu::Mtu256, &attrs(3, 3));
    let (src, lkey, _) = p.register(Side::A, 1280, AccessFlags::LOCAL_WRITE);
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 1280, lkey)])])
        .unwrap();
    assert_eq!(p.sent_by(Side::A).len(), 5, "PSNs 100..=104 went out");
    // The responder lost PSN 102 and NAKs it; the network delivers that NAK twice.
    let nak = {
        let mut r = RoceRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, p.a.qp.qpn, Psn::new(102)),
            &[],
        );
        r.aeth = Some(AethRepr::nak(NakCode::PsnSequenceError, 0));
        r.to_vec().unwrap()
    };
    let mut out = Outputs::default();
    for _ in 0..2 {
        let repr = RoceRepr::parse(&nak).unwrap().0;
        let env = Env::new(&p.a.mem, 1_000);
        p.a.qp.on_packet(&repr, &env, &mut out);
    }
    let resent: Vec<u32> = out
        .packets
        .iter()
        .map(|pk| RoceRepr::parse(&pk.bytes).unwrap().0.bth.psn.value())
        .collect();
    assert_eq!(resent, [102, 103, 104], "one go-back-N from the NAKed PSN");
    assert_eq!(p.a.qp.comp.retries_left(), 2, "one retry spent");
    assert_eq!(
        p.a.qp.comp.una().value(),
        102,
        "the NAK acknowledged 100 and 101"
    );
    assert!(out.completions.is_empty());
}

#[test]
fn send_with_invalidate_carries_the_rkey_and_a_plain_mr_cannot_be_invalidated() {
    use softverbs_api::WrOpcode;
    let mut p = SimPair::new_rc(2, FaultConfig::none(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, _) = p.register(Side::A, 2000, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, rkey) = p.register(
        Side::B,
        2000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let recv = recv_one(5, dst, 2000, rlkey);
    p.post_recv(Side::B, &[recv]).unwrap();
    let wr = SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: rkey,
        ..SendWr::send(1, vec![sge(src, 2000, lkey)])
    };
    p.post_send(Side::A, &[wr, SendWr::send(2, vec![])])
        .unwrap();
    p.run(10_000);
    let a = p.sent_by(Side::A);
    let last = RoceRepr::parse(&a[1]).unwrap().0;
    assert_eq!(last.bth.opcode, Opcode::RC_SEND_LAST_WITH_INVALIDATE);
    assert_eq!(last.ieth, Some(rkey));
    // Regions from ibv_reg_mr cannot be invalidated (only MWs and fast-reg MRs can):
    // the responder refuses the request and both sides fail.
    let b_wc = statuses(&p.b);
    assert_eq!(b_wc, [(5, WcStatus::RemInvReqErr)]);
    let a_wc = statuses(&p.a);
    assert_eq!(
        a_wc,
        [(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn local_invalidate_waits_for_earlier_work_and_fails_on_a_plain_mr() {
    use softverbs_api::WrOpcode;
    let mut p = SimPair::new_rc(2, FaultConfig::none(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, rkey) = p.register(
        Side::A,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let (dst, rlkey, _) = p.register(Side::B, 64, AccessFlags::LOCAL_WRITE);
    p.post_recv(Side::B, &[recv_one(1, dst, 64, rlkey)])
        .unwrap();
    let inv = SendWr {
        opcode: WrOpcode::LocalInv,
        invalidate_rkey: rkey,
        ..SendWr::send(2, vec![])
    };
    p.post_send(Side::A, &[SendWr::send(1, vec![sge(src, 64, lkey)]), inv])
        .unwrap();
    // Nothing completes before the SEND is acknowledged.
    assert!(p.a.completions.is_empty());
    p.run(10_000);
    assert_eq!(
        p.a.completion_summary(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::LocQpOpErr, WcOpcode::LocalInv)
        ]
    );
    assert_eq!(p.a.qp.state(), softverbs_api::QpState::Err);
}

#[test]
fn solicited_event_bit_only_on_the_last_packet_of_sends_and_write_with_imm() {
    use softverbs_api::{wr::RemoteAddr, SendFlags, WrOpcode};
    let mut p = SimPair::new_rc(4, FaultConfig::none(), Mtu::Mtu1024, &attrs(7, 7));
    let (src, lkey, _) = p.register(Side::A, 3000, AccessFlags::LOCAL_WRITE);
    let (dst, rlkey, rkey) = p.register(
        Side::B,
        3000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let recvs: Vec<RecvWr> = (0..2).map(|i| recv_one(i, dst, 3000, rlkey)).collect();
    p.post_recv(Side::B, &recvs).unwrap();
    let solicited = |mut wr: SendWr| {
        wr.send_flags |= SendFlags::SOLICITED;
        wr.remote = RemoteAddr {
            remote_addr: dst,
            rkey,
        };
        wr
    };
    let sge = sge(src, 3000, lkey);
    let write_imm = SendWr {
        opcode: WrOpcode::RdmaWriteWithImm,
        ..SendWr::send(2, vec![sge])
    };
    let write = SendWr {
        opcode: WrOpcode::RdmaWrite,
        ..SendWr::send(3, vec![sge])
    };
    p.post_send(
        Side::A,
        &[
            solicited(SendWr::send(1, vec![sge])),
            solicited(write_imm),
            solicited(write),
        ],
    )
    .unwrap();
    p.run(10_000);
    let se: Vec<(Opcode, bool)> = p
        .sent_by(Side::A)
        .iter()
        .map(|b| {
            let r = RoceRepr::parse(b).unwrap().0;
            (r.bth.opcode, r.bth.solicited)
        })
        .collect();
    assert_eq!(
        se,
        [
            (Opcode::RC_SEND_FIRST, false),
            (Opcode::RC_SEND_MIDDLE, false),
            (Opcode::RC_SEND_LAST, true),
            (Opcode::RC_RDMA_WRITE_FIRST, false),
            (Opcode::RC_RDMA_WRITE_MIDDLE, false),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, true),
            (Opcode::RC_RDMA_WRITE_FIRST, false),
            (Opcode::RC_RDMA_WRITE_MIDDLE, false),
            (Opcode::RC_RDMA_WRITE_LAST, false),
        ]
    );
    assert_eq!(p.a.completions.len(), 3);
}

#[test]
fn a_read_of_1024_responses_streams_through_loss_with_a_small_retry_budget() {
    // Short bursts: a lone re-request must not meet more losses in a row than the budget.
    let lossy = FaultConfig {
        loss_per_mille: 20,
        burst_per_mille: 200,
        burst_max: 2,
        ..FaultConfig::none()
    };
    for seed in 0..8 {
        let mut p = SimPair::new_rc(seed, lossy, Mtu::Mtu256, &attrs(3, 3));
        let (dst, data) = post_a_read_of_random_bytes(&mut p, 256 * 1024, seed);
        p.run(2_000_000);
        assert_the_read_arrived(&mut p, dst, &data, &format!("seed {seed}"));
    }
}

/// Registers `len` random bytes (from `seed`) on B and a buffer for them on A, and posts on
/// A one READ of them all; returns A's buffer and the bytes.
fn post_a_read_of_random_bytes(p: &mut SimPair, len: usize, seed: u64) -> (u64, Vec<u8>) {
    use softverbs_api::{wr::RemoteAddr, WrOpcode};
    let (dst, lkey, _) = p.register(Side::A, len, AccessFlags::LOCAL_WRITE);
    let (src, _, rkey) = p.register(
        Side::B,
        len,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let mut rng = SimRng::new(seed);
    let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    p.write(Side::B, src, &data);
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        remote: RemoteAddr {
            remote_addr: src,
            rkey,
        },
        ..SendWr::send(1, vec![sge(dst, len as u32, lkey)])
    };
    p.post_send(Side::A, &[read]).unwrap();
    (dst, data)
}

/// A's only completion is the READ's success, and `data` is at `dst`.
fn assert_the_read_arrived(p: &mut SimPair, dst: u64, data: &[u8], context: &str) {
    let wcs: Vec<_> =
        p.a.completions
            .iter()
            .map(|c| (c.wc.status, c.wc.byte_len))
            .collect();
    assert_eq!(wcs, [(WcStatus::Success, data.len() as u32)], "{context}");
    assert_eq!(p.read(Side::A, dst, data.len()), data, "{context}");
}

/// A READ whose responses take longer to drain than the ACK timeout (a slow link: 1,024
/// responses at one per 20 us, 20 ms against a timeout of ~4 ms) loses one response early.
/// The requester asks again at once; the rest of the first burst still arrives, and while it
/// does the requester must not time out and ask again: each such retry queues yet another
/// burst behind the old one, which against a receiver slower than the sender (seen in the
/// rxe lab) never lets a response through.
#[test]
fn a_read_is_not_asked_again_while_its_old_responses_still_arrive() {
    let mut p = SimPair::new_rc(1, FaultConfig::none(), Mtu::Mtu256, &attrs(7, 7));
    p.packet_spacing_ns = 20_000;
    // B's packets: the READ's responses, from index 0; the 11th is lost.
    p.lose.push((Side::B, 10));
    let (dst, data) = post_a_read_of_random_bytes(&mut p, 256 * 1024, 7);
    p.run(200_000);
    assert_the_read_arrived(&mut p, dst, &data, "slow link");
    let requests = p
        .sent_by(Side::A)
        .iter()
        .filter(|b| opcode_of(b) == Opcode::RC_RDMA_READ_REQUEST)
        .count();
    // The first request, and one retry at the gap.
    assert_eq!(
        (requests, p.a.qp.counters.ack_timeouts),
        (2, 0),
        "{:?}",
        p.a.qp.counters
    );
}

/// Registers `len` bytes on each side, fills A's with a pattern of nonzero bytes and posts
/// one signaled RDMA WRITE of all of it from A into B's; returns the pattern, A's lkey and
/// B's address.
fn post_write_from_a(p: &mut SimPair, len: usize) -> (Vec<u8>, u32, u64) {
    let (src, lkey, _) = p.register(Side::A, len, AccessFlags::empty());
    let (dst, _, rkey) = p.register(
        Side::B,
        len,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let pattern: Vec<u8> = (0..len as u32).map(|i| (i % 251) as u8 | 1).collect();
    p.write(Side::A, src, &pattern);
    p.post_send(
        Side::A,
        &[SendWr {
            opcode: softverbs_api::WrOpcode::RdmaWrite,
            remote: softverbs_api::wr::RemoteAddr {
                remote_addr: dst,
                rkey,
            },
            ..SendWr::send(1, vec![sge(src, len as u32, lkey)])
        }],
    )
    .unwrap();
    (pattern, lkey, dst)
}

/// Packets are built straight from the sender's registered memory, so a region deregistered
/// between the first transmission and a retransmission must fail the WQE with LOC_PROT_ERR
/// rather than send whatever the freed memory holds.
#[test]
fn a_retransmission_from_a_deregistered_region_fails_with_loc_prot_err() {
    let mut p = SimPair::new_rc(9, total_loss(), Mtu::Mtu1024, &attrs(3, 7));
    let (pattern, lkey, dst) = post_write_from_a(&mut p, 3000);
    // The first transmission (3 packets) is built from the region, and lost.
    let first = p.sent_by(Side::A);
    assert_eq!(first.len(), 3);
    assert_eq!(&first[0][12 + 16..12 + 16 + 1024], &pattern[..1024]);
    p.a.mem.deregister(lkey).unwrap();
    p.heal();
    p.run(100_000);
    assert_eq!(statuses(&p.a), [(1, WcStatus::LocProtErr)]);
    assert_eq!(p.a.qp.state(), softverbs_api::QpState::Err);
    // Nothing was sent once the region was gone, and the responder's memory is untouched.
    assert_eq!(p.sent_by(Side::A).len(), 3);
    assert_eq!(p.read(Side::B, dst, 3000), vec![0u8; 3000]);
}

/// A message's later packets name their payload from the gather list alone (the list was
/// checked as the message started, the bytes are checked again as they leave): a region
/// deregistered between packets of one message loses the packets after it, and the first
/// retransmission, checked in full, fails the WQE with LOC_PROT_ERR. Nothing of the freed
/// region reaches the wire.
#[test]
fn a_region_deregistered_between_packets_of_a_message_fails_it_with_loc_prot_err() {
    // 200 packets at MTU 512 (payloads above 256 bytes are sent from the region): more than
    // the window (128 PSNs) leaves with the post.
    let len = 200 * 512;
    let mut p = SimPair::new_rc(11, FaultConfig::none(), Mtu::Mtu512, &attrs(3, 7));
    let (pattern, lkey, dst) = post_write_from_a(&mut p, len);
    let window = p.sent_by(Side::A).len();
    assert_eq!(window, 128, "the window's packets leave with the post");
    p.a.mem.deregister(lkey).unwrap();
    p.run(100_000);
    assert_eq!(statuses(&p.a), [(1, WcStatus::LocProtErr)]);
    assert_eq!(p.a.qp.state(), softverbs_api::QpState::Err);
    assert_eq!(
        p.sent_by(Side::A).len(),
        window,
        "nothing left after the region went"
    );
    let written = window * 512;
    let b = p.read(Side::B, dst, len);
    assert_eq!(&b[..written], &pattern[..written]);
    assert!(
        b[written..].iter().all(|&x| x == 0),
        "no byte of the freed region arrived"
    );
}
