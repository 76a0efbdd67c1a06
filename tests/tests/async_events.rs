//! Async events over UDP loopback: a responder whose QP a remote request drives into ERR
//! gets QP_ACCESS_ERR (bad rkey / access), QP_REQ_ERR (invalid request) or QP_FATAL (its own
//! receive buffer unusable), the requester none; each open context sees the events of the
//! objects it created, and all see port events; taking the port down and up raises PORT_ERR /
//! PORT_ACTIVE, changes query_port and stops traffic until it is up again; a CQ overrun is
//! CQ_ERR plus EIO from poll; events of destroyed objects are dropped; acknowledgement
//! errors; COMM_EST once for the first packet reaching a QP in RTR; tokio's
//! `next_async_event`.
//!
//! File number 42: devices on 127.10.42.n.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use softverbs::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventKind, AsyncEvents, Context, PortState,
    QpState, RcConnectOptions, SendWr, WcStatus,
};
use softverbs_api::AhAttr;
use softverbs_conformance::{
    device_name, open_udp_device, pattern, poll_1, rc_pair, rdma_write_wr, register_mr, remote_at,
    send_and_verify, wait_until, Side, SideConfig, WAIT,
};
use softverbs_testkit::{ah_to, RcMoves};

const FILE: u8 = 42;
const NOW: Option<Duration> = Some(Duration::ZERO);

fn readable(fd: &impl AsFd, timeout: PollTimeout) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, timeout).expect("poll(2)") == 1
}

/// Waits (at most [`WAIT`]) until the async descriptor is readable, then takes the event.
fn next_event(events: &AsyncEvents, what: &str) -> AsyncEvent {
    assert!(
        readable(events, PollTimeout::try_from(WAIT).unwrap()),
        "{what}: the async descriptor did not become readable"
    );
    events
        .get(NOW)
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: readable, but no event"))
}

fn assert_no_event(events: &AsyncEvents, what: &str) {
    assert!(!readable(events, PollTimeout::ZERO), "{what}: readable");
    assert_eq!(events.get(NOW).unwrap(), None, "{what}: unexpected event");
}

fn qp_event(kind: AsyncEventKind, qpn: u32) -> AsyncEvent {
    AsyncEvent {
        kind,
        element: AsyncElement::Qp(qpn),
    }
}

fn port_event(kind: AsyncEventKind) -> AsyncEvent {
    AsyncEvent {
        kind,
        element: AsyncElement::Port(1),
    }
}

/// a WRITEs 64 bytes from its send MR to `remote` (on its peer); returns the status of a's
/// completion.
fn bad_write(a: &Side, remote: softverbs::RemoteAddr) -> WcStatus {
    a.post_send(rdma_write_wr(
        7,
        vec![a.send_mr.sge(0, 64).unwrap()],
        remote,
    ));
    poll_1(&a.send_cq, "the refused WRITE").status
}

/// A WRITE to an MR without REMOTE_WRITE (the QP allows it): the responder's QP gets
/// QP_ACCESS_ERR, the requester (which has its error completion) no event.
#[test]
fn access_violation_raises_qp_access_err_at_the_responder() {
    let (a, b) = rc_pair(FILE, 1, 2, &SideConfig::default(), &Default::default());
    let a_events = a.ctx.async_events().unwrap();
    let b_events = b.ctx.async_events().unwrap();
    let local_only = register_mr(&b.pd, 4096, AccessFlags::LOCAL_WRITE);
    local_only.fill(0xEE).unwrap();
    assert_eq!(
        bad_write(&a, remote_at(&local_only, 0)),
        WcStatus::RemAccessErr
    );
    let event = next_event(&b_events, "responder");
    assert_eq!(event, qp_event(AsyncEventKind::QpAccessErr, b.qpn()));
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    assert!(
        local_only.to_vec().iter().all(|&x| x == 0xEE),
        "target written"
    );
    assert_no_event(&b_events, "responder after its one event");
    // a's error is its completion: no async event (the engine queues a call's events
    // before its completions, so one would be here by now).
    assert_no_event(&a_events, "requester");
}

/// A WRITE to a QP that does not allow remote writes is an invalid request: QP_REQ_ERR.
#[test]
fn invalid_request_raises_qp_req_err() {
    let opts = RcConnectOptions {
        access: AccessFlags::REMOTE_READ,
        ..RcConnectOptions::default()
    };
    let (a, b) = rc_pair(FILE, 13, 14, &SideConfig::default(), &opts);
    let target = register_mr(
        &b.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let b_events = b.ctx.async_events().unwrap();
    assert_eq!(bad_write(&a, remote_at(&target, 0)), WcStatus::RemInvReqErr);
    assert_eq!(
        next_event(&b_events, "responder"),
        qp_event(AsyncEventKind::QpReqErr, b.qpn())
    );
    assert_no_event(&a.ctx.async_events().unwrap(), "requester");
}

/// The responder cannot write its own receive buffer (its MR was deregistered after the
/// receive was posted): the receive fails with LOC_PROT_ERR, the sender gets REM_OP_ERR,
/// and the responder's QP raises QP_FATAL (its fault, not the peer's).
#[test]
fn unusable_receive_buffer_raises_qp_fatal() {
    let (a, b) = rc_pair(FILE, 15, 16, &SideConfig::default(), &Default::default());
    let b_events = b.ctx.async_events().unwrap();
    let doomed = register_mr(&b.pd, 4096, AccessFlags::LOCAL_WRITE);
    b.post_recv(1, vec![doomed.sge(0, 4096).unwrap()]);
    drop(doomed);
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 100).unwrap()]));
    assert_eq!(poll_1(&b.recv_cq, "receive").status, WcStatus::LocProtErr);
    assert_eq!(poll_1(&a.send_cq, "send").status, WcStatus::RemOpErr);
    assert_eq!(
        next_event(&b_events, "responder"),
        qp_event(AsyncEventKind::QpFatal, b.qpn())
    );
}

/// Two contexts open on one device: the one that created the QP gets its event, the other
/// none; both get port events.
#[test]
fn each_context_sees_its_own_objects_and_every_port_event() {
    let peer = open_udp_device(FILE, 4);
    let owner = open_udp_device(FILE, 3);
    let bystander = Context::open(&device_name(FILE, 3)).unwrap();
    let (a, b) = softverbs_conformance::side_pair(&peer, &owner, &SideConfig::default());
    softverbs_conformance::connect_pair(&a, &b, 1, 2, &Default::default());
    let owner_events = owner.async_events().unwrap();
    let bystander_events = bystander.async_events().unwrap();
    assert_ne!(owner_events.fd(), bystander_events.fd());

    let local_only = register_mr(&b.pd, 4096, AccessFlags::LOCAL_WRITE);
    assert_eq!(
        bad_write(&a, remote_at(&local_only, 0)),
        WcStatus::RemAccessErr
    );
    assert_eq!(
        next_event(&owner_events, "owner"),
        qp_event(AsyncEventKind::QpAccessErr, b.qpn())
    );
    // Pushed together with the owner's: had it been routed here, it would be here now.
    assert_no_event(&bystander_events, "bystander");

    let admin = bystander.emulator().unwrap();
    admin.set_port_active(false);
    for (events, who) in [(&owner_events, "owner"), (&bystander_events, "bystander")] {
        assert_eq!(next_event(events, who), port_event(AsyncEventKind::PortErr));
    }
    assert_no_event(&peer.async_events().unwrap(), "another device");
    admin.set_port_active(true);
    for (events, who) in [(&owner_events, "owner"), (&bystander_events, "bystander")] {
        assert_eq!(
            next_event(events, who),
            port_event(AsyncEventKind::PortActive)
        );
    }
}

/// Port down: PORT_ERR once (repeating the call changes nothing), query_port says DOWN,
/// traffic in either direction stops (counted), and resumes when the port is up (PORT_ACTIVE):
/// the retransmitted message arrives intact.
#[test]
fn port_down_and_up() {
    let (a, b) = rc_pair(FILE, 5, 6, &SideConfig::default(), &Default::default());
    send_and_verify(&a, &b, 300, 1);
    let b_admin = b.ctx.emulator().unwrap().clone();
    let b_events = b.ctx.async_events().unwrap();
    for round in 0..2u64 {
        // Round 0: the receiver's port is down; round 1: the sender's.
        let down = if round == 0 { &b } else { &a };
        let admin = down.ctx.emulator().unwrap();
        let events = down.ctx.async_events().unwrap();
        let drops_before = admin.counters().port_down_drops.load(Ordering::Relaxed);
        admin.set_port_active(false);
        assert_eq!(
            next_event(&events, "down"),
            port_event(AsyncEventKind::PortErr)
        );
        assert_eq!(down.ctx.query_port(1).unwrap().state, PortState::Down);
        admin.set_port_active(false);
        assert_no_event(&events, "second down");

        let len = 2000usize;
        let msg = pattern(10 + round, len);
        a.send_mr.write(0, &msg).unwrap();
        b.post_recv(10 + round, vec![b.recv_mr.sge(0, 4096).unwrap()]);
        a.post_send(SendWr::send(
            10 + round,
            vec![a.send_mr.sge(0, len as u32).unwrap()],
        ));
        wait_until("packets dropped at the port that is down", || {
            admin.counters().port_down_drops.load(Ordering::Relaxed) > drops_before
        });

        admin.set_port_active(true);
        assert_eq!(
            next_event(&events, "up"),
            port_event(AsyncEventKind::PortActive)
        );
        assert_eq!(down.ctx.query_port(1).unwrap().state, PortState::Active);
        let recv = poll_1(&b.recv_cq, "receive after the port came up");
        assert_eq!((recv.wr_id, recv.status), (10 + round, WcStatus::Success));
        assert_eq!(&b.recv_mr.to_vec()[..len], &msg[..]);
        let send = poll_1(&a.send_cq, "send after the port came up");
        assert_eq!((send.wr_id, send.status), (10 + round, WcStatus::Success));
    }
    assert!(b_admin.async_events_lost() == 0);
    assert_no_event(&b_events, "b at the end");
}

/// A receive CQ of two entries gets three receives: CQ_ERR for it on the owner's queue, and
/// poll fails with EIO from then on.
#[test]
fn cq_overrun_raises_cq_err() {
    let cfg = SideConfig {
        cq_depth: 2,
        ..SideConfig::default()
    };
    let (a, b) = rc_pair(FILE, 7, 8, &cfg, &Default::default());
    let b_events = b.ctx.async_events().unwrap();
    for i in 0..3u64 {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
        a.post_send(SendWr::send(i, vec![a.send_mr.sge(0, 64).unwrap()]));
        // a's CQ is as small: drain it as we go.
        assert_eq!(poll_1(&a.send_cq, "send").status, WcStatus::Success);
    }
    assert_eq!(
        next_event(&b_events, "CQ overrun"),
        AsyncEvent {
            kind: AsyncEventKind::CqErr,
            element: AsyncElement::Cq(b.recv_cq.id()),
        }
    );
    let mut wc = [Default::default(); 4];
    assert_eq!(b.recv_cq.poll(&mut wc).unwrap_err().errno(), libc::EIO);
    assert_no_event(&b_events, "after the one CQ_ERR");
}

/// Events still queued about a QP that is destroyed are dropped (as the kernel drops them).
#[test]
fn events_of_a_destroyed_qp_are_dropped() {
    let (a, b) = rc_pair(FILE, 9, 10, &SideConfig::default(), &Default::default());
    let b_events = b.ctx.async_events().unwrap();
    let local_only = register_mr(&b.pd, 4096, AccessFlags::LOCAL_WRITE);
    bad_write(&a, remote_at(&local_only, 0));
    assert!(readable(&b_events, PollTimeout::try_from(WAIT).unwrap()));
    let Side { qp, .. } = b;
    drop(qp);
    assert_no_event(&b_events, "after destroying the QP");
}

/// Acknowledging an event that was not handed out, or twice, is EINVAL.
#[test]
fn ack_errors() {
    let ctx = open_udp_device(FILE, 11);
    let backend = ctx.backend();
    let invented = port_event(AsyncEventKind::PortErr);
    assert_eq!(
        backend.ack_async_event(&invented).unwrap_err().errno(),
        libc::EINVAL
    );
    ctx.emulator().unwrap().set_port_active(false);
    let event = backend.get_async_event(Some(WAIT)).unwrap().expect("event");
    assert_eq!(event, invented);
    backend.ack_async_event(&event).unwrap();
    assert_eq!(
        backend.ack_async_event(&event).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(backend.get_async_event(NOW).unwrap(), None);
    ctx.emulator().unwrap().set_port_active(true);
}

/// The first request reaching a QP still in RTR raises COMM_EST, once; a QP already in RTS
/// when traffic starts raises none (checked by the other tests' "no event" assertions).
#[test]
fn comm_est_on_the_first_packet_in_rtr() {
    let (a, b) = softverbs_conformance::side_pair(
        &open_udp_device(FILE, 17),
        &open_udp_device(FILE, 18),
        &SideConfig::default(),
    );
    let opts = RcConnectOptions::default();
    let ep_a = a.qp.endpoint(1, opts.sgid_index).unwrap();
    let ep_b = b.qp.endpoint(2, opts.sgid_index).unwrap();
    a.qp.connect_rc(1, &ep_b, &opts).unwrap();
    // b only to RTR: it receives but cannot send (its ACKs still go out, as in verbs).
    let moves = RcMoves {
        access: opts.access,
        path_mtu: opts.path_mtu,
        dest_qp_num: ep_a.qpn,
        rq_psn: ep_a.psn,
        max_dest_rd_atomic: opts.max_dest_rd_atomic,
        min_rnr_timer: opts.min_rnr_timer,
        ah_attr: AhAttr {
            sgid_index: opts.sgid_index,
            hop_limit: 64,
            ..ah_to(ep_a.gid)
        },
        ..RcMoves::default()
    };
    for (attr, mask) in [moves.init(), moves.rtr()] {
        b.qp.modify(&attr, mask).unwrap();
    }
    let b_events = b.ctx.async_events().unwrap();
    assert_no_event(&b_events, "RTR before any packet");
    for i in 0..3u64 {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
        a.post_send(SendWr::send(i, vec![a.send_mr.sge(0, 64).unwrap()]));
        assert_eq!(
            poll_1(&b.recv_cq, "receive in RTR").status,
            WcStatus::Success
        );
        assert_eq!(poll_1(&a.send_cq, "send to RTR").status, WcStatus::Success);
    }
    assert_eq!(
        next_event(&b_events, "first packet in RTR"),
        qp_event(AsyncEventKind::CommEst, b.qpn())
    );
    assert_no_event(&b_events, "later packets");
    assert_no_event(&a.ctx.async_events().unwrap(), "the requester in RTS");
}

/// tokio: `next_async_event` sleeps until the port changes.
#[tokio::test]
async fn tokio_next_async_event() {
    let ctx = open_udp_device(FILE, 12);
    let waiter = {
        let ctx = ctx.clone();
        tokio::spawn(async move { ctx.next_async_event().await })
    };
    tokio::task::yield_now().await;
    ctx.emulator().unwrap().set_port_active(false);
    let event = tokio::time::timeout(WAIT, waiter)
        .await
        .expect("no event")
        .unwrap()
        .unwrap();
    assert_eq!(event, port_event(AsyncEventKind::PortErr));
    let events = ctx.async_events().unwrap();
    let next = events.next();
    ctx.emulator().unwrap().set_port_active(true);
    let event = tokio::time::timeout(WAIT, next)
        .await
        .expect("no event")
        .unwrap();
    assert_eq!(event, port_event(AsyncEventKind::PortActive));
}
