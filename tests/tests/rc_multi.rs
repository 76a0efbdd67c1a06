//! Several QPs and threads at once, and connection-timing cases: QP pairs sharing two devices
//! and CQs, concurrent posters on one QP, a receiver that is only in RTR, a receiver that
//! comes up late (retransmission), and RTS -> RESET with work outstanding.
//!
//! File number 9: devices on 127.10.9.n.

use std::collections::HashSet;
use std::time::Duration;

use softverbs::{
    AccessFlags, QpAttr, QpAttrMask, QpState, RcConnectOptions, RecvWr, SendWr, WcOpcode, WcStatus,
};
use softverbs_conformance::{
    assert_bytes_eq, assert_cq_empty, buffer, check_flushed, check_recv_wc, check_send_wc,
    connect_pair, open_udp_device, pattern, poll_1, poll_n, rc_pair, send_and_verify, side_pair,
    to_rtr_only, wait_until, SideConfig,
};

const FILE: u8 = 9;

#[test]
fn four_qp_pairs_on_two_devices_with_shared_cqs() {
    let ctx_a = open_udp_device(FILE, 1);
    let ctx_b = open_udp_device(FILE, 2);
    let pd_a = ctx_a.alloc_pd().unwrap();
    let pd_b = ctx_b.alloc_pd().unwrap();
    // One CQ per device for everything: sends and receives of all four QPs.
    let cq_a = ctx_a.create_cq(256).unwrap();
    let cq_b = ctx_b.create_cq(256).unwrap();
    const PAIRS: usize = 4;
    const SLOT: usize = 32 * 1024;
    let mr_a = pd_a
        .register(buffer(PAIRS * SLOT), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mr_b = pd_b
        .register(buffer(PAIRS * SLOT), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let qps_a: Vec<_> = (0..PAIRS)
        .map(|_| pd_a.qp_builder().build(&cq_a, &cq_a).unwrap())
        .collect();
    let qps_b: Vec<_> = (0..PAIRS)
        .map(|_| pd_b.qp_builder().build(&cq_b, &cq_b).unwrap())
        .collect();
    let opts = RcConnectOptions::default();
    // Cross the numbering: a's QP i talks to b's QP (PAIRS - 1 - i).
    for (i, qp_a) in qps_a.iter().enumerate() {
        let j = PAIRS - 1 - i;
        let ep_a = qp_a.endpoint(i as u32 * 1000, 1).unwrap();
        let ep_b = qps_b[j].endpoint(j as u32 * 7000, 1).unwrap();
        qp_a.connect_rc(i as u32 * 1000, &ep_b, &opts).unwrap();
        qps_b[j].connect_rc(j as u32 * 7000, &ep_a, &opts).unwrap();
    }
    // Every pair: b receives into slot j, a sends 3 messages of different lengths from slot i.
    let len = |i: usize, k: usize| 1000 + 3000 * k + 17 * i;
    for i in 0..PAIRS {
        let j = PAIRS - 1 - i;
        for k in 0..3 {
            qps_b[j]
                .post_recv(&[RecvWr {
                    wr_id: (j * 10 + k) as u64,
                    sg_list: vec![mr_b.sge(j * SLOT + k * 8192, 8192).unwrap()],
                }])
                .unwrap();
        }
        let msg = pattern(i as u64, SLOT);
        mr_a.write(i * SLOT, &msg).unwrap();
    }
    // Post round-robin so the pairs' packets interleave on the wire.
    for k in 0..3 {
        for (i, qp) in qps_a.iter().enumerate() {
            qp.post_send(&[SendWr::send_with_imm(
                (100 + i * 10 + k) as u64,
                vec![mr_a.sge(i * SLOT, len(i, k) as u32).unwrap()],
                (i * 10 + k) as u32,
            )])
            .unwrap();
        }
    }
    let wcs_b = poll_n(&cq_b, PAIRS * 3, "receives");
    let wcs_a = poll_n(&cq_a, PAIRS * 3, "sends");
    let image = mr_b.to_vec();
    let mut seen = HashSet::new();
    for wc in &wcs_b {
        let j = wc.wr_id as usize / 10;
        let k = wc.wr_id as usize % 10;
        let i = PAIRS - 1 - j;
        check_recv_wc(
            wc,
            wc.wr_id,
            len(i, k),
            Some((i * 10 + k) as u32),
            qps_b[j].qp_num(),
            qps_a[i].qp_num(),
        );
        let at = j * SLOT + k * 8192;
        assert_bytes_eq(
            &image[at..at + len(i, k)],
            &pattern(i as u64, SLOT)[..len(i, k)],
            &format!("pair {i}, message {k}"),
        );
        assert!(seen.insert(wc.wr_id));
    }
    // Per QP, receives complete in posting order.
    for (j, qp_b) in qps_b.iter().enumerate() {
        let ids: Vec<u64> = wcs_b
            .iter()
            .filter(|w| w.qp_num == qp_b.qp_num())
            .map(|w| w.wr_id)
            .collect();
        assert_eq!(ids, (0..3).map(|k| (j * 10 + k) as u64).collect::<Vec<_>>());
    }
    for wc in &wcs_a {
        let i = (wc.wr_id as usize - 100) / 10;
        let k = (wc.wr_id as usize - 100) % 10;
        check_send_wc(wc, wc.wr_id, len(i, k), qps_a[i].qp_num());
    }
}

#[test]
fn one_cq_for_sends_and_receives_tells_them_apart_by_opcode() {
    let ctx_a = open_udp_device(FILE, 3);
    let ctx_b = open_udp_device(FILE, 4);
    let (a, b) = side_pair(&ctx_a, &ctx_b, &SideConfig::default());
    // A second QP on a that uses a's send CQ for both queues.
    let qp = a.pd.qp_builder().build(&a.send_cq, &a.send_cq).unwrap();
    let peer = b.pd.qp_builder().build(&b.send_cq, &b.recv_cq).unwrap();
    let opts = RcConnectOptions::default();
    qp.connect_rc(1, &peer.endpoint(2, 1).unwrap(), &opts)
        .unwrap();
    peer.connect_rc(2, &qp.endpoint(1, 1).unwrap(), &opts)
        .unwrap();
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: vec![a.recv_mr.sge(0, 1000).unwrap()],
    }])
    .unwrap();
    peer.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: vec![b.recv_mr.sge(0, 1000).unwrap()],
    }])
    .unwrap();
    qp.post_send(&[SendWr::send(3, vec![a.send_mr.sge(0, 500).unwrap()])])
        .unwrap();
    peer.post_send(&[SendWr::send(4, vec![b.send_mr.sge(0, 600).unwrap()])])
        .unwrap();
    let wcs = poll_n(&a.send_cq, 2, "send and receive on one CQ");
    let send = wcs.iter().find(|w| w.opcode == WcOpcode::Send).unwrap();
    let recv = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
    check_send_wc(send, 3, 500, qp.qp_num());
    check_recv_wc(recv, 1, 600, None, qp.qp_num(), peer.qp_num());
    check_send_wc(&poll_1(&b.send_cq, "peer send"), 4, 600, peer.qp_num());
    check_recv_wc(
        &poll_1(&b.recv_cq, "peer recv"),
        2,
        500,
        None,
        peer.qp_num(),
        qp.qp_num(),
    );
    // The first pair is unaffected.
    connect_pair(&a, &b, 10, 20, &opts);
    send_and_verify(&a, &b, 777, 1);
    assert_cq_empty(&a.send_cq, "a send");
}

#[test]
fn two_threads_posting_on_one_qp() {
    const PER_THREAD: usize = 100;
    let cfg = SideConfig {
        cq_depth: 512,
        ..SideConfig::default()
    };
    let mut cfg_deep = cfg;
    cfg_deep.cap.max_send_wr = 2 * PER_THREAD as u32;
    cfg_deep.cap.max_recv_wr = 2 * PER_THREAD as u32;
    let (a, b) = rc_pair(FILE, 5, 6, &cfg_deep, &RcConnectOptions::default());
    for n in 0..2 * PER_THREAD {
        b.post_recv(n as u64, vec![b.recv_mr.sge(n * 256, 256).unwrap()]);
    }
    // Thread t sends messages carrying their own id in their first bytes (from slot t).
    for t in 0..2usize {
        let mut slot = vec![0u8; 256];
        slot[0] = t as u8;
        a.send_mr.write(t * 256, &slot).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..2usize {
            let a = &a;
            s.spawn(move || {
                for k in 0..PER_THREAD {
                    let id = (t * 1000 + k) as u64;
                    let wr = SendWr::send_with_imm(
                        id,
                        vec![a.send_mr.sge(t * 256, 100).unwrap()],
                        id as u32,
                    );
                    a.qp.post_send(&[wr]).expect("post_send");
                }
            });
        }
    });
    let sends = poll_n(&a.send_cq, 2 * PER_THREAD, "sends");
    let recvs = poll_n(&b.recv_cq, 2 * PER_THREAD, "receives");
    // Every send completed once; each thread's sends in its own order.
    let mut per_thread = [Vec::new(), Vec::new()];
    for wc in &sends {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        per_thread[wc.wr_id as usize / 1000].push(wc.wr_id as usize % 1000);
    }
    for ids in &per_thread {
        assert_eq!(*ids, (0..PER_THREAD).collect::<Vec<_>>());
    }
    // Receives complete in posting order; the message order matches the send order.
    let image = b.recv_mr.to_vec();
    for (n, wc) in recvs.iter().enumerate() {
        assert_eq!(wc.wr_id, n as u64);
        assert_eq!(wc.imm_data as u64, sends[n].wr_id, "message order");
        let t = wc.imm_data as usize / 1000;
        assert_eq!(
            image[n * 256] as usize,
            t,
            "receive {n} holds the wrong data"
        );
        assert_eq!(wc.byte_len, 100);
    }
}

#[test]
fn a_receiver_in_rtr_accepts_and_acknowledges() {
    let cfg = SideConfig::default();
    let (a, b) = side_pair(&open_udp_device(FILE, 7), &open_udp_device(FILE, 8), &cfg);
    let opts = RcConnectOptions::default();
    let ep_a = a.qp.endpoint(100, 1).unwrap();
    a.qp.connect_rc(100, &b.qp.endpoint(200, 1).unwrap(), &opts)
        .unwrap();
    // b goes to RTR only: it can receive (and acknowledge) but not send.
    to_rtr_only(&b, &ep_a, opts.path_mtu, AccessFlags::empty(), 0);
    send_and_verify(&a, &b, 5000, 1);
    assert_eq!(b.qp.state().unwrap(), QpState::Rtr);
}

#[test]
fn a_late_receiver_gets_the_message_by_retransmission() {
    let cfg = SideConfig::default();
    let (a, b) = side_pair(&open_udp_device(FILE, 9), &open_udp_device(FILE, 10), &cfg);
    let opts = RcConnectOptions {
        timeout: 12, // ~17 ms
        retry_cnt: 7,
        ..RcConnectOptions::default()
    };
    let ep_a = a.qp.endpoint(0x500, 1).unwrap();
    let ep_b = b.qp.endpoint(0x600, 1).unwrap();
    a.qp.connect_rc(0x500, &ep_b, &opts).unwrap();
    // b is still in RESET: a's packets are dropped until it connects.
    let msg = pattern(3, 3000);
    a.send_mr.write(0, &msg).unwrap();
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 3000).unwrap()]));
    wait_until("a retransmission", || {
        a.counters().retransmitted_packets >= 1
    });
    assert_cq_empty(&a.send_cq, "no completion before b is up");
    b.qp.connect_rc(0x600, &ep_a, &opts).unwrap();
    b.post_recv(2, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    check_recv_wc(&poll_1(&b.recv_cq, "recv"), 2, 3000, None, b.qpn(), a.qpn());
    check_send_wc(&poll_1(&a.send_cq, "send"), 1, 3000, a.qpn());
    assert_bytes_eq(&b.recv_mr.to_vec()[..3000], &msg, "late message");
    assert!(a.counters().ack_timeouts >= 1);
}

#[test]
fn rts_to_reset_discards_outstanding_work_and_reconnects_cleanly() {
    let (a, b) = rc_pair(
        FILE,
        11,
        12,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    send_and_verify(&a, &b, 100, 1);
    // b has receives outstanding when both go straight from RTS to RESET.
    for id in [50u64, 51, 52] {
        b.post_recv(id, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    }
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    for side in [&a, &b] {
        side.qp.modify(&reset, QpAttrMask::STATE).unwrap();
        assert_eq!(side.qp.state().unwrap(), QpState::Reset);
    }
    // RESET empties the queues without completions (ibv_modify_qp(3)).
    std::thread::sleep(Duration::from_millis(20));
    assert_cq_empty(&b.recv_cq, "receives discarded by RESET");

    connect_pair(&a, &b, 0x3000, 0x4000, &RcConnectOptions::default());
    // The next message lands in the newly posted receive, not a discarded one.
    send_and_verify(&a, &b, 2000, 60);
    send_and_verify(&b, &a, 2000, 61);
    assert_cq_empty(&b.recv_cq, "no stale receive completes");
}

#[test]
fn both_directions_at_once_on_one_qp_pair() {
    const N: usize = 32;
    const SLOT: usize = 8192;
    let cfg = SideConfig {
        buf_len: N * SLOT,
        ..SideConfig::default()
    };
    let (a, b) = rc_pair(FILE, 13, 14, &cfg, &RcConnectOptions::default());
    for (side, seed) in [(&a, 1000u64), (&b, 2000)] {
        for i in 0..N {
            side.send_mr
                .write(i * SLOT, &pattern(seed + i as u64, SLOT))
                .unwrap();
            side.post_recv(
                i as u64,
                vec![side.recv_mr.sge(i * SLOT, SLOT as u32).unwrap()],
            );
        }
    }
    let len = |i: usize| 1 + (i * 2654) % (SLOT - 1);
    std::thread::scope(|s| {
        for side in [&a, &b] {
            s.spawn(move || {
                for i in 0..N {
                    side.post_send(SendWr::send(
                        100 + i as u64,
                        vec![side.send_mr.sge(i * SLOT, len(i) as u32).unwrap()],
                    ));
                }
            });
        }
    });
    for (from, to, seed) in [(&a, &b, 1000u64), (&b, &a, 2000)] {
        let sends = poll_n(&from.send_cq, N, "sends");
        let recvs = poll_n(&to.recv_cq, N, "receives");
        let image = to.recv_mr.to_vec();
        for i in 0..N {
            check_send_wc(&sends[i], 100 + i as u64, len(i), from.qpn());
            check_recv_wc(&recvs[i], i as u64, len(i), None, to.qpn(), from.qpn());
            assert_bytes_eq(
                &image[i * SLOT..i * SLOT + len(i)],
                &pattern(seed + i as u64, SLOT)[..len(i)],
                &format!("message {i}"),
            );
        }
    }
}

#[test]
fn moving_to_err_mid_transfer_completes_every_wr_exactly_once_in_order() {
    let cfg = SideConfig {
        buf_len: 1 << 20,
        ..SideConfig::default()
    };
    let (a, b) = rc_pair(FILE, 15, 16, &cfg, &RcConnectOptions::default());
    for i in 0..4 {
        b.post_recv(
            i,
            vec![b.recv_mr.sge(i as usize * 256 * 1024, 256 * 1024).unwrap()],
        );
    }
    let sends: Vec<SendWr> = (0..4)
        .map(|i| {
            SendWr::send(
                10 + i,
                vec![a.send_mr.sge(i as usize * 256 * 1024, 256 * 1024).unwrap()],
            )
        })
        .collect();
    a.qp.post_send(&sends).unwrap();
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    let wcs = poll_n(&a.send_cq, 4, "sends");
    let mut flushed = false;
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.wr_id, 10 + i as u64, "{wc:?}");
        assert_eq!(wc.qp_num, a.qpn());
        match wc.status {
            WcStatus::Success => assert!(!flushed, "success after a flush: {wcs:?}"),
            WcStatus::WrFlushErr => flushed = true,
            other => panic!("unexpected status {other:?}"),
        }
    }
    // A marker posted in ERR is flushed at once and is the next completion: nothing else of
    // the four WRs ever completes a second time.
    a.post_send(SendWr::send(99, vec![]));
    check_flushed(&poll_1(&a.send_cq, "marker"), 99, a.qpn());
    assert_cq_empty(&a.send_cq, "after the marker");
}
