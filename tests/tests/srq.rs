//! Shared receive queues over UDP loopback: one SRQ feeding many RC QPs and a UD QP, every
//! buffer used exactly once (rpma_srq_recv(3): an unordered set, never a buffer twice or
//! lost), RNR while it is empty, the limit, and the bad inputs.

use std::collections::HashSet;

use softverbs::{
    AccessFlags, Context, QpType, RcConnectOptions, RecvWr, SendWr, SrqAttr, SrqAttrMask, WcOpcode,
    WcStatus,
};
use softverbs_conformance::*;
use softverbs_testkit::qp_cap;

const FILE: u8 = 35;

fn srq_attr(max_wr: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge: 2,
        srq_limit: 0,
    }
}

/// `n` RC senders on device `na`, each connected to its own QP on device `nb`; all the
/// receiving QPs share one SRQ.
#[test]
fn one_srq_feeds_many_rc_qps_and_no_buffer_is_used_twice_or_lost() {
    const QPS: usize = 4;
    const PER_QP: usize = 25;
    const SLOT: usize = 512;
    let ctx_a = open_udp_device(FILE, 1);
    let ctx_b = open_udp_device(FILE, 2);
    burn_qpns(&ctx_b, 7);
    let pd_b = ctx_b.alloc_pd().unwrap();
    let (srq, granted) = pd_b.create_srq(&srq_attr(256)).unwrap();
    assert_eq!(granted.max_wr, 256);
    let recv_cq = ctx_b.create_cq(512).unwrap();
    let send_cq_b = ctx_b.create_cq(16).unwrap();
    let recv_mr = pd_b
        .register(buffer(QPS * PER_QP * SLOT), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let total = QPS * PER_QP;
    let wrs: Vec<RecvWr> = (0..total)
        .map(|i| RecvWr {
            wr_id: i as u64,
            sg_list: vec![recv_mr.sge(i * SLOT, SLOT as u32).unwrap()],
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    let opts = RcConnectOptions::default();
    for q in 0..QPS {
        let a = Side::new(&ctx_a, &SideConfig::default());
        let qp_b = pd_b
            .qp_builder()
            .srq(&srq)
            .build(&send_cq_b, &recv_cq)
            .unwrap();
        assert_eq!(
            qp_b.cap().max_recv_wr,
            0,
            "an SRQ QP has no receive queue of its own"
        );
        let ep_a = a.qp.endpoint(10 * q as u32, 1).unwrap();
        let ep_b = qp_b.endpoint(77, 1).unwrap();
        a.qp.connect_rc(10 * q as u32, &ep_b, &opts).unwrap();
        qp_b.connect_rc(77, &ep_a, &opts).unwrap();
        senders.push(a);
        receivers.push(qp_b);
    }
    // Interleave the senders so the QPs take from the SRQ concurrently.
    for i in 0..PER_QP {
        for (q, a) in senders.iter().enumerate() {
            let msg = pattern((q * 1000 + i) as u64, 100 + i);
            let off = i * SLOT;
            a.send_mr.write(off, &msg).unwrap();
            let wr = SendWr::send_with_imm(
                i as u64,
                vec![a.send_mr.sge(off, msg.len() as u32).unwrap()],
                (q * 1000 + i) as u32,
            );
            a.post_send(wr);
        }
    }
    for a in &senders {
        poll_n(&a.send_cq, PER_QP, "sends");
    }
    let got = poll_n(&recv_cq, total, "receives from the SRQ");
    let mut used = HashSet::new();
    let mut messages = HashSet::new();
    for wc in &got {
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::Success, WcOpcode::Recv),
            "{wc:?}"
        );
        assert!(used.insert(wc.wr_id), "buffer {} used twice", wc.wr_id);
        assert!(
            messages.insert(wc.imm_data),
            "message {} twice",
            wc.imm_data
        );
        let (q, i) = ((wc.imm_data / 1000) as usize, (wc.imm_data % 1000) as usize);
        assert_eq!(wc.qp_num, receivers[q].qp_num(), "{wc:?}");
        let mut data = vec![0u8; 100 + i];
        recv_mr.read(wc.wr_id as usize * SLOT, &mut data).unwrap();
        assert_eq!(data, pattern(wc.imm_data as u64, 100 + i), "{wc:?}");
    }
    assert_eq!(used.len(), total, "every buffer used once");
    assert_eq!(srq.query().unwrap().max_wr, 256);
}

#[test]
fn an_empty_srq_makes_rc_senders_wait_rnr_and_a_ud_qp_drop() {
    let ctx_a = open_udp_device(FILE, 3);
    let ctx_b = open_udp_device(FILE, 4);
    burn_qpns(&ctx_b, 3);
    let pd_b = ctx_b.alloc_pd().unwrap();
    let (srq, _) = pd_b.create_srq(&srq_attr(8)).unwrap();
    let cq_b = ctx_b.create_cq(32).unwrap();
    let qp_b = pd_b.qp_builder().srq(&srq).build(&cq_b, &cq_b).unwrap();
    let a = Side::new(&ctx_a, &SideConfig::default());
    let opts = RcConnectOptions {
        min_rnr_timer: 1,
        ..RcConnectOptions::default()
    };
    a.qp.connect_rc(1, &qp_b.endpoint(2, 1).unwrap(), &opts)
        .unwrap();
    qp_b.connect_rc(2, &a.qp.endpoint(1, 1).unwrap(), &opts)
        .unwrap();
    a.send_mr.write(0, b"waiting").unwrap();
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 7).unwrap()]));
    wait_until("an RNR NAK from the empty SRQ", || {
        a.counters().rnr_naks_received > 0
    });
    assert_cq_empty(&a.send_cq, "the send waits (rnr_retry 7 = infinite)");
    let recv_mr = pd_b
        .register(buffer(4096), AccessFlags::LOCAL_WRITE)
        .unwrap();
    srq.post_recv(&[RecvWr {
        wr_id: 42,
        sg_list: vec![recv_mr.sge(0, 64).unwrap()],
    }])
    .unwrap();
    check_send_wc(
        &poll_1(&a.send_cq, "send after the SRQ was filled"),
        1,
        7,
        a.qpn(),
    );
    let wc = poll_1(&cq_b, "receive");
    assert_eq!((wc.wr_id, wc.byte_len), (42, 7));

    // A UD QP on the same SRQ: an empty SRQ drops its datagrams (UD has no RNR).
    let qp_ud = pd_b
        .qp_builder()
        .qp_type(QpType::Ud)
        .srq(&srq)
        .build(&cq_b, &cq_b)
        .unwrap();
    qp_ud.activate_ud(9, 0).unwrap();
    let pd_a = ctx_a.alloc_pd().unwrap();
    let cq_a = ctx_a.create_cq(8).unwrap();
    let ud_a = pd_a
        .qp_builder()
        .qp_type(QpType::Ud)
        .cap(qp_cap(4, 1))
        .build(&cq_a, &cq_a)
        .unwrap();
    ud_a.activate_ud(9, 0).unwrap();
    let ah = pd_a
        .create_ah(&softverbs::AhAttr {
            dgid: ctx_b.query_gid(1, 1).unwrap().gid,
            sgid_index: 1,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    let mr_a = pd_a.register(buffer(64), AccessFlags::LOCAL_WRITE).unwrap();
    let mut wr = SendWr::send(5, vec![mr_a.sge(0, 8).unwrap()]);
    wr.ud = Some(ah.dest(qp_ud.qp_num(), 9));
    ud_a.post_send(&[wr.clone()]).unwrap();
    poll_1(&cq_a, "UD send");
    let dropped = || {
        ctx_b
            .emulator()
            .unwrap()
            .qp_counters(qp_ud.qp_num())
            .unwrap()
            .dropped_packets
    };
    wait_until("the UD drop", || dropped() == 1);
    srq.post_recv(&[RecvWr {
        wr_id: 43,
        sg_list: vec![recv_mr.sge(1024, 64).unwrap()],
    }])
    .unwrap();
    ud_a.post_send(&[wr]).unwrap();
    poll_1(&cq_a, "UD send");
    let wc = poll_1(&cq_b, "UD receive from the SRQ");
    assert_eq!((wc.wr_id, wc.byte_len, wc.qp_num), (43, 48, qp_ud.qp_num()));
}

#[test]
fn the_limit_disarms_once_it_is_crossed() {
    let (a, b, srq, cq_b, recv_mr) = srq_rc_pair(5, 6, 16);
    let wrs: Vec<RecvWr> = (0..6)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: vec![recv_mr.sge(i as usize * 64, 64).unwrap()],
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    let events = recv_mr.pd().context().async_events().unwrap();
    srq.arm_limit(4).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 4);
    let no_event = |what: &str| {
        let got = events.get(Some(std::time::Duration::ZERO)).unwrap();
        assert_eq!(got, None, "{what}");
    };
    let send = |id: u64| {
        a.post_send(SendWr::send(id, vec![a.send_mr.sge(0, 8).unwrap()]));
        poll_1(&a.send_cq, "send");
        poll_1(&cq_b, "receive");
    };
    send(1); // 5 left: not below 4
    assert_eq!(srq.query().unwrap().srq_limit, 4, "still armed");
    no_event("5 left");
    send(2); // 4 left: not below 4
    assert_eq!(srq.query().unwrap().srq_limit, 4, "still armed");
    no_event("4 left");
    send(3); // 3 left: below the limit, it fires and disarms
    assert_eq!(srq.query().unwrap().srq_limit, 0, "disarmed after firing");
    let event = events.get(Some(WAIT)).unwrap().expect("SRQ_LIMIT_REACHED");
    assert_eq!(event.kind, softverbs::AsyncEventKind::SrqLimitReached);
    assert_eq!(event.element, softverbs::AsyncElement::Srq(srq.id()));
    send(4);
    no_event("the limit fires once");
    // A QP on the SRQ that enters ERR raises LAST_WQE_REACHED.
    let err = softverbs::QpAttr {
        qp_state: softverbs::QpState::Err,
        ..Default::default()
    };
    b.modify(&err, softverbs::QpAttrMask::STATE).unwrap();
    let event = events.get(Some(WAIT)).unwrap().expect("LAST_WQE_REACHED");
    assert_eq!(event.kind, softverbs::AsyncEventKind::QpLastWqeReached);
    assert_eq!(event.element, softverbs::AsyncElement::Qp(b.qp_num()));
    drop(b);
}

type SrqRcPair = (
    Side,
    softverbs::Qp,
    softverbs::Srq,
    softverbs::Cq,
    softverbs::Mr,
);

fn srq_rc_pair(na: u8, nb: u8, max_wr: u32) -> SrqRcPair {
    let ctx_a: Context = open_udp_device(FILE, na);
    let ctx_b = open_udp_device(FILE, nb);
    burn_qpns(&ctx_b, 2);
    let pd_b = ctx_b.alloc_pd().unwrap();
    let (srq, _) = pd_b.create_srq(&srq_attr(max_wr)).unwrap();
    let cq_b = ctx_b.create_cq(64).unwrap();
    let qp_b = pd_b.qp_builder().srq(&srq).build(&cq_b, &cq_b).unwrap();
    let a = Side::new(&ctx_a, &SideConfig::default());
    let opts = RcConnectOptions::default();
    a.qp.connect_rc(1, &qp_b.endpoint(2, 1).unwrap(), &opts)
        .unwrap();
    qp_b.connect_rc(2, &a.qp.endpoint(1, 1).unwrap(), &opts)
        .unwrap();
    let recv_mr = pd_b
        .register(buffer(64 * 1024), AccessFlags::LOCAL_WRITE)
        .unwrap();
    (a, qp_b, srq, cq_b, recv_mr)
}

#[test]
fn bad_input_gets_clear_errors() {
    let (_a, qp_b, srq, _cq, recv_mr) = srq_rc_pair(7, 8, 4);
    // A QP on an SRQ has no receive queue of its own.
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![recv_mr.sge(0, 8).unwrap()],
    };
    let e = qp_b.post_recv(std::slice::from_ref(&wr)).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, libc::EINVAL));
    // Full, too many SGEs: the index of the failing WR.
    let e = srq.post_recv(&vec![wr.clone(); 5]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (4, libc::ENOMEM));
    let three = RecvWr {
        wr_id: 9,
        sg_list: vec![recv_mr.sge(0, 8).unwrap(); 3],
    };
    let fresh = srq_rc_pair(9, 10, 4).2;
    let e = fresh.post_recv(&[wr.clone(), three]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (1, libc::EINVAL));
    // Limit above max_wr; shrinking below what is posted.
    assert_eq!(srq.arm_limit(5).unwrap_err().errno(), libc::EINVAL);
    let shrink = SrqAttr {
        max_wr: 2,
        ..SrqAttr::default()
    };
    assert_eq!(
        srq.modify(&shrink, SrqAttrMask::MAX_WR)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    // Creation limits.
    let pd = recv_mr.pd();
    assert_eq!(
        pd.create_srq(&srq_attr(0)).err().unwrap().errno(),
        libc::EINVAL
    );
    let limit_too_big = SrqAttr {
        srq_limit: 9,
        ..srq_attr(8)
    };
    assert_eq!(
        pd.create_srq(&limit_too_big).err().unwrap().errno(),
        libc::EINVAL
    );
    // Through the backend: destroy while a QP uses it; post to a destroyed SRQ.
    let backend = pd.context().backend().clone();
    assert_eq!(
        backend.destroy_srq(srq.id()).unwrap_err().errno(),
        libc::EBUSY
    );
    let (id, _) = backend.create_srq(pd.id(), &srq_attr(4)).unwrap();
    backend.destroy_srq(id).unwrap();
    let e = backend.post_srq_recv(id, &[wr]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, libc::ENOENT));
}

#[test]
fn a_qp_entering_error_flushes_the_wqe_it_holds_and_leaves_the_srq_alone() {
    let (a, qp_b, srq, cq_b, recv_mr) = srq_rc_pair(11, 12, 8);
    let wrs: Vec<RecvWr> = (0..3)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: vec![recv_mr.sge(i as usize * 64, 64).unwrap()],
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 8).unwrap()]));
    poll_1(&cq_b, "receive");
    let err = softverbs::QpAttr {
        qp_state: softverbs::QpState::Err,
        ..Default::default()
    };
    qp_b.modify(&err, softverbs::QpAttrMask::STATE).unwrap();
    assert_cq_empty(&cq_b, "the SRQ's WQEs are not the QP's to flush");
    drop(qp_b);
    // The two WQEs left are still there for another QP.
    let ctx_b = recv_mr.pd().context().clone();
    let qp2 = recv_mr
        .pd()
        .qp_builder()
        .srq(&srq)
        .build(&cq_b, &cq_b)
        .unwrap();
    let a2 = Side::new(&a.ctx, &SideConfig::default());
    let opts = RcConnectOptions::default();
    a2.qp
        .connect_rc(5, &qp2.endpoint(6, 1).unwrap(), &opts)
        .unwrap();
    qp2.connect_rc(6, &a2.qp.endpoint(5, 1).unwrap(), &opts)
        .unwrap();
    for id in [10, 11] {
        a2.post_send(SendWr::send(id, vec![a2.send_mr.sge(0, 8).unwrap()]));
    }
    let got: HashSet<u64> = poll_n(&cq_b, 2, "receives on the new QP")
        .iter()
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(got, HashSet::from([1, 2]));
    drop(ctx_b);
}
