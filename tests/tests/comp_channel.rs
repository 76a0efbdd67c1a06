//! Completion channels over UDP loopback: the channel's descriptor becomes readable (poll(2),
//! epoll) only once an armed CQ gets a completion, one event per arming; solicited-only
//! arming skips unsolicited completions and fires on SEND / WRITE_WITH_IMM with SOLICITED
//! and on errors; non-blocking use and a blocked waiter; the classic arm / poll / wait / ack
//! loop misses nothing; acknowledgement counts gate CQ destruction and the channel is busy
//! while CQs use it; tokio's `next_completion`.
//!
//! File number 41: devices on 127.10.41.n.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use softverbs::{
    AccessFlags, CompChannel, Context, QpAttr, QpAttrMask, QpCap, QpState, RcConnectOptions,
    SendFlags, SendWr, WcOpcode, WcStatus,
};
use softverbs_conformance::{
    burn_qpns, check_flushed, check_recv_wc, connect_pair, open_udp_device, pattern, poll_1,
    rdma_write_imm_wr, register_mr, remote_at, send_and_verify, Side, SideConfig, WAIT,
};

const FILE: u8 = 41;
const NOW: Option<Duration> = Some(Duration::ZERO);

/// Is `fd` readable within `timeout` (poll(2))?
fn readable(fd: &impl AsFd, timeout: PollTimeout) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut fds, timeout).expect("poll(2)");
    n == 1
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
}

fn readable_now(fd: &impl AsFd) -> bool {
    readable(fd, PollTimeout::ZERO)
}

/// Waits (at most [`WAIT`]) for `fd` to become readable.
fn wait_readable(fd: &impl AsFd) -> bool {
    readable(fd, PollTimeout::try_from(WAIT).expect("WAIT fits poll(2)"))
}

/// A side like [`Side::new`] whose two CQs report to `channel`.
fn channel_side(ctx: &Context, channel: &CompChannel, cfg: &SideConfig) -> Side {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let send_cq = ctx
        .create_cq_with_channel(cfg.cq_depth, channel)
        .expect("send CQ on the channel");
    let recv_cq = ctx
        .create_cq_with_channel(cfg.cq_depth, channel)
        .expect("recv CQ on the channel");
    let qp = pd
        .qp_builder()
        .cap(cfg.cap)
        .build(&send_cq, &recv_cq)
        .expect("create QP");
    let send_mr = register_mr(&pd, cfg.buf_len, AccessFlags::LOCAL_WRITE);
    let recv_mr = register_mr(&pd, cfg.buf_len, remote_write_access());
    Side {
        ctx: ctx.clone(),
        pd,
        send_cq,
        recv_cq,
        qp,
        send_mr,
        recv_mr,
    }
}

fn remote_write_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
}

/// Two connected sides on devices `na` and `nb`, each with its CQs on its own channel.
fn channel_pair(na: u8, nb: u8, cfg: &SideConfig) -> (Side, CompChannel, Side, CompChannel) {
    let ctx_a = open_udp_device(FILE, na);
    let ctx_b = open_udp_device(FILE, nb);
    let ch_a = ctx_a.create_comp_channel().expect("channel a");
    let ch_b = ctx_b.create_comp_channel().expect("channel b");
    let a = channel_side(&ctx_a, &ch_a, cfg);
    burn_qpns(&ctx_b, 3);
    let b = channel_side(&ctx_b, &ch_b, cfg);
    let opts = RcConnectOptions {
        access: remote_write_access(),
        ..RcConnectOptions::default()
    };
    connect_pair(&a, &b, 0x100, 0x200, &opts);
    (a, ch_a, b, ch_b)
}

/// Posts a receive of 4 KiB at b and a SEND of `len` bytes from a with `flags`.
fn send_with(a: &Side, b: &Side, wr_id: u64, len: u32, flags: SendFlags) {
    a.send_mr
        .write(0, &pattern(wr_id, len as usize))
        .expect("fill");
    b.post_recv(wr_id, vec![b.recv_mr.sge(0, 4096).expect("recv sge")]);
    a.post_send(SendWr {
        send_flags: flags,
        ..SendWr::send(wr_id, vec![a.send_mr.sge(0, len).expect("send sge")])
    });
}

fn to_init(side: &Side) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: AccessFlags::empty(),
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    side.qp.modify(&attr, mask).expect("RESET -> INIT");
}

fn to_err(side: &Side) {
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    side.qp.modify(&attr, QpAttrMask::STATE).expect("-> ERR");
}

/// Completions made synchronously by the local QP (receives flushed in ERR), so that what is
/// queued when arming is known exactly: only completions added after arming raise an event,
/// one per arming.
#[test]
fn readable_only_after_arming_and_a_new_completion() {
    let ctx = open_udp_device(FILE, 1);
    let ch = ctx.create_comp_channel().unwrap();
    let side = channel_side(&ctx, &ch, &SideConfig::default());
    to_init(&side);
    side.post_recv(1, vec![side.recv_mr.sge(0, 64).unwrap()]);
    to_err(&side); // flushes receive 1 into the CQ, unarmed

    assert!(!readable_now(&ch), "readable without arming");
    assert!(ch.get_event(NOW).unwrap().is_none());
    side.recv_cq.req_notify(false).unwrap();
    assert!(
        !readable_now(&ch),
        "arming over a queued completion made the channel readable"
    );
    check_flushed(&poll_1(&side.recv_cq, "flush 1"), 1, side.qpn());

    // A receive posted in ERR is flushed at once: a new completion on the armed CQ.
    side.post_recv(2, vec![side.recv_mr.sge(0, 64).unwrap()]);
    assert!(
        wait_readable(&ch),
        "armed CQ's completion did not raise an event"
    );
    let cq = ch.get_event(NOW).unwrap().expect("an event");
    assert_eq!(cq.id(), side.recv_cq.id(), "event names the wrong CQ");
    assert!(!readable_now(&ch), "one event, yet still readable");
    assert_eq!(side.recv_cq.unacked_events(), 1);

    // Disarmed by the event: the next completion raises nothing.
    side.post_recv(3, vec![side.recv_mr.sge(0, 64).unwrap()]);
    assert!(!readable_now(&ch), "one arming raised two events");
    let flushed = side.recv_cq.poll_wait(2, WAIT).unwrap();
    assert_eq!(
        flushed.iter().map(|wc| wc.wr_id).collect::<Vec<_>>(),
        [2, 3]
    );
    // The send CQ was never armed: nothing about it either.
    side.send_cq.req_notify(false).unwrap();
    assert!(ch.get_event(NOW).unwrap().is_none());
    cq.ack_events(1).unwrap();
    assert_eq!(side.recv_cq.unacked_events(), 0);
}

/// Real traffic: poll(2) sleeps until the armed CQ's receive completes, then the completion
/// is there to poll; epoll reports each armed completion once, with the registered data.
#[test]
fn poll_and_epoll_wake_on_remote_traffic() {
    let cfg = SideConfig::default();
    let (a, _ch_a, b, ch_b) = channel_pair(2, 3, &cfg);
    // Traffic before arming raises nothing.
    send_and_verify(&a, &b, 100, 1);
    assert!(!readable_now(&ch_b));

    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    epoll
        .add(ch_b.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0xC0FFEE))
        .unwrap();
    let wait_ms = EpollTimeout::try_from(WAIT).unwrap();
    let mut events = [EpollEvent::empty(); 4];
    for round in 0..5u64 {
        b.recv_cq.req_notify(false).unwrap();
        send_with(&a, &b, 10 + round, 1000, SendFlags::SIGNALED);
        let n = epoll.wait(&mut events, wait_ms).unwrap();
        assert_eq!(n, 1, "round {round}: epoll saw no event");
        assert_eq!(events[0].data(), 0xC0FFEE);
        assert!(wait_readable(&ch_b));
        let cq = ch_b.get_event(NOW).unwrap().expect("event");
        assert_eq!(cq.id(), b.recv_cq.id());
        let wc = poll_1(&b.recv_cq, "receive after the event");
        check_recv_wc(&wc, 10 + round, 1000, None, b.qpn(), a.qpn());
        poll_1(&a.send_cq, "send");
        cq.ack_events(1).unwrap();
        let n = epoll.wait(&mut events, EpollTimeout::ZERO).unwrap();
        assert_eq!(n, 0, "round {round}: still readable after taking the event");
    }
}

/// Solicited-only arming: plain SENDs and a plain WRITE_WITH_IMM complete without an event;
/// a SEND with SOLICITED, a WRITE_WITH_IMM with SOLICITED and an error completion each fire.
#[test]
fn solicited_only_arming() {
    let cfg = SideConfig::default();
    let (a, _ch_a, b, ch_b) = channel_pair(4, 5, &cfg);
    b.recv_cq.req_notify(true).unwrap();

    send_with(&a, &b, 1, 64, SendFlags::SIGNALED);
    poll_1(&b.recv_cq, "plain SEND");
    poll_1(&a.send_cq, "plain SEND at a");
    // The completion is in the CQ before poll returns it: had it fired, the event is queued.
    assert!(
        !readable_now(&ch_b),
        "an unsolicited SEND fired a solicited arming"
    );

    let target = remote_at(&b.recv_mr, 8192);
    b.post_recv(2, vec![]);
    a.post_send(rdma_write_imm_wr(
        2,
        vec![a.send_mr.sge(0, 32).unwrap()],
        target,
        0x1234,
    ));
    let wc = poll_1(&b.recv_cq, "plain WRITE_WITH_IMM");
    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
    poll_1(&a.send_cq, "WRITE_WITH_IMM at a");
    assert!(!readable_now(&ch_b), "an unsolicited WRITE_WITH_IMM fired");

    send_with(&a, &b, 3, 4000, SendFlags::SIGNALED | SendFlags::SOLICITED);
    assert!(wait_readable(&ch_b), "SEND with SOLICITED did not fire");
    let cq = ch_b.get_event(NOW).unwrap().expect("event");
    assert_eq!(cq.id(), b.recv_cq.id());
    check_recv_wc(
        &poll_1(&b.recv_cq, "solicited SEND"),
        3,
        4000,
        None,
        b.qpn(),
        a.qpn(),
    );
    poll_1(&a.send_cq, "solicited SEND at a");

    b.recv_cq.req_notify(true).unwrap();
    b.post_recv(4, vec![]);
    a.post_send(SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        ..rdma_write_imm_wr(4, vec![a.send_mr.sge(0, 32).unwrap()], target, 7)
    });
    assert!(
        wait_readable(&ch_b),
        "WRITE_WITH_IMM with SOLICITED did not fire"
    );
    ch_b.get_event(NOW).unwrap().expect("event");
    assert_eq!(poll_1(&b.recv_cq, "solicited WRITE_WITH_IMM").imm_data, 7);
    poll_1(&a.send_cq, "solicited WRITE_WITH_IMM at a");

    // An error completion fires a solicited arming too (IB spec): flush a receive.
    b.recv_cq.req_notify(true).unwrap();
    b.post_recv(5, vec![b.recv_mr.sge(0, 64).unwrap()]);
    assert!(!readable_now(&ch_b));
    to_err(&b);
    assert!(wait_readable(&ch_b), "a flushed receive did not fire");
    ch_b.get_event(NOW).unwrap().expect("event");
    check_flushed(&poll_1(&b.recv_cq, "flushed"), 5, b.qpn());
    b.recv_cq.ack_events(3).unwrap();
}

/// Non-blocking mode, as applications set it with fcntl(O_NONBLOCK): a zero timeout returns
/// at once with nothing; a thread blocked in get_event without a limit wakes on the event.
#[test]
fn nonblocking_and_blocking_waits() {
    let cfg = SideConfig::default();
    let (a, _ch_a, b, ch_b) = channel_pair(6, 7, &cfg);
    let flags = fcntl(ch_b.as_fd(), FcntlArg::F_GETFL).unwrap();
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(ch_b.as_fd(), FcntlArg::F_SETFL(flags)).unwrap();
    assert!(ch_b.get_event(NOW).unwrap().is_none());
    // A bounded wait with nothing coming ends with nothing.
    assert!(ch_b
        .get_event(Some(Duration::from_millis(20)))
        .unwrap()
        .is_none());

    b.recv_cq.req_notify(false).unwrap();
    let waiter = {
        let ch = ch_b.clone();
        std::thread::spawn(move || ch.get_event(None).map(|cq| cq.map(|cq| cq.id())))
    };
    send_with(&a, &b, 1, 256, SendFlags::SIGNALED);
    poll_1(&a.send_cq, "send");
    // The send completed, so the receive did: the waiter has its event (or gets it now).
    let got = waiter.join().expect("waiter thread").unwrap();
    assert_eq!(got, Some(b.recv_cq.id()));
    poll_1(&b.recv_cq, "receive");
    b.recv_cq.ack_events(1).unwrap();
}

/// The classic event loop of ibv_get_cq_event(3) (arm, poll until empty, wait for the
/// event, ack, re-arm) against a sender thread with its own pace: every message is seen,
/// in order, and no wait outlives [`WAIT`] (a lost wakeup would).
#[test]
fn classic_event_loop_misses_nothing() {
    const MESSAGES: u64 = 300;
    let cfg = SideConfig {
        cap: QpCap {
            max_send_wr: 512,
            max_recv_wr: 512,
            ..SideConfig::default().cap
        },
        cq_depth: 512,
        ..SideConfig::default()
    };
    let (a, _ch_a, b, ch_b) = channel_pair(14, 15, &cfg);
    for i in 0..MESSAGES {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
    }
    let a = std::sync::Arc::new(a);
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            for i in 0..MESSAGES {
                a.post_send(SendWr::send(i, vec![a.send_mr.sge(0, 64).unwrap()]));
                if i % 8 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
        })
    };
    let mut next = 0u64;
    let mut waits = 0u64;
    let mut wc = [Default::default(); 16];
    while next < MESSAGES {
        b.recv_cq.req_notify(false).unwrap();
        loop {
            let n = b.recv_cq.poll(&mut wc).unwrap();
            for c in &wc[..n] {
                assert_eq!((c.wr_id, c.status), (next, WcStatus::Success));
                next += 1;
            }
            if n == 0 {
                break;
            }
        }
        if next == MESSAGES {
            break;
        }
        let cq = ch_b
            .get_event(Some(WAIT))
            .unwrap()
            .unwrap_or_else(|| panic!("no event within {WAIT:?} with {next} of {MESSAGES} seen"));
        assert_eq!(cq.id(), b.recv_cq.id());
        cq.ack_events(1).unwrap();
        waits += 1;
    }
    sender.join().unwrap();
    assert!(waits <= MESSAGES, "{waits} waits for {MESSAGES} messages");
    assert_eq!(
        a.send_cq.poll_wait(MESSAGES as usize, WAIT).unwrap().len(),
        MESSAGES as usize
    );
}

/// Acknowledgements: acking more than was taken is EINVAL; the backend refuses to destroy a
/// CQ with unacknowledged events (EBUSY, where libibverbs would block) and accepts once
/// they are acked; a channel is busy while a CQ uses it; dropping the last handle of a CQ
/// acknowledges its events, so the channel can go.
#[test]
fn ack_counts_gate_destruction() {
    let ctx = open_udp_device(FILE, 8);
    let ch = ctx.create_comp_channel().unwrap();
    let cfg = SideConfig::default();
    let side = channel_side(&ctx, &ch, &cfg);
    to_init(&side);
    for (i, wr_id) in [1u64, 2, 3].into_iter().enumerate() {
        side.recv_cq.req_notify(false).unwrap();
        if i == 0 {
            to_err(&side);
        }
        side.post_recv(wr_id, vec![side.recv_mr.sge(0, 64).unwrap()]);
        let cq = ch.get_event(Some(WAIT)).unwrap().expect("event");
        assert_eq!(cq.id(), side.recv_cq.id());
    }
    // And one event of the send CQ: a send posted in ERR is flushed at once.
    side.send_cq.req_notify(false).unwrap();
    side.post_send(SendWr::send(9, vec![side.send_mr.sge(0, 8).unwrap()]));
    let cq = ch.get_event(Some(WAIT)).unwrap().expect("send CQ event");
    assert_eq!(cq.id(), side.send_cq.id());
    drop(cq);
    assert_eq!(side.send_cq.unacked_events(), 1);

    assert_eq!(side.recv_cq.unacked_events(), 3);
    assert_eq!(
        side.recv_cq.ack_events(4).unwrap_err().errno(),
        libc::EINVAL
    );
    side.recv_cq.ack_events(1).unwrap();
    assert_eq!(side.recv_cq.unacked_events(), 2);

    let backend = ctx.backend().clone();
    let (recv_cq_id, send_cq_id, ch_id) = (side.recv_cq.id(), side.send_cq.id(), ch.id());
    assert_eq!(
        backend.destroy_comp_channel(ch_id).unwrap_err().errno(),
        libc::EBUSY,
        "channel destroyed while CQs use it"
    );
    let Side {
        qp,
        recv_cq,
        send_cq,
        ..
    } = side;
    drop(qp);
    assert_eq!(
        backend.destroy_cq(recv_cq_id).unwrap_err().errno(),
        libc::EBUSY,
        "CQ destroyed with 2 unacknowledged events"
    );
    // Over the backend directly: the safe handle keeps its own count.
    backend.ack_cq_events(recv_cq_id, 1).unwrap();
    assert_eq!(
        backend.ack_cq_events(recv_cq_id, 2).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        backend.destroy_cq(recv_cq_id).unwrap_err().errno(),
        libc::EBUSY
    );
    backend.ack_cq_events(recv_cq_id, 1).unwrap();
    backend.destroy_cq(recv_cq_id).unwrap();
    assert_eq!(
        backend.destroy_comp_channel(ch_id).unwrap_err().errno(),
        libc::EBUSY,
        "the send CQ still uses the channel"
    );
    // (Its handle's own destroy then finds it gone, which a drop ignores.)
    drop(recv_cq);

    // The send CQ has an event taken and not acked: dropping its handle acks and destroys.
    drop(send_cq);
    assert_eq!(
        backend.destroy_cq(send_cq_id).unwrap_err().errno(),
        libc::EINVAL,
        "the send CQ's handle did not destroy it"
    );
    backend.destroy_comp_channel(ch_id).unwrap();
    drop(ch);
}

/// Bad input: a channel of another context, unknown channel ids, acking a CQ without a
/// channel; arming a CQ without a channel is accepted and has no effect, as on hardware.
#[test]
fn channel_errors() {
    let ctx = open_udp_device(FILE, 9);
    let other = open_udp_device(FILE, 10);
    let ch = ctx.create_comp_channel().unwrap();
    assert_eq!(
        other.create_cq_with_channel(4, &ch).err().unwrap().errno(),
        libc::EINVAL
    );
    let backend = ctx.backend();
    assert_eq!(
        backend.create_cq(4, Some(999)).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        backend.get_cq_event(999, NOW).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        backend.comp_channel_fd(999).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        backend.destroy_comp_channel(999).unwrap_err().errno(),
        libc::EINVAL
    );
    let plain = ctx.create_cq(4).unwrap();
    plain.req_notify(true).unwrap();
    assert_eq!(plain.ack_events(1).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(
        backend.ack_cq_events(plain.id(), 1).unwrap_err().errno(),
        libc::EINVAL
    );
    // Channel ids belong to their context.
    assert_eq!(
        other
            .backend()
            .get_cq_event(ch.id(), NOW)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

/// tokio: `next_completion` arms, waits on the channel descriptor and returns completions in
/// order, message after message, while the messages are sent by another thread at their
/// own pace; both CQs of a side share one channel and wait at once.
#[tokio::test]
async fn tokio_next_completion() {
    const MESSAGES: u64 = 200;
    let cfg = SideConfig {
        cap: QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            ..SideConfig::default().cap
        },
        cq_depth: 512,
        ..SideConfig::default()
    };
    let (a, _ch_a, b, _ch_b) = channel_pair(11, 12, &cfg);
    let a = std::sync::Arc::new(a);
    let b_qpn = b.qpn();
    // Receives first, so that the sender never meets RNR.
    for i in 0..MESSAGES {
        b.post_recv(i, vec![b.recv_mr.sge(0, 64).unwrap()]);
    }
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            for i in 0..MESSAGES {
                a.post_send(SendWr::send(i, vec![a.send_mr.sge(0, 64).unwrap()]));
                if i % 16 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    };
    let recv_all = async {
        for i in 0..MESSAGES {
            let wc = b.recv_cq.next_completion().await.unwrap();
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
            assert_eq!(wc.qp_num, b_qpn);
        }
    };
    let sends_all = async {
        for i in 0..MESSAGES {
            let wc = a.send_cq.next_completion().await.unwrap();
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        }
    };
    let both = async { tokio::join!(recv_all, sends_all) };
    tokio::time::timeout(WAIT, both)
        .await
        .expect("completions did not all arrive");
    sender.join().unwrap();

    // Shared channel: the send and receive CQs of b wait at once; each gets its own.
    let b = std::sync::Arc::new(b);
    let (bs, br) = (b.clone(), b.clone());
    let send_waiter = tokio::spawn(async move { bs.send_cq.next_completion().await });
    let recv_waiter = tokio::spawn(async move { br.recv_cq.next_completion().await });
    tokio::task::yield_now().await;
    b.post_recv(1000, vec![b.recv_mr.sge(0, 64).unwrap()]);
    send_with(&a, &b, 1001, 64, SendFlags::SIGNALED);
    let wc = tokio::time::timeout(WAIT, recv_waiter)
        .await
        .expect("receive waiter")
        .unwrap()
        .unwrap();
    // 1000 was posted first, so it takes the message.
    assert_eq!(wc.wr_id, 1000);
    poll_1(&a.send_cq, "a's send of 1001");
    a.post_recv(2000, vec![a.recv_mr.sge(0, 64).unwrap()]);
    b.post_send(SendWr::send(2000, vec![b.send_mr.sge(0, 8).unwrap()]));
    let wc = tokio::time::timeout(WAIT, send_waiter)
        .await
        .expect("send waiter")
        .unwrap()
        .unwrap();
    assert_eq!(wc.wr_id, 2000);
    let wc = a.recv_cq.next_completion().await.unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (2000, WcStatus::Success, 8)
    );
}

/// tokio: a CQ without a channel cannot wait (EINVAL, not a hang).
#[tokio::test]
async fn tokio_next_completion_needs_a_channel() {
    let ctx = open_udp_device(FILE, 13);
    let cq = ctx.create_cq(4).unwrap();
    assert_eq!(
        cq.next_completion().await.unwrap_err().errno(),
        libc::EINVAL
    );
}
