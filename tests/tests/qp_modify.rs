//! The RC QP state machine through ibv_modify_qp / ibv_query_qp: the required attribute masks
//! of RESET -> INIT -> RTR -> RTS set by hand, query_qp reflecting them, EINVAL for missing
//! attributes and illegal transitions, any state -> ERR, ERR -> RESET and reuse.
//!
//! File number 3: devices on 127.10.3.n.

use softverbs::{
    AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, QpType, RcConnectOptions, RecvWr, WcOpcode,
};
use softverbs_api::qp::AhAttr;
use softverbs_conformance::{
    check_flushed, connect_pair, open_udp_device, poll_1, rc_pair, send_and_verify, side_pair,
    Side, SideConfig,
};
use softverbs_testkit::{ah_to, RcMoves};

const FILE: u8 = 3;

fn init_attr(access: AccessFlags) -> (QpAttr, QpAttrMask) {
    RcMoves {
        access,
        ..RcMoves::default()
    }
    .init()
}

fn rtr_attr(dgid: Gid, dest_qpn: u32, rq_psn: u32, mtu: Mtu) -> (QpAttr, QpAttrMask) {
    RcMoves {
        path_mtu: mtu,
        dest_qp_num: dest_qpn,
        rq_psn,
        min_rnr_timer: 9,
        ah_attr: AhAttr {
            sgid_index: 1,
            hop_limit: 64,
            ..ah_to(dgid)
        },
        ..RcMoves::default()
    }
    .rtr()
}

fn rts_attr(sq_psn: u32) -> (QpAttr, QpAttrMask) {
    RcMoves {
        sq_psn,
        timeout: 17,
        retry_cnt: 5,
        rnr_retry: 6,
        max_rd_atomic: 3,
        ..RcMoves::default()
    }
    .rts()
}

fn gid_of(side: &Side) -> Gid {
    side.ctx.query_gid(1, 1).expect("gid").gid
}

#[test]
fn manual_reset_init_rtr_rts_is_reflected_by_query_and_carries_traffic() {
    let cfg = SideConfig::default();
    let (a, b) = side_pair(&open_udp_device(FILE, 1), &open_udp_device(FILE, 2), &cfg);
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;

    // A fresh QP is in RESET and reports its creation attributes.
    let (attr, init) = a.qp.query().expect("query");
    assert_eq!(attr.qp_state, QpState::Reset);
    assert_eq!(attr.cur_qp_state, QpState::Reset);
    assert_eq!(init.qp_type, QpType::Rc);
    assert_eq!(init.send_cq, a.send_cq.id());
    assert_eq!(init.recv_cq, a.recv_cq.id());
    assert!(!init.sq_sig_all);
    assert_eq!(attr.cap.max_send_wr, cfg.cap.max_send_wr);
    assert_eq!(attr.cap.max_recv_wr, cfg.cap.max_recv_wr);
    assert_eq!(a.qp.cap().max_send_sge, cfg.cap.max_send_sge);

    for (side, peer, sq_psn, rq_psn) in [(&a, &b, 0x00_0100, 0xab_cdef), (&b, &a, 0xab_cdef, 0x100)]
    {
        let (attr, mask) = init_attr(access);
        side.qp.modify(&attr, mask).expect("RESET -> INIT");
        let (q, _) = side.qp.query().expect("query");
        assert_eq!(q.qp_state, QpState::Init);
        assert_eq!(q.qp_access_flags, access);
        assert_eq!(q.port_num, 1);
        assert_eq!(q.pkey_index, 0);

        let (attr, mask) = rtr_attr(gid_of(peer), peer.qpn(), rq_psn, Mtu::Mtu2048);
        side.qp.modify(&attr, mask).expect("INIT -> RTR");
        let (q, _) = side.qp.query().expect("query");
        assert_eq!(q.qp_state, QpState::Rtr);
        assert_eq!(q.dest_qp_num, peer.qpn());
        assert_eq!(q.path_mtu, Mtu::Mtu2048);
        assert_eq!(q.rq_psn, rq_psn);
        assert_eq!(q.max_dest_rd_atomic, 4);
        assert_eq!(q.min_rnr_timer, 9);
        assert_eq!(q.ah_attr.dgid, gid_of(peer));
        assert_eq!(q.ah_attr.sgid_index, 1);
        assert_eq!(q.ah_attr.port_num, 1);

        let (attr, mask) = rts_attr(sq_psn);
        side.qp.modify(&attr, mask).expect("RTR -> RTS");
        let (q, _) = side.qp.query().expect("query");
        assert_eq!(q.qp_state, QpState::Rts);
        assert_eq!(q.cur_qp_state, QpState::Rts);
        assert_eq!(q.sq_psn, sq_psn);
        assert_eq!(q.timeout, 17);
        assert_eq!(q.retry_cnt, 5);
        assert_eq!(q.rnr_retry, 6);
        assert_eq!(q.max_rd_atomic, 3);
        // Attributes set earlier are kept.
        assert_eq!(q.dest_qp_num, peer.qpn());
        assert_eq!(q.path_mtu, Mtu::Mtu2048);
        assert_eq!(q.rq_psn, rq_psn);
        assert_eq!(q.qp_access_flags, access);
        assert_eq!(side.qp.state().unwrap(), QpState::Rts);
    }

    // The hand-made connection carries traffic both ways (5000 bytes: 3 packets at 2048).
    send_and_verify(&a, &b, 5000, 1);
    send_and_verify(&b, &a, 5000, 2);
}

#[test]
fn missing_required_attributes_are_einval_and_change_nothing() {
    let cfg = SideConfig::default();
    let a = Side::new(&open_udp_device(FILE, 3), &cfg);
    let peer_gid = a.ctx.query_gid(1, 1).unwrap().gid;

    let (attr, mask) = init_attr(AccessFlags::REMOTE_WRITE);
    for dropped in [
        QpAttrMask::PKEY_INDEX,
        QpAttrMask::PORT,
        QpAttrMask::ACCESS_FLAGS,
    ] {
        let err =
            a.qp.modify(&attr, mask.difference(dropped))
                .expect_err("INIT without a required attribute");
        assert_eq!(err.errno(), 22, "without {dropped:?}: {err}");
        assert_eq!(a.qp.state().unwrap(), QpState::Reset);
    }
    a.qp.modify(&attr, mask).expect("RESET -> INIT");

    let (attr, mask) = rtr_attr(peer_gid, 0x99, 0, Mtu::Mtu1024);
    for dropped in [
        QpAttrMask::AV,
        QpAttrMask::PATH_MTU,
        QpAttrMask::DEST_QPN,
        QpAttrMask::RQ_PSN,
        QpAttrMask::MAX_DEST_RD_ATOMIC,
        QpAttrMask::MIN_RNR_TIMER,
    ] {
        let err =
            a.qp.modify(&attr, mask.difference(dropped))
                .expect_err("RTR without a required attribute");
        assert_eq!(err.errno(), 22, "without {dropped:?}: {err}");
        assert_eq!(a.qp.state().unwrap(), QpState::Init);
    }
    // A zero destination GID is refused too (RoCE has no LID routing).
    let mut zero_gid = attr;
    zero_gid.ah_attr.dgid = Gid::default();
    assert_eq!(a.qp.modify(&zero_gid, mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Init);
    a.qp.modify(&attr, mask).expect("INIT -> RTR");

    let (attr, mask) = rts_attr(0);
    for dropped in [
        QpAttrMask::SQ_PSN,
        QpAttrMask::TIMEOUT,
        QpAttrMask::RETRY_CNT,
        QpAttrMask::RNR_RETRY,
        QpAttrMask::MAX_QP_RD_ATOMIC,
    ] {
        let err =
            a.qp.modify(&attr, mask.difference(dropped))
                .expect_err("RTS without a required attribute");
        assert_eq!(err.errno(), 22, "without {dropped:?}: {err}");
        assert_eq!(a.qp.state().unwrap(), QpState::Rtr);
    }
    // Out-of-range values are EINVAL as well.
    let mut bad = attr;
    bad.retry_cnt = 8;
    assert_eq!(a.qp.modify(&bad, mask).unwrap_err().errno(), 22);
    let mut bad = attr;
    bad.sq_psn = 1 << 24;
    assert_eq!(a.qp.modify(&bad, mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Rtr);
    a.qp.modify(&attr, mask).expect("RTR -> RTS");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn illegal_transitions_are_einval() {
    let cfg = SideConfig::default();
    let a = Side::new(&open_udp_device(FILE, 4), &cfg);
    let gid = a.ctx.query_gid(1, 1).unwrap().gid;

    // RESET -> RTS and RESET -> RTR, even with every attribute those states need.
    let (rts, rts_mask) = rts_attr(0);
    assert_eq!(a.qp.modify(&rts, rts_mask).unwrap_err().errno(), 22);
    let (rtr, rtr_mask) = rtr_attr(gid, 0x99, 0, Mtu::Mtu1024);
    assert_eq!(a.qp.modify(&rtr, rtr_mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Reset);

    // INIT -> RTS skips RTR.
    let (init, init_mask) = init_attr(AccessFlags::empty());
    a.qp.modify(&init, init_mask).expect("RESET -> INIT");
    assert_eq!(a.qp.modify(&rts, rts_mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Init);

    // RTR -> INIT goes backwards.
    a.qp.modify(&rtr, rtr_mask).expect("INIT -> RTR");
    assert_eq!(a.qp.modify(&init, init_mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Rtr);

    // ERR -> RTS: out of ERR only RESET (and ERR) are reachable.
    let err_attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    a.qp.modify(&err_attr, QpAttrMask::STATE).expect("-> ERR");
    assert_eq!(a.qp.modify(&rts, rts_mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.modify(&init, init_mask).unwrap_err().errno(), 22);
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
}

#[test]
fn every_state_can_go_to_err_and_flushes_posted_receives() {
    let cfg = SideConfig::default();
    let ctx = open_udp_device(FILE, 5);
    let gid = ctx.query_gid(1, 1).unwrap().gid;
    let to_err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let (init, init_mask) = init_attr(AccessFlags::empty());
    let (rtr, rtr_mask) = rtr_attr(gid, 0x99, 0, Mtu::Mtu1024);
    let (rts, rts_mask) = rts_attr(0);
    let steps: [(&QpAttr, QpAttrMask); 3] =
        [(&init, init_mask), (&rtr, rtr_mask), (&rts, rts_mask)];
    for depth in 0..=3usize {
        let side = Side::new(&ctx, &cfg);
        for (attr, mask) in &steps[..depth] {
            side.qp.modify(attr, *mask).expect("advance");
        }
        let reached = side.qp.state().unwrap();
        // Receives may be posted from INIT on; going to ERR flushes them, in order.
        let posted: Vec<u64> = if depth > 0 {
            let ids = vec![10 + depth as u64, 20 + depth as u64];
            let wrs: Vec<RecvWr> = ids
                .iter()
                .map(|&wr_id| RecvWr {
                    wr_id,
                    sg_list: vec![side.recv_mr.sge(0, 64).unwrap()],
                })
                .collect();
            side.qp.post_recv(&wrs).expect("post_recv");
            ids
        } else {
            Vec::new()
        };
        side.qp
            .modify(&to_err, QpAttrMask::STATE)
            .unwrap_or_else(|e| panic!("{reached:?} -> ERR: {e}"));
        assert_eq!(side.qp.state().unwrap(), QpState::Err);
        for &id in &posted {
            let wc = poll_1(&side.recv_cq, "flushed receive");
            check_flushed(&wc, id, side.qpn());
            assert_eq!(wc.opcode, WcOpcode::Recv);
        }
        // ERR -> ERR is allowed too.
        side.qp
            .modify(&to_err, QpAttrMask::STATE)
            .expect("ERR -> ERR");
        // A receive posted in ERR completes at once, flushed, by the post call itself.
        let late = 30 + depth as u64;
        side.qp
            .post_recv(&[RecvWr {
                wr_id: late,
                sg_list: vec![side.recv_mr.sge(0, 64).unwrap()],
            }])
            .expect("post_recv in ERR");
        let wc = poll_1(&side.recv_cq, "receive posted in ERR");
        check_flushed(&wc, late, side.qpn());
    }
}

#[test]
fn err_then_reset_makes_the_qp_reusable() {
    let opts = RcConnectOptions::default();
    let (a, b) = rc_pair(FILE, 6, 7, &SideConfig::default(), &opts);
    send_and_verify(&a, &b, 3000, 1);

    let to = |s: QpState| QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    for side in [&a, &b] {
        side.qp
            .modify(&to(QpState::Err), QpAttrMask::STATE)
            .expect("RTS -> ERR");
        side.qp
            .modify(&to(QpState::Reset), QpAttrMask::STATE)
            .expect("ERR -> RESET");
        let (q, _) = side.qp.query().expect("query");
        assert_eq!(q.qp_state, QpState::Reset);
        // Receives are refused in RESET.
        let err = side
            .qp
            .post_recv(&[RecvWr {
                wr_id: 1,
                sg_list: vec![],
            }])
            .unwrap_err();
        assert_eq!((err.index, err.error.errno()), (0, 22));
    }
    // Nothing was outstanding, so nothing was flushed.
    softverbs_conformance::assert_cq_empty(&a.send_cq, "a send CQ");
    softverbs_conformance::assert_cq_empty(&b.recv_cq, "b recv CQ");

    // Connect again with new PSNs and a different MTU, then move data both ways.
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu512,
        ..RcConnectOptions::default()
    };
    connect_pair(&a, &b, 0x77_0000, 0x5, &opts);
    assert_eq!(a.qp.query().unwrap().0.path_mtu, Mtu::Mtu512);
    assert_eq!(a.qp.query().unwrap().0.sq_psn, 0x77_0000);
    send_and_verify(&a, &b, 3000, 2);
    send_and_verify(&b, &a, 1500, 3);
}

#[test]
fn reset_takes_the_qps_completions_out_of_its_cqs_as_mlx5_does() {
    let opts = RcConnectOptions::default();
    let (a, b) = rc_pair(FILE, 10, 11, &SideConfig::default(), &opts);
    let to = |s: QpState| QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    // Two receives flushed by ERR and left unpolled, as after a failed round of traffic.
    let wrs: Vec<RecvWr> = [31, 32]
        .iter()
        .map(|&wr_id| RecvWr {
            wr_id,
            sg_list: vec![b.recv_mr.sge(0, 64).unwrap()],
        })
        .collect();
    b.qp.post_recv(&wrs).expect("post_recv");
    b.qp.modify(&to(QpState::Err), QpAttrMask::STATE)
        .expect("RTS -> ERR");
    b.qp.modify(&to(QpState::Reset), QpAttrMask::STATE)
        .expect("ERR -> RESET");
    softverbs_conformance::assert_cq_empty(&b.recv_cq, "b recv CQ after RESET");
    // The QP's completions after the RESET arrive as usual.
    a.qp.modify(&to(QpState::Err), QpAttrMask::STATE)
        .expect("RTS -> ERR");
    a.qp.modify(&to(QpState::Reset), QpAttrMask::STATE)
        .expect("ERR -> RESET");
    connect_pair(&a, &b, 0x10_0000, 0x20_0000, &opts);
    send_and_verify(&a, &b, 2000, 4);
    send_and_verify(&b, &a, 100, 5);
}

#[test]
fn query_qp_reports_the_current_psns_after_traffic() {
    let opts = RcConnectOptions::default(); // MTU 1024
    let cfg = SideConfig::default();
    let (a, b) = side_pair(&open_udp_device(FILE, 8), &open_udp_device(FILE, 9), &cfg);
    let start = 0xff_fffe; // wraps after two packets
    connect_pair(&a, &b, start, 0x100, &opts);
    assert_eq!(a.qp.query().unwrap().0.sq_psn, start);
    assert_eq!(b.qp.query().unwrap().0.rq_psn, start);
    // 5000 bytes at MTU 1024: 5 packets, PSNs 0xfffffe..=0x000002.
    send_and_verify(&a, &b, 5000, 1);
    let next = (start + 5) & 0xff_ffff;
    // As rxe (and mlx5) report them: the next PSN to send, the next PSN expected.
    assert_eq!(a.qp.query().unwrap().0.sq_psn, next);
    assert_eq!(b.qp.query().unwrap().0.rq_psn, next);
    // The other direction has not moved.
    assert_eq!(b.qp.query().unwrap().0.sq_psn, 0x100);
    assert_eq!(a.qp.query().unwrap().0.rq_psn, 0x100);
}
