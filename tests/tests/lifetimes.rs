//! Handle lifetimes and destroy order: children keep their parents alive whatever order the
//! application drops handles in, nothing panics, the device is really released (its UDP port
//! can be bound again) and can be opened again; many QPs can be created and destroyed.
//!
//! File number 7: devices on 127.10.7.n.

use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};

use softverbs::{
    AccessFlags, Context, QpAttr, QpAttrMask, QpState, RcConnectOptions, RecvWr, SendWr, WcStatus,
};
use softverbs_conformance::{
    assert_bytes_eq, assert_cq_empty, buffer, burn_qpns, check_recv_wc, check_send_wc,
    connect_pair, device_name, open_udp_device, pattern, poll_1, rc_pair, send_and_verify,
    side_pair, test_ip, wait_until, Side, SideConfig,
};

const FILE: u8 = 7;

/// Binds (and at once releases) the device's UDP address: only possible once the device has
/// shut down and closed its socket.
fn assert_port_released(n: u8) {
    let addr = SocketAddr::new(test_ip(FILE, n), 4791);
    let sock = UdpSocket::bind(addr)
        .unwrap_or_else(|e| panic!("{addr} still bound after every handle was dropped: {e}"));
    drop(sock);
}

#[test]
fn qp_keeps_its_cq_pd_and_context_alive() {
    let peer_ctx = open_udp_device(FILE, 2);
    burn_qpns(&peer_ctx, 5);
    let peer = Side::new(&peer_ctx, &SideConfig::default());
    drop(peer_ctx);
    let peer_qpn_check;
    {
        let ctx = open_udp_device(FILE, 1);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = pd.qp_builder().build(&cq, &cq).unwrap();
        let send_mr = pd.register(buffer(8192), AccessFlags::LOCAL_WRITE).unwrap();
        let recv_mr = pd.register(buffer(8192), AccessFlags::LOCAL_WRITE).unwrap();
        // The application lets go of the CQ, the PD and the context; the QP and MRs remain.
        drop(cq);
        drop(pd);
        drop(ctx);

        let opts = RcConnectOptions::default();
        let ep = qp.endpoint(0x100, 1).unwrap();
        let peer_ep = peer.qp.endpoint(0x200, 1).unwrap();
        qp.connect_rc(0x100, &peer_ep, &opts).unwrap();
        peer.qp.connect_rc(0x200, &ep, &opts).unwrap();

        // Both directions work, with completions on the CQ reached through the QP.
        let msg = pattern(1, 6000);
        send_mr.write(0, &msg).unwrap();
        peer.post_recv(1, vec![peer.recv_mr.sge(0, 8192).unwrap()]);
        qp.post_send(&[SendWr::send(2, vec![send_mr.sge(0, 6000).unwrap()])])
            .unwrap();
        check_send_wc(&poll_1(qp.send_cq(), "send"), 2, 6000, qp.qp_num());
        check_recv_wc(
            &poll_1(&peer.recv_cq, "peer recv"),
            1,
            6000,
            None,
            peer.qpn(),
            qp.qp_num(),
        );
        assert_bytes_eq(&peer.recv_mr.to_vec()[..6000], &msg, "a -> peer");

        qp.post_recv(&[RecvWr {
            wr_id: 3,
            sg_list: vec![recv_mr.sge(0, 8192).unwrap()],
        }])
        .unwrap();
        let back = pattern(2, 3000);
        peer.send_mr.write(0, &back).unwrap();
        peer.post_send(SendWr::send(4, vec![peer.send_mr.sge(0, 3000).unwrap()]));
        let wc = poll_1(qp.recv_cq(), "recv");
        check_recv_wc(&wc, 3, 3000, None, qp.qp_num(), peer.qpn());
        check_send_wc(&poll_1(&peer.send_cq, "peer send"), 4, 3000, peer.qpn());
        assert_bytes_eq(&recv_mr.to_vec()[..3000], &back, "peer -> a");
        peer_qpn_check = wc.src_qp;

        // The PD handle is gone but the MRs still know it.
        assert_eq!(send_mr.pd().id(), qp.pd().id());
        assert_eq!(qp.pd().context().name(), device_name(FILE, 1));
        // Drop order: QP first, then the MRs (the last users of the PD and context).
        drop(qp);
        drop(send_mr);
        drop(recv_mr);
    }
    assert_eq!(peer_qpn_check, peer.qpn());
    assert_port_released(1);

    // The device opens again and works.
    let again = Context::open(&device_name(FILE, 1)).expect("reopen");
    let a = Side::new(&again, &SideConfig::default());
    peer.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap();
    connect_pair(&a, &peer, 0x300, 0x400, &RcConnectOptions::default());
    send_and_verify(&a, &peer, 4000, 5);
    send_and_verify(&peer, &a, 4000, 6);
}

#[test]
fn mr_keeps_its_pd_alive() {
    let (a, b) = rc_pair(
        FILE,
        3,
        4,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    // A second MR on b whose PD handle is dropped right away (b's own PD is shared, so use a
    // PD of its own that only the MR keeps).
    let pd = b.ctx.alloc_pd().unwrap();
    let pd_id = pd.id();
    let mr = pd.register(buffer(4096), AccessFlags::LOCAL_WRITE).unwrap();
    drop(pd);
    assert_eq!(mr.pd().id(), pd_id);
    mr.write(0, b"still registered").unwrap();
    let mut out = [0u8; 16];
    mr.read(0, &mut out).unwrap();
    assert_eq!(&out, b"still registered");
    drop(mr);

    // Dropping b's own PD handle before its MRs and QP: traffic still flows into them.
    let Side {
        ctx,
        pd,
        send_cq,
        recv_cq,
        qp,
        send_mr,
        recv_mr,
    } = b;
    drop(pd);
    drop(ctx);
    recv_mr.fill(0xEE).unwrap();
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: vec![recv_mr.sge(0, 2000).unwrap()],
    }])
    .unwrap();
    let msg = pattern(3, 2000);
    a.send_mr.write(0, &msg).unwrap();
    a.post_send(SendWr::send(2, vec![a.send_mr.sge(0, 2000).unwrap()]));
    check_recv_wc(
        &poll_1(&recv_cq, "recv"),
        1,
        2000,
        None,
        qp.qp_num(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send"), 2, 2000, a.qpn());
    assert_bytes_eq(&recv_mr.to_vec()[..2000], &msg, "message");
    // MRs before the QP and CQs this time.
    drop(recv_mr);
    drop(send_mr);
    drop(send_cq);
    drop(recv_cq);
    drop(qp);
    assert_port_released(4);
    drop(a);
    assert_port_released(3);
}

#[test]
fn destroying_a_qp_drops_its_work_requests_without_completions() {
    let opts = RcConnectOptions {
        timeout: 10, // ~4 ms
        retry_cnt: 1,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 5, 6, &SideConfig::default(), &opts);
    send_and_verify(&a, &b, 100, 1);
    let Side {
        ctx: b_ctx,
        qp: b_qp,
        recv_cq: b_recv_cq,
        recv_mr: b_recv_mr,
        ..
    } = b;
    for id in 0..4 {
        b_qp.post_recv(&[RecvWr {
            wr_id: id,
            sg_list: vec![b_recv_mr.sge(0, 64).unwrap()],
        }])
        .unwrap();
    }
    drop(b_qp);
    assert_cq_empty(&b_recv_cq, "receives of a destroyed QP");

    // The peer now sends into the void: its packets are dropped as addressed to an unknown
    // QP, and after the one retry it fails with RETRY_EXC_ERR.
    let unknown = || {
        b_ctx
            .emulator()
            .unwrap()
            .counters()
            .unknown_qp
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let unknown_before = unknown();
    let sent_before = a.counters();
    a.post_send(SendWr::send(7, vec![a.send_mr.sge(0, 64).unwrap()]));
    let wc = poll_1(&a.send_cq, "send to a destroyed QP");
    assert_eq!(wc.wr_id, 7);
    assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc:?}");
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    let sent_after = a.counters();
    assert_eq!(sent_after.sent_requests - sent_before.sent_requests, 2);
    assert_eq!(
        sent_after.retransmitted_packets - sent_before.retransmitted_packets,
        1
    );
    assert_eq!(sent_after.ack_timeouts - sent_before.ack_timeouts, 2);
    // Both packets reach b's device, which knows no such QP any more.
    wait_until("two packets for the unknown QP", || {
        unknown() - unknown_before >= 2
    });
    assert_eq!(unknown() - unknown_before, 2);
    assert_cq_empty(&b_recv_cq, "still nothing");
}

#[test]
fn many_qps_can_be_created_and_destroyed() {
    let ctx = open_udp_device(FILE, 7);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let init_mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;

    // 200 at once: distinct numbers, each independently modifiable.
    let qps: Vec<_> = (0..200)
        .map(|_| pd.qp_builder().build(&cq, &cq).expect("create QP"))
        .collect();
    let numbers: HashSet<u32> = qps.iter().map(|q| q.qp_num()).collect();
    assert_eq!(numbers.len(), 200);
    assert!(numbers.iter().all(|&n| n < 1 << 24 && n > 1));
    for (i, qp) in qps.iter().enumerate() {
        if i % 2 == 0 {
            qp.modify(&init, init_mask).unwrap();
        }
    }
    for (i, qp) in qps.iter().enumerate() {
        let want = if i % 2 == 0 {
            QpState::Init
        } else {
            QpState::Reset
        };
        assert_eq!(qp.state().unwrap(), want);
    }
    drop(qps);

    // 200 create / modify / destroy cycles.
    for _ in 0..200 {
        let qp = pd.qp_builder().build(&cq, &cq).expect("create QP");
        qp.modify(&init, init_mask).unwrap();
        drop(qp);
    }

    // The device still carries traffic afterwards.
    let peer_ctx = open_udp_device(FILE, 8);
    let (a, b) = side_pair(&ctx, &peer_ctx, &SideConfig::default());
    connect_pair(&a, &b, 1, 2, &RcConnectOptions::default());
    send_and_verify(&a, &b, 10_000, 1);
    send_and_verify(&b, &a, 10_000, 2);
    drop((a, b, pd, cq, ctx, peer_ctx));
    assert_port_released(7);
    assert_port_released(8);
}

#[test]
fn dropping_everything_mid_transfer_does_not_panic_and_the_devices_reopen() {
    let big = SideConfig {
        buf_len: 1 << 20,
        ..SideConfig::default()
    };
    for round in 0..3u64 {
        let (ctx_a, ctx_b) = if round == 0 {
            (open_udp_device(FILE, 9), open_udp_device(FILE, 10))
        } else {
            (
                Context::open(&device_name(FILE, 9)).unwrap(),
                Context::open(&device_name(FILE, 10)).unwrap(),
            )
        };
        let (a, b) = side_pair(&ctx_a, &ctx_b, &big);
        drop((ctx_a, ctx_b));
        connect_pair(&a, &b, 0x10, 0x20, &RcConnectOptions::default());
        b.post_recv(1, vec![b.recv_mr.sge(0, 1 << 20).unwrap()]);
        a.post_send(SendWr::send(2, vec![a.send_mr.sge(0, 1 << 20).unwrap()]));
        // Drop in a different order each round, while the megabyte is in flight.
        match round {
            0 => drop((a, b)),
            1 => {
                drop(b.ctx);
                drop(b.pd);
                drop(b.recv_mr);
                drop(a);
                drop(b.qp);
                drop(b.recv_cq);
                drop(b.send_cq);
                drop(b.send_mr);
            }
            _ => {
                drop(a.send_mr);
                drop(a.send_cq);
                drop(b.qp);
                drop(a.ctx);
                drop((b.ctx, b.pd, b.send_cq, b.recv_cq, b.send_mr, b.recv_mr));
                drop(a.qp);
                drop(a.pd);
                drop(a.recv_cq);
                drop(a.recv_mr);
            }
        }
        assert_port_released(9);
        assert_port_released(10);
    }
    let a = Side::new(
        &Context::open(&device_name(FILE, 9)).unwrap(),
        &SideConfig::default(),
    );
    let b = Side::new(
        &Context::open(&device_name(FILE, 10)).unwrap(),
        &SideConfig::default(),
    );
    connect_pair(&a, &b, 5, 6, &RcConnectOptions::default());
    send_and_verify(&a, &b, 50_000, 9);
}

#[test]
fn concurrent_open_and_close_of_one_device() {
    // Two threads open and drop the same device over and over. Whenever one thread's drop
    // of the last handle overlaps the other's open, the open must still succeed (share the
    // runtime or start a new one), never fail because the old socket is still bound.
    let name = device_name(FILE, 11);
    drop(open_udp_device(FILE, 11));
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..100 {
                    match Context::open(&name) {
                        Ok(ctx) => {
                            let pd = ctx.alloc_pd().expect("alloc_pd on a fresh open");
                            drop(pd);
                            drop(ctx);
                        }
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of 200 opens failed, e.g. {}",
        failures.len(),
        failures[0]
    );
    assert_port_released(11);
}
