//! RC error paths: receive buffer too small (LOC_LEN_ERR / REM_INV_REQ_ERR and flushes),
//! post-time errors with the index of the failing WR, a bad lkey (LOC_PROT_ERR), and RNR
//! (retried until a receive is posted, or RNR_RETRY_EXC_ERR).
//!
//! File number 6: devices on 127.10.6.n.

use std::time::Duration;

use softverbs::{
    AccessFlags, Mr, QpAttr, QpState, RcConnectOptions, RecvWr, RemoteAddr, SendFlags, SendWr, Sge,
    WcOpcode, WcStatus, WrOpcode,
};
use softverbs_conformance::{
    assert_bytes_eq, assert_cq_empty, check_flushed, check_recv_wc, check_send_wc, open_udp_device,
    pattern, poll_1, poll_n, rc_pair, wait_until, Side, SideConfig,
};
use softverbs_testkit::{init_attr, RC_RTR_MASK};

const FILE: u8 = 6;
const CANARY: u8 = 0xEE;

fn small_cap_config(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32) -> SideConfig {
    let mut cfg = SideConfig::default();
    cfg.cap.max_send_wr = send_wr;
    cfg.cap.max_recv_wr = recv_wr;
    cfg.cap.max_send_sge = send_sge;
    cfg.cap.max_recv_sge = recv_sge;
    cfg
}

/// A receive buffer shorter than the message: the receiver completes it with LOC_LEN_ERR,
/// the sender gets REM_INV_REQ_ERR, both QPs end in ERR and everything queued behind is
/// flushed, in order; later posts are flushed too. Bytes outside the receive SGE are never
/// written.
fn loc_len_err(na: u8, nb: u8, msg_len: usize, recv_len: u32) {
    let (a, b) = rc_pair(
        FILE,
        na,
        nb,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    b.recv_mr.fill(CANARY).unwrap();
    a.send_mr.write(0, &pattern(1, msg_len)).unwrap();
    let recvs: Vec<RecvWr> = [1u64, 2, 3]
        .iter()
        .map(|&id| RecvWr {
            wr_id: id,
            sg_list: vec![b.recv_mr.sge(0, recv_len).unwrap()],
        })
        .collect();
    b.qp.post_recv(&recvs).expect("post_recv");
    let sends: Vec<SendWr> = [11u64, 12, 13]
        .iter()
        .map(|&id| SendWr::send(id, vec![a.send_mr.sge(0, msg_len as u32).unwrap()]))
        .collect();
    a.qp.post_send(&sends).expect("post_send");

    let r = poll_n(&b.recv_cq, 3, "receiver completions");
    assert_eq!(r[0].wr_id, 1, "{:?}", r[0]);
    assert_eq!(r[0].status, WcStatus::LocLenErr, "{:?}", r[0]);
    assert_eq!(r[0].qp_num, b.qpn());
    check_flushed(&r[1], 2, b.qpn());
    check_flushed(&r[2], 3, b.qpn());

    let s = poll_n(&a.send_cq, 3, "sender completions");
    assert_eq!(s[0].wr_id, 11, "{:?}", s[0]);
    assert_eq!(s[0].status, WcStatus::RemInvReqErr, "{:?}", s[0]);
    assert_eq!(s[0].qp_num, a.qpn());
    check_flushed(&s[1], 12, a.qpn());
    check_flushed(&s[2], 13, a.qpn());

    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert_eq!(b.qp.state().unwrap(), QpState::Err);

    // Nothing was written outside the receive SGE.
    let image = b.recv_mr.to_vec();
    assert!(
        image[recv_len as usize..].iter().all(|&x| x == CANARY),
        "bytes beyond the {recv_len}-byte receive SGE were written"
    );

    // WRs posted in ERR are accepted and flushed, in order.
    b.qp.post_recv(&[
        RecvWr {
            wr_id: 4,
            sg_list: vec![b.recv_mr.sge(0, 8).unwrap()],
        },
        RecvWr {
            wr_id: 5,
            sg_list: vec![],
        },
    ])
    .expect("post_recv in ERR");
    let r = poll_n(&b.recv_cq, 2, "receives flushed in ERR");
    check_flushed(&r[0], 4, b.qpn());
    check_flushed(&r[1], 5, b.qpn());
    a.qp.post_send(&[
        SendWr::send(14, vec![a.send_mr.sge(0, 8).unwrap()]),
        SendWr::send(15, vec![]),
    ])
    .expect("post_send in ERR");
    let s = poll_n(&a.send_cq, 2, "sends flushed in ERR");
    check_flushed(&s[0], 14, a.qpn());
    check_flushed(&s[1], 15, a.qpn());
    assert_eq!(s[0].opcode, WcOpcode::Send);
}

#[test]
fn loc_len_err_single_packet() {
    loc_len_err(1, 2, 200, 100);
}

#[test]
fn loc_len_err_in_a_later_packet_of_a_message() {
    // 3 KiB at MTU 1024: the second packet no longer fits the 1034-byte buffer.
    loc_len_err(3, 4, 3 * 1024, 1024 + 10);
}

#[test]
fn post_send_reports_the_first_failing_wr() {
    let cfg = small_cap_config(16, 16, 2, 2);
    let (a, b) = rc_pair(FILE, 5, 6, &cfg, &RcConnectOptions::default());
    for i in 0..4u64 {
        b.post_recv(i, vec![b.recv_mr.sge(i as usize * 256, 256).unwrap()]);
    }
    let sge = |off: usize, len: u32| a.send_mr.sge(off, len).unwrap();
    a.send_mr.write(0, &pattern(9, 1024)).unwrap();

    // Too many SGEs (3 > max_send_sge 2) at index 2: WRs 0 and 1 are posted, 2 and 3 not.
    let wrs = vec![
        SendWr::send(0, vec![sge(0, 10), sge(10, 10)]),
        SendWr::send(1, vec![sge(20, 30)]),
        SendWr::send(2, vec![sge(0, 1), sge(1, 1), sge(2, 1)]),
        SendWr::send(3, vec![sge(0, 5)]),
    ];
    let err = a.qp.post_send(&wrs).unwrap_err();
    assert_eq!(err.index, 2, "{err}");
    assert_eq!(err.error.errno(), 22, "{err}");
    let s = poll_n(&a.send_cq, 2, "the two posted sends");
    check_send_wc(&s[0], 0, 20, a.qpn());
    check_send_wc(&s[1], 1, 30, a.qpn());
    let r = poll_n(&b.recv_cq, 2, "the two posted receives");
    check_recv_wc(&r[0], 0, 20, None, b.qpn(), a.qpn());
    check_recv_wc(&r[1], 1, 30, None, b.qpn(), a.qpn());
    let image = b.recv_mr.to_vec();
    assert_bytes_eq(&image[..20], &pattern(9, 20), "WR 0");
    assert_bytes_eq(&image[256..286], &pattern(9, 1024)[20..50], "WR 1");

    // WRs 2 and 3 were never queued: the next send to complete is the next one posted.
    a.post_send(SendWr::send(4, vec![sge(0, 7)]));
    check_send_wc(&poll_1(&a.send_cq, "send 4"), 4, 7, a.qpn());
    check_recv_wc(&poll_1(&b.recv_cq, "recv 2"), 2, 7, None, b.qpn(), a.qpn());

    // An atomic needs exactly an 8-byte local buffer for the original value (as rdma-core's
    // ibv_post_send checks): EINVAL at its index, the SEND before it is posted.
    let atomic = SendWr {
        opcode: WrOpcode::AtomicFetchAndAdd,
        remote: RemoteAddr {
            remote_addr: b.recv_mr.addr(),
            rkey: b.recv_mr.rkey(),
        },
        compare_add: 1,
        ..SendWr::send(6, vec![sge(0, 4)])
    };
    let err =
        a.qp.post_send(&[SendWr::send(5, vec![sge(0, 3)]), atomic])
            .unwrap_err();
    assert_eq!(err.index, 1, "{err}");
    assert_eq!(err.error.errno(), 22, "{err}");
    check_send_wc(&poll_1(&a.send_cq, "send 5"), 5, 3, a.qpn());
    check_recv_wc(&poll_1(&b.recv_cq, "recv 3"), 3, 3, None, b.qpn(), a.qpn());

    // TSO is not an RC opcode at all (ibv_post_send(3)): EINVAL.
    let tso = SendWr {
        opcode: WrOpcode::Tso,
        ..SendWr::send(7, vec![sge(0, 8)])
    };
    let err = a.qp.post_send(&[tso]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, 22), "{err}");

    // Unknown send flags and IBV_SEND_IP_CSUM (unsupported) are EINVAL too.
    for flags in [SendFlags(1 << 30), SendFlags::SIGNALED | SendFlags::IP_CSUM] {
        let wr = SendWr {
            send_flags: flags,
            ..SendWr::send(8, vec![sge(0, 8)])
        };
        let err = a.qp.post_send(&[wr]).unwrap_err();
        assert_eq!((err.index, err.error.errno()), (0, 22), "{flags:?}: {err}");
    }

    assert_eq!(
        a.qp.state().unwrap(),
        QpState::Rts,
        "post errors leave the QP alone"
    );
    assert_cq_empty(&a.send_cq, "a send");
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn post_recv_reports_the_first_failing_wr() {
    let cfg = small_cap_config(4, 4, 2, 2);
    let (a, b) = rc_pair(FILE, 7, 8, &cfg, &RcConnectOptions::default());
    let sge = |off: usize| b.recv_mr.sge(off, 100).unwrap();

    // Too many SGEs at index 1.
    let err =
        b.qp.post_recv(&[
            RecvWr {
                wr_id: 0,
                sg_list: vec![sge(0)],
            },
            RecvWr {
                wr_id: 1,
                sg_list: vec![sge(100), sge(200), sge(300)],
            },
        ])
        .unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, 22), "{err}");

    // Queue full: 1 receive posted, 3 more fit, the fifth overall (index 3) does not.
    let wrs: Vec<RecvWr> = (10..15)
        .map(|id| RecvWr {
            wr_id: id,
            sg_list: vec![sge(0)],
        })
        .collect();
    let err = b.qp.post_recv(&wrs).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (3, 12), "{err}");

    // The posted ones (0, 10, 11, 12) are consumed in order by four sends.
    a.send_mr.write(0, &pattern(3, 64)).unwrap();
    let sends: Vec<SendWr> = (0..4)
        .map(|i| SendWr::send(i, vec![a.send_mr.sge(0, 10 + i as u32).unwrap()]))
        .collect();
    a.qp.post_send(&sends).expect("post_send");
    let r = poll_n(&b.recv_cq, 4, "receives");
    for (wc, (id, len)) in r
        .iter()
        .zip([(0u64, 10usize), (10, 11), (11, 12), (12, 13)])
    {
        check_recv_wc(wc, id, len, None, b.qpn(), a.qpn());
    }
    poll_n(&a.send_cq, 4, "sends");
}

#[test]
fn send_queue_full_is_enomem_at_the_first_wr_that_does_not_fit() {
    let cfg = small_cap_config(4, 8, 1, 1);
    let (a, b) = rc_pair(FILE, 9, 10, &cfg, &RcConnectOptions::default());
    for i in 0..4 {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
    }
    // One call: the queue holds 4 and nothing is sent (or acknowledged) during the call.
    let wrs: Vec<SendWr> = (0..6)
        .map(|i| SendWr::send(i, vec![a.send_mr.sge(0, 16).unwrap()]))
        .collect();
    let err = a.qp.post_send(&wrs).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (4, 12), "{err}");
    let s = poll_n(&a.send_cq, 4, "the four posted sends");
    for (i, wc) in s.iter().enumerate() {
        check_send_wc(wc, i as u64, 16, a.qpn());
    }
    poll_n(&b.recv_cq, 4, "receives");
    assert_cq_empty(&a.send_cq, "after the posted sends");
}

#[test]
fn post_send_before_rts_is_einval() {
    let cfg = SideConfig::default();
    let a = Side::new(&open_udp_device(FILE, 11), &cfg);
    let wr = || SendWr::send(1, vec![a.send_mr.sge(0, 8).unwrap()]);
    // RESET
    let err = a.qp.post_send(&[wr()]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, 22), "RESET: {err}");
    // INIT
    let (init, init_mask) = init_attr(AccessFlags::empty());
    a.qp.modify(&init, init_mask).expect("INIT");
    let err = a.qp.post_send(&[wr()]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, 22), "INIT: {err}");
    // RTR
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        dest_qp_num: 0x55,
        ah_attr: softverbs_api::qp::AhAttr {
            dgid: a.ctx.query_gid(1, 1).unwrap().gid,
            sgid_index: 1,
            port_num: 1,
            ..Default::default()
        },
        ..QpAttr::default()
    };
    a.qp.modify(&rtr, RC_RTR_MASK).expect("RTR");
    let err = a.qp.post_send(&[wr()]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, 22), "RTR: {err}");
    assert_cq_empty(&a.send_cq, "nothing was posted");
}

/// A send whose SGE cannot be read completes with LOC_PROT_ERR and takes the QP to ERR; the
/// WR behind it is flushed and the peer receives nothing. Error completions are generated
/// whether the WR was signaled or not: the WR behind is unsignaled, and so is the bad one
/// when `bad_unsignaled`.
///
/// `bad` makes the SGE; the MRs it returns are kept alive until the end.
fn bad_send_sge(na: u8, nb: u8, bad_unsignaled: bool, bad: impl Fn(&Side) -> (Sge, Vec<Mr>)) {
    let (a, b) = rc_pair(
        FILE,
        na,
        nb,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    b.post_recv(1, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    b.post_recv(2, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    let (bad_sge, _keep) = bad(&a);
    let mut bad_wr = SendWr::send(11, vec![bad_sge]);
    if bad_unsignaled {
        bad_wr.send_flags = SendFlags::empty();
    }
    let mut behind = SendWr::send(12, vec![a.send_mr.sge(0, 100).unwrap()]);
    behind.send_flags = SendFlags::empty();
    // A good send first, so the failing one is not at the front of the queue when posted.
    a.qp.post_send(&[
        SendWr::send(10, vec![a.send_mr.sge(0, 100).unwrap()]),
        bad_wr,
        behind,
    ])
    .expect("the lkey is only checked when the WR is executed");
    let s = poll_n(&a.send_cq, 3, "sender completions");
    check_send_wc(&s[0], 10, 100, a.qpn());
    assert_eq!(s[1].wr_id, 11, "{:?}", s[1]);
    assert_eq!(s[1].status, WcStatus::LocProtErr, "{:?}", s[1]);
    assert_eq!(s[1].qp_num, a.qpn());
    check_flushed(&s[2], 12, a.qpn());
    assert_eq!(a.qp.state().unwrap(), QpState::Err);

    // The receiver got the good message only and is still usable.
    check_recv_wc(
        &poll_1(&b.recv_cq, "recv 1"),
        1,
        100,
        None,
        b.qpn(),
        a.qpn(),
    );
    assert_cq_empty(&b.recv_cq, "b recv");
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn bad_lkey_in_a_send_sge_is_loc_prot_err() {
    bad_send_sge(12, 13, true, |a| {
        let sge = Sge {
            lkey: a.send_mr.lkey() ^ 0x5a5a_0000,
            ..a.send_mr.sge(0, 100).unwrap()
        };
        (sge, vec![])
    });
}

#[test]
fn send_sge_beyond_its_mr_is_loc_prot_err() {
    bad_send_sge(14, 15, false, |a| {
        let sge = Sge {
            addr: a.send_mr.addr() + a.send_mr.len() as u64 - 50,
            length: 100,
            lkey: a.send_mr.lkey(),
        };
        (sge, vec![])
    });
}

#[test]
fn send_sge_of_an_mr_in_another_pd_is_loc_prot_err() {
    bad_send_sge(31, 32, false, |a| {
        let other_pd = a.ctx.alloc_pd().unwrap();
        assert_ne!(other_pd.id(), a.pd.id());
        let mr = other_pd
            .register(
                softverbs_conformance::buffer(4096),
                softverbs::AccessFlags::LOCAL_WRITE,
            )
            .unwrap();
        (mr.sge(0, 100).unwrap(), vec![mr])
    });
}

#[test]
fn send_sge_with_the_lkey_of_a_deregistered_mr_is_loc_prot_err() {
    bad_send_sge(33, 34, true, |a| {
        let mr =
            a.pd.register(
                softverbs_conformance::buffer(4096),
                softverbs::AccessFlags::LOCAL_WRITE,
            )
            .unwrap();
        let stale = mr.sge(0, 100).unwrap();
        // The same memory registered again (very likely in the same table slot): the old
        // lkey must not reach it.
        let again =
            a.pd.register(
                mr.into_buffer().unwrap(),
                softverbs::AccessFlags::LOCAL_WRITE,
            )
            .unwrap();
        assert_eq!(again.addr(), stale.addr);
        assert_ne!(again.lkey(), stale.lkey);
        (stale, vec![again])
    });
}

#[test]
fn rnr_with_infinite_retries_delivers_once_a_receive_is_posted() {
    let opts = RcConnectOptions {
        rnr_retry: 7,
        min_rnr_timer: 1, // 10 µs: many RNR NAKs before the receive comes
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 16, 17, &SideConfig::default(), &opts);
    let len = 5000;
    let msg = pattern(5, len);
    a.send_mr.write(0, &msg).unwrap();
    b.recv_mr.fill(CANARY).unwrap();
    a.post_send(SendWr::send_with_imm(
        1,
        vec![a.send_mr.sge(0, len as u32).unwrap()],
        0x1234,
    ));
    // Post the receive ~50 ms later, and only once the sender has really been told RNR.
    std::thread::sleep(Duration::from_millis(50));
    wait_until("an RNR NAK", || a.counters().rnr_naks_received >= 1);
    assert_cq_empty(&a.send_cq, "no completion while RNR");
    b.post_recv(2, vec![b.recv_mr.sge(0, 8192).unwrap()]);

    check_recv_wc(
        &poll_1(&b.recv_cq, "receive"),
        2,
        len,
        Some(0x1234),
        b.qpn(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send"), 1, len, a.qpn());
    let image = b.recv_mr.to_vec();
    assert_bytes_eq(&image[..len], &msg, "message after RNR");
    assert!(image[len..].iter().all(|&x| x == CANARY));
    assert!(b.counters().rnr_naks_sent >= 1);
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn rnr_retry_zero_fails_with_rnr_retry_exc_err() {
    let opts = RcConnectOptions {
        rnr_retry: 0,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 18, 19, &SideConfig::default(), &opts);
    a.qp.post_send(&[
        SendWr::send(1, vec![a.send_mr.sge(0, 64).unwrap()]),
        SendWr::send(2, vec![a.send_mr.sge(0, 64).unwrap()]),
    ])
    .expect("post_send");
    let s = poll_n(&a.send_cq, 2, "sender completions");
    assert_eq!(s[0].wr_id, 1, "{:?}", s[0]);
    assert_eq!(s[0].status, WcStatus::RnrRetryExcErr, "{:?}", s[0]);
    check_flushed(&s[1], 2, a.qpn());
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert_eq!(a.counters().rnr_naks_received, 1);
    // RNR is not an error for the responder.
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn rnr_retry_three_gives_up_after_exactly_four_rnr_naks() {
    let opts = RcConnectOptions {
        rnr_retry: 3,
        min_rnr_timer: 1,
        timeout: 20, // ~4 s: no ACK timeout may interleave a transport retry
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 20, 21, &SideConfig::default(), &opts);
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 64).unwrap()]));
    let wc = poll_1(&a.send_cq, "send");
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "{wc:?}");
    assert_eq!(a.counters().rnr_naks_received, 4, "{:?}", a.counters());
    assert_eq!(b.counters().rnr_naks_sent, 4, "{:?}", b.counters());
}

#[test]
fn rnr_on_a_multi_packet_message_is_retried_from_its_first_packet() {
    let opts = RcConnectOptions {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 22, 23, &SideConfig::default(), &opts);
    let len = 20_000; // 20 packets at MTU 1024
    let msg = pattern(6, len);
    a.send_mr.write(0, &msg).unwrap();
    b.recv_mr.fill(CANARY).unwrap();
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, len as u32).unwrap()]));
    std::thread::sleep(Duration::from_millis(50));
    wait_until("an RNR NAK", || a.counters().rnr_naks_received >= 1);
    b.post_recv(2, vec![b.recv_mr.sge(0, 32_768).unwrap()]);
    check_recv_wc(
        &poll_1(&b.recv_cq, "receive"),
        2,
        len,
        None,
        b.qpn(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send"), 1, len, a.qpn());
    let image = b.recv_mr.to_vec();
    assert_bytes_eq(&image[..len], &msg, "message after RNR");
    assert!(image[len..].iter().all(|&x| x == CANARY));
}

#[test]
fn receive_into_memory_without_local_write_fails_without_writing() {
    let (a, b) = rc_pair(
        FILE,
        26,
        27,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    // The receive buffer is registered read-only: the responder may not write into it.
    let ro =
        b.pd.register(
            softverbs_conformance::buffer(4096),
            softverbs::AccessFlags::empty(),
        )
        .expect("read-only MR");
    b.post_recv(1, vec![ro.sge(0, 4096).unwrap()]);
    a.send_mr.write(0, &pattern(8, 100)).unwrap();
    a.post_send(SendWr::send(2, vec![a.send_mr.sge(0, 100).unwrap()]));

    let r = poll_1(&b.recv_cq, "receive");
    assert_eq!(r.wr_id, 1, "{r:?}");
    // rxe reports LOC_QP_OP_ERR here and hardware LOC_PROT_ERR; either way not a success.
    assert!(
        matches!(r.status, WcStatus::LocProtErr | WcStatus::LocQpOpErr),
        "{r:?}"
    );
    let s = poll_1(&a.send_cq, "send");
    assert_eq!(s.wr_id, 2, "{s:?}");
    assert_eq!(s.status, WcStatus::RemOpErr, "{s:?}");
    assert!(ro.to_vec().iter().all(|&x| x == 0), "read-only MR written");
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}

#[test]
fn requests_from_a_third_party_address_are_dropped() {
    // a <-> b are connected. c, on a third address, aims a QP at b's QP with exactly the PSN
    // b expects next from a. As rxe does (rxe_recv.c check_addr), b must drop RC packets
    // whose source address is not its peer's, so c's bytes never land in b's memory.
    let opts = RcConnectOptions {
        timeout: 10, // c's send fails fast once unanswered
        retry_cnt: 1,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 28, 29, &SideConfig::default(), &opts);
    let c = Side::new(&open_udp_device(FILE, 30), &SideConfig::default());
    let b_ep = b.qp.endpoint(0, 1).unwrap();
    let expected_from_a = b.qp.query().unwrap().0.rq_psn;
    c.qp.connect_rc(expected_from_a, &b_ep, &opts).unwrap();

    b.recv_mr.fill(CANARY).unwrap();
    b.post_recv(1, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    c.send_mr.write(0, &[0x66; 100]).unwrap();
    c.post_send(SendWr::send(9, vec![c.send_mr.sge(0, 100).unwrap()]));
    // c never gets an ACK (b answers its own peer, if anyone).
    let wc = poll_1(&c.send_cq, "the intruder's send");
    assert_ne!(wc.status, WcStatus::Success, "{wc:?}");

    // The legitimate peer's message is the one b receives.
    let msg = pattern(10, 100);
    a.send_mr.write(0, &msg).unwrap();
    a.post_send(SendWr::send(2, vec![a.send_mr.sge(0, 100).unwrap()]));
    check_recv_wc(
        &poll_1(&b.recv_cq, "receive"),
        1,
        100,
        None,
        b.qpn(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send"), 2, 100, a.qpn());
    assert_bytes_eq(&b.recv_mr.to_vec()[..100], &msg, "b's receive buffer");
}
