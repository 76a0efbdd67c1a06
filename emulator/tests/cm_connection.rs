//! The CM state machines end to end on a fault-free or scripted wire: connect, accept,
//! reject, disconnect from either side, unlistened services, silent peers with the
//! kernel's retry timing, duplicates, stale REQs, malformed MADs and bounded tables.

mod cm_harness;

use cm_harness::{accept_params, config, connect_params, Faults, World, LATENCY_NS};
use softverbs_emu::cm::{
    timing, CmError, CmEventKind, CmId, CmManager, ConnState, ConnectParams, QpRequest, Rejection,
};
use softverbs_emu::wire::cm::{rej_reason, CmMessage, PortSpace};

const PORT: u16 = 7471;
const MS: u64 = 1_000_000;

/// Node 1 listens on PORT (if `listen`), node 0 sends a REQ for `port` from QP 0x11;
/// returns the world, the active handle and the time of the REQ.
fn start(seed: u64, listen: bool, port: u16) -> (World, CmId, u64) {
    let mut w = World::new(seed, Faults::default());
    if listen {
        w.nodes[1].cm.listen(PortSpace::Tcp, PORT).unwrap();
    }
    let (peer, t0) = (w.addr(1), w.now_ns);
    let a = w.nodes[0]
        .cm
        .connect(t0, &connect_params(peer, port, 0x11))
        .unwrap();
    (w, a, t0)
}

/// Node 0 connects to node 1, which listens and accepts with QP 0x22.
fn connected(seed: u64) -> (World, CmId, CmId) {
    let (mut w, a, _) = start(seed, true, PORT);
    w.nodes[1].auto_accept_qpn = Some(0x22);
    w.settle();
    let p = w.nodes[1].log.events[0].1.id;
    (w, a, p)
}

#[test]
fn connect_accept_establishes_both_sides_with_crossed_qp_attributes() {
    let (w, a, p) = connected(1);
    let ak = w.nodes[0].log.kinds(a);
    let pk = w.nodes[1].log.kinds(p);
    match (&ak[..], &pk[..]) {
        (
            [CmEventKind::Established {
                remote_qpn: 0x22,
                private_data: rep_pd,
            }],
            [CmEventKind::ConnectRequest {
                cma,
                remote_qpn: 0x11,
                private_data: req_pd,
                ..
            }, CmEventKind::Established {
                remote_qpn: 0x11, ..
            }],
        ) => {
            assert_eq!(&rep_pd[..7], b"welcome");
            assert_eq!(rep_pd.len(), 196);
            assert_eq!(&req_pd[..5], b"hello");
            assert_eq!(req_pd.len(), 56);
            assert_eq!(
                (cma.src_addr, cma.dst_addr, cma.src_port),
                (w.addr(0), w.addr(1), 40000)
            );
        }
        other => panic!("unexpected events {other:?}"),
    }
    // Each side: RTR then RTS; what one sends from is what the other expects.
    let rtr_rts = |i: usize| match &w.nodes[i].log.qp[..] {
        [QpRequest::Rtr {
            attrs: rtr,
            qpn: q1,
        }, QpRequest::Rts {
            attrs: rts,
            qpn: q2,
        }] => {
            assert_eq!(q1, q2);
            (*q1, *rtr, *rts)
        }
        other => panic!("unexpected QP requests {other:?}"),
    };
    let (aq, artr, arts) = rtr_rts(0);
    let (pq, prtr, prts) = rtr_rts(1);
    assert_eq!((aq, pq), (0x11, 0x22));
    assert_eq!((artr.dest_qpn, prtr.dest_qpn), (0x22, 0x11));
    assert_eq!(arts.sq_psn, prtr.rq_psn);
    assert_eq!(prts.sq_psn, artr.rq_psn);
    assert_eq!((artr.path_mtu, prtr.path_mtu), (3, 3));
    assert_eq!(artr.flow_label, prtr.flow_label);
    assert_eq!((arts.timeout, prts.timeout), (19, 19));
    assert_eq!((arts.retry_cnt, arts.rnr_retry), (7, 7));
    assert_eq!(w.nodes[0].cm.info(a).unwrap().state, ConnState::Established);
    assert_eq!(w.nodes[1].cm.info(p).unwrap().state, ConnState::Established);
    // REQ, RTU one way; REP the other; transaction IDs echo the REQ's.
    let names = |i: usize| -> Vec<&str> {
        w.nodes[i]
            .log
            .sent
            .iter()
            .map(|(_, m)| m.message.name())
            .collect()
    };
    assert_eq!(names(0), ["REQ", "RTU"]);
    assert_eq!(names(1), ["REP"]);
    let tid = w.nodes[0].log.sent[0].1.header.transaction_id;
    assert_eq!(w.nodes[1].log.sent[0].1.header.transaction_id, tid);
}

fn disconnect_from(side: usize) {
    let (mut w, a, p) = connected(2 + side as u64);
    let ids = [a, p];
    let now = w.now_ns;
    let t0 = now;
    w.nodes[side].cm.disconnect(now, ids[side]).unwrap();
    w.settle();
    for (i, &id) in ids.iter().enumerate() {
        let kinds = w.nodes[i].log.kinds(id);
        let tail = &kinds[kinds.len() - 2..];
        assert!(
            matches!(tail, [CmEventKind::Disconnected, CmEventKind::TimewaitExit]),
            "node {i}: {kinds:?}"
        );
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == &CmEventKind::Disconnected)
                .count(),
            1
        );
        assert!(matches!(
            w.nodes[i].log.qp.last(),
            Some(QpRequest::Err { .. })
        ));
        assert_eq!(w.nodes[i].cm.live_connections(), 0, "node {i}");
        let c = w.nodes[i].cm.counters();
        assert_eq!(c.connections_created, c.connections_freed);
    }
    // Time-wait is the path's ACK timeout (19: 2^(19-8) ms), counted from the DREP.
    assert_eq!(
        timewait_exit_ns(&w, side),
        t0 + 2 * LATENCY_NS + timing::iba_time_ns(19)
    );
}

/// When node `node` reported TIMEWAIT_EXIT.
fn timewait_exit_ns(w: &World, node: usize) -> u64 {
    w.nodes[node]
        .log
        .events
        .iter()
        .find(|(_, e)| e.kind == CmEventKind::TimewaitExit)
        .expect("a TIMEWAIT_EXIT")
        .0
}

#[test]
fn disconnect_from_the_active_side() {
    disconnect_from(0);
}

#[test]
fn disconnect_from_the_passive_side() {
    disconnect_from(1);
}

#[test]
fn a_qp_ack_timeout_reaches_rts_on_both_sides_and_the_req_keeps_the_paths() {
    let mut w = World::new(11, Faults::default());
    w.nodes[1].cm.listen(PortSpace::Tcp, PORT).unwrap();
    let mut params = connect_params(w.addr(1), PORT, 0x11);
    params.qp_ack_timeout = Some(21);
    let bad = ConnectParams {
        qp_ack_timeout: Some(32),
        ..params.clone()
    };
    assert!(matches!(
        w.nodes[0].cm.connect(w.now_ns, &bad),
        Err(CmError::BadArgument(_))
    ));
    let now = w.now_ns;
    w.nodes[0].cm.connect(now, &params).unwrap();
    // The REQ arrives; accept before any resend.
    w.run_until(now + 10 * LATENCY_NS);
    let p = w.nodes[1].log.events[0].1.id;
    let mut accept = accept_params(0x22);
    accept.qp_ack_timeout = Some(14);
    let now = w.now_ns;
    w.nodes[1].cm.accept(now, p, &accept).unwrap();
    w.settle();
    let rts_timeout = |i: usize| {
        w.nodes[i].log.qp.iter().find_map(|q| match q {
            QpRequest::Rts { attrs, .. } => Some(attrs.timeout),
            _ => None,
        })
    };
    assert_eq!((rts_timeout(0), rts_timeout(1)), (Some(21), Some(14)));
    // The REQ carries the path's timeout (rdma_cm's cm_ack_timeout), not the option.
    let req = w.nodes[0]
        .log
        .sent
        .iter()
        .find_map(|(_, m)| match &m.message {
            CmMessage::Req(r) => Some(r.primary_local_ack_timeout),
            _ => None,
        });
    assert_eq!(req, Some(19));
}

#[test]
fn an_application_that_moves_its_own_qp_gets_connect_response_then_establishes() {
    let mut w = World::new(12, Faults::default());
    w.nodes[1].cm.listen(PortSpace::Tcp, PORT).unwrap();
    let mut params = connect_params(w.addr(1), PORT, 0x11);
    params.manual_qp = true;
    let now = w.now_ns;
    let a = w.nodes[0].cm.connect(now, &params).unwrap();
    w.run_until(now + 10 * LATENCY_NS);
    let p = w.nodes[1].log.events[0].1.id;
    let mut accept = accept_params(0x22);
    accept.manual_qp = true;
    let now = w.now_ns;
    w.nodes[1].cm.accept(now, p, &accept).unwrap();
    w.run_until(now + 10 * LATENCY_NS);
    // The REP reached the active side: CONNECT_RESPONSE, no RTU yet, no QP touched.
    assert!(matches!(
        w.nodes[0].log.kinds(a)[..],
        [CmEventKind::ConnectResponse {
            remote_qpn: 0x22,
            ..
        }]
    ));
    assert_eq!(w.nodes[0].cm.info(a).unwrap().state, ConnState::RepRcvd);
    let (rtr, rts) = w.nodes[0]
        .cm
        .qp_attrs(a)
        .expect("attributes once the REP came");
    assert_eq!(rtr.dest_qpn, 0x22);
    assert_eq!(rts.sq_psn, w.nodes[0].cm.info(a).unwrap().sq_psn);
    assert!(
        w.nodes[1].log.kinds(p).len() == 1,
        "passive still waits for the RTU"
    );
    w.nodes[0].cm.establish(a).unwrap();
    assert!(matches!(
        w.nodes[0].cm.establish(a),
        Err(CmError::InvalidState(_))
    ));
    w.settle();
    assert_eq!(w.nodes[0].cm.info(a).unwrap().state, ConnState::Established);
    assert!(matches!(
        w.nodes[1].log.kinds(p)[..],
        [
            CmEventKind::ConnectRequest { .. },
            CmEventKind::Established { .. }
        ]
    ));
    assert!(w.nodes[0].log.qp.is_empty() && w.nodes[1].log.qp.is_empty());
    // Disconnecting leaves such QPs alone too.
    let now = w.now_ns;
    w.nodes[0].cm.disconnect(now, a).unwrap();
    w.settle();
    assert!(w.nodes[0].log.qp.is_empty() && w.nodes[1].log.qp.is_empty());
    assert_eq!(w.nodes[0].cm.live_connections(), 0);
}

#[test]
fn a_dreq_to_a_peer_that_lost_the_connection_gets_a_drep_at_once() {
    let (mut w, a, _) = connected(7);
    // The passive process is gone and a new CM answers on its address (a process that
    // exited on a shared device, or a peer past time-wait): it knows no connection.
    w.nodes[1].cm = CmManager::new(config(w.addr(1), 99));
    let t0 = w.now_ns;
    w.nodes[0].cm.disconnect(t0, a).unwrap();
    w.settle();
    let kinds = w.nodes[0].log.kinds(a);
    assert!(
        matches!(
            &kinds[kinds.len() - 2..],
            [CmEventKind::Disconnected, CmEventKind::TimewaitExit]
        ),
        "{kinds:?}"
    );
    // One round trip, no DREQ resent (the kernel's cm_issue_drep behaviour).
    assert_eq!(
        timewait_exit_ns(&w, 0),
        t0 + 2 * LATENCY_NS + timing::iba_time_ns(19)
    );
    assert_eq!(w.nodes[0].cm.counters().retransmits, 0);
    let c = w.nodes[1].cm.counters();
    assert_eq!((c.dreps_for_unknown, c.unmatched), (1, 1));
}

#[test]
fn reject_carries_the_reason_and_private_data() {
    let (mut w, a, now) = start(4, true, PORT);
    w.run_until(now + 10 * LATENCY_NS);
    let p = w.nodes[1].log.events[0].1.id;
    assert_eq!(
        w.nodes[1].cm.reject(p, &[0u8; 149]),
        Err(CmError::PrivateDataTooLong { got: 149, max: 148 })
    );
    w.nodes[1].cm.reject(p, b"go away").unwrap();
    w.settle();
    match &w.nodes[0].log.kinds(a)[..] {
        [CmEventKind::Rejected(Rejection {
            reason: rej_reason::CONSUMER_REJECT,
            private_data,
        })] => assert_eq!(&private_data[..7], b"go away"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        w.nodes[0].log.qp[..],
        [QpRequest::Err { qpn: 0x11 }]
    ));
    assert_eq!(
        w.nodes[0].cm.live_connections() + w.nodes[1].cm.live_connections(),
        0
    );
    assert_eq!(
        w.nodes[1].cm.accept(w.now_ns, p, &accept_params(1)),
        Err(CmError::UnknownId(p))
    );
}

#[test]
fn connecting_to_an_unlistened_service_is_rejected_invalid_service_id() {
    let (mut w, a, _) = start(5, false, 9999);
    w.settle();
    assert!(matches!(
        w.nodes[0].log.kinds(a)[..],
        [CmEventKind::Rejected(Rejection {
            reason: rej_reason::INVALID_SERVICE_ID,
            ..
        })]
    ));
    assert!(w.nodes[1].log.events.is_empty());
    assert_eq!(
        w.nodes[0].cm.live_connections() + w.nodes[1].cm.live_connections(),
        0
    );
}

/// The REJ "invalid service ID" comes after the hold (250 ms), not at once, and within the
/// requester's CM response timeout (no REQ was resent meanwhile).
#[test]
fn the_rej_for_an_unlistened_service_comes_after_the_hold() {
    let (mut w, a, t0) = start(15, false, 9999);
    w.settle();
    let rej_at = w.nodes[1]
        .log
        .sent
        .iter()
        .find(|(_, m)| matches!(m.message, CmMessage::Rej(_)))
        .map(|(t, _)| *t)
        .expect("a REJ");
    let held = rej_at - t0;
    assert!(
        (250_000_000..400_000_000).contains(&held),
        "REJ after {held} ns"
    );
    assert_eq!(w.nodes[1].cm.counters().reqs_held, 1);
    assert_eq!(w.nodes[0].cm.counters().retransmits, 0);
    assert!(matches!(
        w.nodes[0].log.kinds(a)[..],
        [CmEventKind::Rejected(_)]
    ));
}

/// A server whose rdma_listen comes a moment after its client's REQ (perftest 4.5's `-R`
/// under load) gets the request: the REQ was held, and the connection is made.
#[test]
fn a_req_just_before_its_listener_is_accepted_once_it_listens() {
    let (mut w, a, t0) = start(16, false, PORT);
    w.nodes[1].auto_accept_qpn = Some(0x22);
    w.run_until(t0 + 50_000_000);
    assert!(w.nodes[0].log.kinds(a).is_empty(), "no answer yet");
    w.nodes[1].cm.listen(PortSpace::Tcp, PORT).unwrap();
    w.drain(1);
    w.settle();
    assert!(matches!(
        w.nodes[0].log.kinds(a)[..],
        [CmEventKind::Established {
            remote_qpn: 0x22,
            ..
        }]
    ));
    assert_eq!(w.nodes[1].cm.counters().rejects_sent, 0);
}

#[test]
fn a_silent_peer_makes_the_requester_unreachable_after_the_kernel_retries() {
    let (mut w, a, t0) = start(6, true, PORT);
    w.nodes[1].mute = true;
    w.settle();
    // 2 * 2^(18-8) ms + 2^(20-8) ms per try; 1 + 15 tries.
    let per_try = 6144 * MS;
    let reqs: Vec<u64> = w.nodes[0].log.sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(reqs.len(), 16);
    for (k, t) in reqs.iter().enumerate() {
        assert_eq!(*t, t0 + k as u64 * per_try);
    }
    let (when, e) = &w.nodes[0].log.events[0];
    assert_eq!((e.id, &e.kind), (a, &CmEventKind::Unreachable));
    assert_eq!(*when, t0 + 16 * per_try);
    assert_eq!(w.nodes[0].log.events.len(), 1);
    assert!(matches!(
        w.nodes[0].log.qp[..],
        [QpRequest::Err { qpn: 0x11 }]
    ));
    assert_eq!(w.nodes[0].cm.live_connections(), 0);
    assert_eq!(w.nodes[0].cm.counters().retries_exhausted, 1);
}

#[test]
fn a_requester_that_vanishes_makes_the_listener_unreachable_after_rep_retries() {
    let (mut w, a, t0) = start(7, true, PORT);
    w.nodes[1].auto_accept_qpn = Some(0x22);
    w.run_until(t0 + LATENCY_NS);
    w.nodes[0].cm.destroy(w.now_ns, a).unwrap();
    w.nodes[0].mute = true;
    w.settle();
    let reps: Vec<u64> = w.nodes[1].log.sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(reps.len(), 16, "REP + 15 resends");
    let per_try = timing::iba_time_ns(20);
    assert_eq!(reps[15] - reps[0], 15 * per_try);
    let last = w.nodes[1].log.events.last().unwrap();
    assert_eq!(last.1.kind, CmEventKind::Unreachable);
    assert_eq!(last.0, reps[0] + 16 * per_try);
    assert_eq!(
        w.nodes[0].cm.live_connections() + w.nodes[1].cm.live_connections(),
        0
    );
    assert!(
        w.nodes[0].log.events.is_empty(),
        "a destroyed handle reports nothing"
    );
}

#[test]
fn duplicate_reqs_get_mra_while_deciding_then_the_rep_then_stale_rej() {
    let (mut w, a, t0) = start(8, true, PORT);
    w.run_until(t0 + 2 * LATENCY_NS);
    let req_bytes = w.nodes[0].log.sent[0].1.to_bytes();
    let p = w.nodes[1].log.events[0].1.id;
    let (from, now) = (w.addr(0), w.now_ns);
    // The application has not decided: a duplicate REQ is answered with an MRA, which
    // makes the requester wait longer.
    w.nodes[1].cm.handle_mad(now, from, &req_bytes).unwrap();
    w.run_until(now + 3 * LATENCY_NS);
    assert!(matches!(
        w.nodes[1].log.sent.last().unwrap().1.message,
        CmMessage::Mra(_)
    ));
    assert_eq!(w.nodes[0].cm.info(a).unwrap().state, ConnState::MraReqRcvd);
    assert_eq!(
        w.nodes[0].cm.next_deadline_ns(),
        Some(now + LATENCY_NS + timing::iba_time_ns(24) + timing::iba_time_ns(19))
    );
    assert_eq!(w.nodes[1].log.events.len(), 1, "no second CONNECT_REQUEST");
    // Accepted: a duplicate REQ gets the same REP again.
    let now = w.now_ns;
    w.nodes[1].cm.accept(now, p, &accept_params(0x22)).unwrap();
    w.drain(1);
    let rep = w.nodes[1].log.sent.last().unwrap().1.clone();
    w.nodes[1].cm.handle_mad(now, from, &req_bytes).unwrap();
    w.drain(1);
    assert_eq!(w.nodes[1].log.sent.last().unwrap().1, rep);
    w.settle();
    assert!(matches!(
        w.nodes[0].log.kinds(a)[..],
        [CmEventKind::Established { .. }]
    ));
    // After disconnect, during time-wait, the old REQ is stale.
    let now = w.now_ns;
    w.nodes[0].cm.disconnect(now, a).unwrap();
    w.run_until(now + 3 * LATENCY_NS);
    assert_eq!(w.nodes[1].cm.info(p).unwrap().state, ConnState::TimeWait);
    let now = w.now_ns;
    w.nodes[1].cm.handle_mad(now, from, &req_bytes).unwrap();
    w.drain(1);
    match &w.nodes[1].log.sent.last().unwrap().1.message {
        CmMessage::Rej(r) => assert_eq!(r.reason, rej_reason::STALE_CONNECTION),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.nodes[1].cm.counters().duplicate_reqs, 3);
    w.settle();
    assert_eq!(
        w.nodes[0].cm.live_connections() + w.nodes[1].cm.live_connections(),
        0
    );
}

#[test]
fn malformed_mads_are_counted_and_dropped() {
    let (mut w, a, _) = connected(9);
    let good = w.nodes[0].log.sent[0].1.to_bytes();
    let from = w.addr(0);
    let now = w.now_ns;
    let mut bad_class = good;
    bad_class[1] = 0x81;
    let inputs: [&[u8]; 4] = [&[], &good[..100], &bad_class, &[0xff; 256]];
    for bytes in inputs {
        assert!(w.nodes[1].cm.handle_mad(now, from, bytes).is_err());
    }
    assert!(w.nodes[1].cm.poll_output().is_none());
    assert_eq!(w.nodes[1].cm.counters().malformed, 4);
    // A well-formed RTU naming no connection is dropped and counted too.
    let mut rtu = w.nodes[0].log.sent[1].1.clone();
    if let CmMessage::Rtu(r) = &mut rtu.message {
        r.remote_comm_id ^= 1;
    }
    w.nodes[1]
        .cm
        .handle_mad(now, from, &rtu.to_bytes())
        .unwrap();
    assert!(w.nodes[1].cm.poll_output().is_none());
    assert_eq!(w.nodes[1].cm.counters().unmatched, 1);
    assert_eq!(w.nodes[0].cm.info(a).unwrap().state, ConnState::Established);
}

#[test]
fn api_misuse_gets_typed_errors_and_tables_are_bounded() {
    let mut cfg = config("127.0.28.9".parse().unwrap(), 1);
    cfg.max_connections = 2;
    cfg.max_listeners = 1;
    let mut cm = CmManager::new(cfg);
    let peer = "127.0.28.10".parse().unwrap();
    let mut p = connect_params(peer, PORT, 5);
    p.private_data = vec![0; 57];
    assert_eq!(
        cm.connect(0, &p),
        Err(CmError::PrivateDataTooLong { got: 57, max: 56 })
    );
    p.private_data.clear();
    p.path_mtu = 6;
    assert!(matches!(cm.connect(0, &p), Err(CmError::BadArgument(_))));
    p.path_mtu = 3;
    let a = cm.connect(0, &p).unwrap();
    cm.connect(0, &p).unwrap();
    assert_eq!(cm.connect(0, &p), Err(CmError::TableFull("connection")));
    assert_eq!(cm.connect(0, &p).unwrap_err().errno(), libc::ENOMEM);
    assert!(matches!(
        cm.disconnect(0, a),
        Err(CmError::InvalidState("REQ_SENT"))
    ));
    assert_eq!(cm.disconnect(0, CmId(0)), Err(CmError::UnknownId(CmId(0))));
    let sid = cm.listen(PortSpace::Tcp, 1).unwrap();
    assert_eq!(
        cm.listen(PortSpace::Tcp, 2),
        Err(CmError::TableFull("listener"))
    );
    cm.unlisten(sid).unwrap();
    cm.listen(PortSpace::Tcp, 1).unwrap();
    assert_eq!(
        cm.listen(PortSpace::Tcp, 1),
        Err(CmError::AddressInUse(sid))
    );
    assert_eq!(
        cm.listen(PortSpace::Tcp, 1).unwrap_err().errno(),
        libc::EADDRINUSE
    );
}

#[test]
fn a_new_req_from_a_connected_qp_is_stale_and_a_req_without_cma_header_is_refused() {
    let (mut w, _, p) = connected(10);
    // The same requester QP asks again while its first connection is up.
    let (peer, now) = (w.addr(1), w.now_ns);
    let again = w.nodes[0]
        .cm
        .connect(now, &connect_params(peer, PORT, 0x11))
        .unwrap();
    w.settle();
    assert!(matches!(
        w.nodes[0].log.kinds(again)[..],
        [CmEventKind::Rejected(Rejection {
            reason: rej_reason::STALE_CONNECTION,
            ..
        })]
    ));
    assert_eq!(w.nodes[1].cm.info(p).unwrap().state, ConnState::Established);
    // A REQ whose private data lacks rdma_cm's header: consumer reject, counted.
    let mut req = w.nodes[0].log.sent[0].1.clone();
    if let CmMessage::Req(r) = &mut req.message {
        r.local_comm_id ^= 0x5a5a;
        r.local_qpn = 0x99;
        r.private_data = [0; 92];
    }
    let (from, now) = (w.addr(0), w.now_ns);
    w.nodes[1]
        .cm
        .handle_mad(now, from, &req.to_bytes())
        .unwrap();
    w.drain(1);
    match &w.nodes[1].log.sent.last().unwrap().1.message {
        CmMessage::Rej(r) => assert_eq!(r.reason, rej_reason::CONSUMER_REJECT),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.nodes[1].cm.counters().malformed, 1);
    assert_eq!(w.nodes[1].cm.live_connections(), 1);
}
