//! Which send WRs complete (SIGNALED / sq_sig_all), unsignaled ones leaving the send queue
//! without an ACK request of their own, and the responder making progress while the
//! receiving application calls nothing.
//!
//! File number 5: devices on 127.10.5.n.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use softverbs::{
    ChannelNetwork, DeviceConfig, LinkConfig, RcConnectOptions, SendFlags, SendWr, WcStatus,
};
use softverbs_conformance::{
    assert_bytes_eq, assert_cq_empty, check_recv_wc, check_send_wc, connect_pair, device_name,
    pattern, poll_1, poll_n, rc_pair, register_and_open, side_pair, test_ip, wait_until, Side,
    SideConfig, WAIT,
};

const FILE: u8 = 5;

fn unsignaled(wr: SendWr) -> SendWr {
    SendWr {
        send_flags: SendFlags::empty(),
        ..wr
    }
}

#[test]
fn unsignaled_sends_complete_silently_before_a_signaled_one() {
    let (a, b) = rc_pair(
        FILE,
        1,
        2,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    );
    assert!(!a.qp.query().unwrap().1.sq_sig_all);
    let lens = [100usize, 3000, 0, 2500];
    for (i, &len) in lens.iter().enumerate() {
        a.send_mr.write(i * 4096, &pattern(i as u64, len)).unwrap();
        b.post_recv(10 + i as u64, vec![b.recv_mr.sge(i * 4096, 4096).unwrap()]);
    }
    // Three unsignaled sends, then a signaled one, in one list.
    let wrs: Vec<SendWr> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let wr = SendWr::send(i as u64, vec![a.send_mr.sge(i * 4096, len as u32).unwrap()]);
            if i < 3 {
                unsignaled(wr)
            } else {
                wr
            }
        })
        .collect();
    a.qp.post_send(&wrs).expect("post_send");

    // Every message arrives.
    let recvs = poll_n(&b.recv_cq, 4, "receives");
    let image = b.recv_mr.to_vec();
    for (i, &len) in lens.iter().enumerate() {
        check_recv_wc(&recvs[i], 10 + i as u64, len, None, b.qpn(), a.qpn());
        assert_bytes_eq(
            &image[i * 4096..i * 4096 + len],
            &pattern(i as u64, len),
            "message",
        );
    }
    // Only the signaled send completes; the earlier unsignaled ones were retired before it,
    // so nothing can follow it.
    let wc = poll_1(&a.send_cq, "the signaled send");
    check_send_wc(&wc, 3, 2500, a.qpn());
    assert_cq_empty(&a.send_cq, "after the signaled send");

    // Same again with a single unsignaled send followed by a signaled one in separate posts.
    a.send_mr.write(0, &pattern(20, 64)).unwrap();
    b.post_recv(20, vec![b.recv_mr.sge(0, 64).unwrap()]);
    b.post_recv(21, vec![b.recv_mr.sge(4096, 64).unwrap()]);
    a.post_send(unsignaled(SendWr::send(
        20,
        vec![a.send_mr.sge(0, 64).unwrap()],
    )));
    check_recv_wc(
        &poll_1(&b.recv_cq, "recv 20"),
        20,
        64,
        None,
        b.qpn(),
        a.qpn(),
    );
    a.post_send(SendWr::send(21, vec![a.send_mr.sge(0, 64).unwrap()]));
    check_recv_wc(
        &poll_1(&b.recv_cq, "recv 21"),
        21,
        64,
        None,
        b.qpn(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send 21"), 21, 64, a.qpn());
    assert_cq_empty(&a.send_cq, "after send 21");
}

#[test]
fn sq_sig_all_makes_every_send_complete() {
    let cfg = SideConfig {
        sq_sig_all: true,
        ..SideConfig::default()
    };
    let (a, b) = rc_pair(FILE, 3, 4, &cfg, &RcConnectOptions::default());
    assert!(a.qp.query().unwrap().1.sq_sig_all);
    let n = 6usize;
    for i in 0..n {
        b.post_recv(i as u64, vec![b.recv_mr.sge(i * 1024, 1024).unwrap()]);
    }
    let wrs: Vec<SendWr> = (0..n)
        .map(|i| {
            unsignaled(SendWr::send(
                100 + i as u64,
                vec![a.send_mr.sge(0, (i * 100) as u32).unwrap()],
            ))
        })
        .collect();
    a.qp.post_send(&wrs).expect("post_send");
    let sends = poll_n(&a.send_cq, n, "sends");
    for (i, wc) in sends.iter().enumerate() {
        check_send_wc(wc, 100 + i as u64, i * 100, a.qpn());
    }
    let recvs = poll_n(&b.recv_cq, n, "receives");
    for (i, wc) in recvs.iter().enumerate() {
        check_recv_wc(wc, i as u64, i * 100, None, b.qpn(), a.qpn());
    }
    assert_cq_empty(&a.send_cq, "after all sends");
}

#[test]
fn responder_progresses_while_the_receiver_sleeps() {
    let (a, b) = rc_pair(
        FILE,
        5,
        6,
        &SideConfig {
            buf_len: 256 * 1024,
            ..SideConfig::default()
        },
        &RcConnectOptions::default(),
    );
    let len = 200 * 1024;
    let msg = pattern(77, len);
    a.send_mr.write(0, &msg).unwrap();
    b.recv_mr.fill(0xEE).unwrap();
    b.post_recv(1, vec![b.recv_mr.sge(0, len as u32).unwrap()]);

    // The sender runs on its own thread; this (receiving) thread blocks on a channel and
    // calls nothing on b until the sender's completion (which needs b's ACKs) has arrived.
    let (tx, rx) = mpsc::channel();
    let a_qp_num = a.qpn();
    let sender = std::thread::spawn(move || {
        a.post_send(SendWr::send(9, vec![a.send_mr.sge(0, len as u32).unwrap()]));
        let wc = a.send_cq.poll_one(WAIT);
        tx.send(wc).unwrap();
        a
    });
    let wc = rx
        .recv_timeout(WAIT + Duration::from_secs(5))
        .expect("sender thread reports")
        .expect("send completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    check_send_wc(&wc, 9, len, a_qp_num);
    let _a = sender.join().expect("sender thread");

    // Only now does the receiving side look: the data is there and the completion waits.
    let recv = poll_1(&b.recv_cq, "receive");
    check_recv_wc(&recv, 1, len, None, b.qpn(), a_qp_num);
    assert_bytes_eq(&b.recv_mr.to_vec()[..len], &msg, "received message");
}

#[test]
fn cq_sizes_and_overrun() {
    let ctx = softverbs_conformance::open_udp_device(FILE, 7);
    assert_eq!(ctx.create_cq(0).err().expect("cqe 0").errno(), 22);
    let max = ctx.query_device().unwrap().max_cqe;
    assert_eq!(ctx.create_cq(max + 1).err().expect("cqe > max").errno(), 22);
    for want in [1u32, 3, 100, max] {
        let cq = ctx.create_cq(want).expect("create_cq");
        assert!(cq.capacity() >= want, "asked {want}, got {}", cq.capacity());
    }

    // Three completions into a CQ of room for two: the overrun is reported (EIO), never a
    // silent loss.
    let peer = softverbs_conformance::open_udp_device(FILE, 8);
    let (a, b) = softverbs_conformance::side_pair(&ctx, &peer, &SideConfig::default());
    let small = ctx.create_cq(2).unwrap();
    let qp = a.pd.qp_builder().build(&small, &a.recv_cq).unwrap();
    let opts = RcConnectOptions::default();
    qp.connect_rc(1, &b.qp.endpoint(2, 1).unwrap(), &opts)
        .unwrap();
    b.qp.connect_rc(2, &qp.endpoint(1, 1).unwrap(), &opts)
        .unwrap();
    for i in 0..3 {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
    }
    let sends: Vec<SendWr> = (0..3)
        .map(|i| SendWr::send(i, vec![a.send_mr.sge(0, 8).unwrap()]))
        .collect();
    qp.post_send(&sends).unwrap();
    poll_n(&b.recv_cq, 3, "receives");
    // Polling for zero entries drains nothing, so the three send completions must overrun
    // the CQ once b's ACKs have arrived; poll (bounded) until the overrun is reported.
    let deadline = std::time::Instant::now() + WAIT;
    let err = loop {
        match small.poll(&mut []) {
            Err(e) => break e,
            Ok(n) => {
                assert_eq!(n, 0);
                assert!(
                    std::time::Instant::now() < deadline,
                    "no overrun reported for 3 completions in a 2-entry CQ"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(err.errno(), 5, "{err}");
}

/// `ibv_resize_cq`: a CQ grows and shrinks keeping its completions, refuses to shrink below
/// those queued (EINVAL, as rxe) or beyond the device's sizes, and overruns at its new size.
#[test]
fn resize_cq_keeps_queued_completions_and_refuses_to_shrink_below_them() {
    let opts = RcConnectOptions::default();
    let (a, b) = rc_pair(FILE, 17, 18, &SideConfig::default(), &opts);
    let max = a.ctx.query_device().unwrap().max_cqe;
    let cq = &b.recv_cq;
    assert_eq!(cq.resize(0).unwrap_err().errno(), 22);
    assert_eq!(cq.resize(max + 1).unwrap_err().errno(), 22);
    assert_eq!(cq.resize(3).unwrap(), 3);
    assert_eq!(cq.capacity(), 3);
    sends_received(&a, &b, 0..3);
    // Three receive completions wait in the CQ: 2 is too small, 1000 keeps them all.
    let err = cq.resize(2).unwrap_err();
    assert_eq!(err.errno(), 22, "{err}");
    assert_eq!(cq.capacity(), 3);
    assert_eq!(cq.resize(1000).unwrap(), 1000);
    let got = poll_n(cq, 3, "receives after the resize");
    let ids: Vec<u64> = got.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, [0, 1, 2]);
    // Shrunk to one entry, a second completion overruns it (EIO), never lost silently.
    assert_eq!(cq.resize(1).unwrap(), 1);
    sends_received(&a, &b, 3..5);
    assert_eq!(cq.poll(&mut []).unwrap_err().errno(), 5);
}

/// SENDs `ids` from `a` into receives posted on `b`, and waits until `a` saw them complete
/// (so `b`'s receive completions are queued).
fn sends_received(a: &Side, b: &Side, ids: std::ops::Range<u64>) {
    for i in ids.clone() {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
    }
    let sends: Vec<SendWr> = ids
        .clone()
        .map(|i| SendWr::send(i, vec![a.send_mr.sge(0, 8).unwrap()]))
        .collect();
    a.qp.post_send(&sends).unwrap();
    poll_n(&a.send_cq, ids.count(), "sends");
}

/// The next completion of `cq`, polled in a busy loop in this thread (at most [`WAIT`]),
/// as a polling application takes it: so the application thread, not the engine thread,
/// receives what it waits for. Panics with `what` if none comes.
fn busy_poll_1(cq: &softverbs::Cq, what: &str) -> softverbs::WorkCompletion {
    let mut wc = [softverbs::WorkCompletion::default(); 1];
    let deadline = std::time::Instant::now() + WAIT;
    while cq.poll(&mut wc).expect("poll_cq") == 0 {
        assert!(std::time::Instant::now() < deadline, "{what}");
    }
    wc[0]
}

/// A receiver that busy-polls takes the datagrams off the link in its own thread and defers
/// the ACKs to its next send (so a ping-pong answer carries them in the same send call). If
/// it then goes quiet, posting nothing and polling nothing, the ACKs must still leave
/// promptly (the engine thread sends them after its next nap), not only when the sender's
/// retransmission timer fires.
#[test]
fn acks_deferred_by_a_polling_receiver_leave_when_it_goes_quiet() {
    // A 1 s ACK timeout: a late ACK shows as a retransmission, a loaded machine does not.
    let opts = RcConnectOptions {
        timeout: 18,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 9, 10, &SideConfig::default(), &opts);
    // Which thread receives is up to the scheduler: enough rounds for both to happen.
    let rounds = 100u64;
    for i in 0..rounds {
        b.post_recv(i, vec![b.recv_mr.sge(0, 1024).unwrap()]);
        a.post_send(SendWr::send(100 + i, vec![a.send_mr.sge(0, 64).unwrap()]));
        // b busy-polls in this thread until its receive completes (the engine thread then
        // leaves the link to it) ...
        let wc = busy_poll_1(&b.recv_cq, &format!("round {i}: no receive"));
        check_recv_wc(&wc, i, 64, None, b.qpn(), a.qpn());
        // ... and then does nothing: a's send completes all the same.
        check_send_wc(&poll_1(&a.send_cq, "send"), 100 + i, 64, a.qpn());
    }
    let c = a.counters();
    assert_eq!(
        (c.retransmitted_packets, c.ack_timeouts),
        (0, 0),
        "every ACK came without a retransmission: {c:?}"
    );
}

/// On a CQ shared by sends and receives, a signaled SEND completes before the receive of
/// the answer the peer posted on taking it: the peer's ACK leaves ahead of its answer, as
/// kernel rxe's (sent on arrival) does, also when the peer's application received the SEND
/// while it polled and deferred the ACK to its next post. Programs written against NICs
/// rely on this order (librpma's clients do).
#[test]
fn on_a_shared_cq_a_send_completes_before_the_answer_to_it() {
    let cfg = SideConfig {
        shared_cq: true,
        ..SideConfig::default()
    };
    let (a, b) = rc_pair(FILE, 19, 20, &cfg, &RcConnectOptions::default());
    let next_two = |side: &Side, what: &str| {
        let wcs = poll_n(&side.send_cq, 2, what);
        wcs.iter().map(|wc| wc.wr_id).collect::<Vec<_>>()
    };
    // Which thread receives is up to the scheduler: enough rounds for each to happen.
    for i in 0..100u64 {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
        a.post_recv(1000 + i, vec![a.recv_mr.sge(0, 64).unwrap()]);
        a.post_send(SendWr::send(100 + i, vec![a.send_mr.sge(0, 8).unwrap()]));
        // b busy-polls for the SEND (taking it off the link in this thread, which defers
        // its ACK) and answers at once.
        let wc = busy_poll_1(&b.recv_cq, &format!("round {i}: no SEND"));
        check_recv_wc(&wc, i, 8, None, b.qpn(), a.qpn());
        b.post_send(SendWr::send(2000 + i, vec![b.send_mr.sge(0, 8).unwrap()]));
        assert_eq!(
            next_two(&a, "a's SEND and the answer"),
            [100 + i, 1000 + i],
            "round {i}: a's SEND first, then the answer's receive"
        );
        // b's answer is acknowledged before a's next SEND arrives: only its own here.
        check_send_wc(&poll_1(&b.send_cq, "b's answer"), 2000 + i, 8, b.qpn());
    }
    assert_cq_empty(&a.send_cq, "a's CQ");
    assert_cq_empty(&b.send_cq, "b's CQ");
}

/// Unsignaled SENDs ask for no ACK (the requester coalesces them): the responder still
/// acknowledges them once the traffic pauses, so that they leave the send queue without
/// the retransmission timer. On the UDP link, on the in-process one, and on the qemu
/// socket link (a blocking link: two softverbs stations facing each other on one emulated
/// Ethernet segment, as the rxe lab's VM faces one).
#[test]
fn unsignaled_sends_are_acknowledged_unasked_when_the_traffic_pauses() {
    let (a, b) = rc_pair(FILE, 11, 12, &SideConfig::default(), &one_second_timeout());
    unsignaled_bursts_leave_the_send_queue(&a, &b);
    let net = ChannelNetwork::new();
    let open = |n: u8| {
        register_and_open(DeviceConfig {
            link: LinkConfig::Channel(net.clone()),
            ..DeviceConfig::new(device_name(FILE, n), test_ip(FILE, n))
        })
    };
    let (a, b) = side_pair(&open(13), &open(14), &SideConfig::default());
    connect_pair(&a, &b, 7, 9, &one_second_timeout());
    unsignaled_bursts_leave_the_send_queue(&a, &b);

    let frames = |n: u8| SocketAddr::new(test_ip(FILE, n), 47_800 + u16::from(n));
    let station = |n: u8, peer: u8| {
        register_and_open(DeviceConfig {
            link: LinkConfig::QemuSocket {
                frames_local: frames(n),
                frames_peer: frames(peer),
            },
            ..DeviceConfig::new(device_name(FILE, n), test_ip(FILE, n))
        })
    };
    let (a, b) = side_pair(&station(15, 16), &station(16, 15), &SideConfig::default());
    connect_pair(&a, &b, 7, 9, &one_second_timeout());
    unsignaled_bursts_leave_the_send_queue(&a, &b);
}

/// A 1 s ACK timeout: an ACK left to the timer shows as a retransmission.
fn one_second_timeout() -> RcConnectOptions {
    RcConnectOptions {
        timeout: 18,
        ..RcConnectOptions::default()
    }
}

fn unsignaled_bursts_leave_the_send_queue(a: &Side, b: &Side) {
    let data = pattern(11, 64);
    a.send_mr.write(0, &data).unwrap();
    // 12 SENDs in all: fewer than the 32 after which the requester asks anyway.
    let (bursts, burst) = (4u64, 3u64);
    for n in 0..bursts {
        for i in 0..burst {
            let id = n * burst + i;
            b.post_recv(id, vec![b.recv_mr.sge(64 * i as usize, 64).unwrap()]);
            a.post_send(unsignaled(SendWr::send(
                id,
                vec![a.send_mr.sge(0, 64).unwrap()],
            )));
        }
        for (i, wc) in poll_n(&b.recv_cq, burst as usize, "burst")
            .iter()
            .enumerate()
        {
            check_recv_wc(wc, n * burst + i as u64, 64, None, b.qpn(), a.qpn());
        }
        let mut got = vec![0u8; 64];
        b.recv_mr.read(64 * (burst as usize - 1), &mut got).unwrap();
        assert_bytes_eq(&got, &data, "the burst's last SEND");
        wait_until("the burst to leave the send queue", || {
            a.counters().completed_sends == (n + 1) * burst
        });
    }
    assert_cq_empty(&a.send_cq, "unsignaled sends");
    let c = a.counters();
    assert_eq!(
        (c.retransmitted_packets, c.ack_timeouts),
        (0, 0),
        "no ACK was left to the timer: {c:?}"
    );
}
