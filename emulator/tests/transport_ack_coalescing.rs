//! ACK coalescing under the deterministic simulator: which request packets ask for an ACK
//! (the BTH AckReq bit), how many ACKs the responder sends, and that every WQE still leaves
//! the send queue without a retransmission, whether the responder sends the ACKs nobody
//! asked for (softverbs) or not (rxe: the requester's timer asks again).

use softverbs_api::{
    wr::RemoteAddr, AccessFlags, Mtu, QpAttr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
};
use softverbs_emu::sim::{FaultConfig, Side, SimPair, TraceEvent};
use softverbs_emu::transport::requester::COALESCED_PACKETS_PER_ACK;
use softverbs_emu::transport::wqe::WorkQueue;
use softverbs_emu::wire::{Opcode, RoceRepr};

/// Connection attributes under which a requester coalesces (timeout 10, a retry to spare).
fn attrs(timeout: u8, retry_cnt: u8) -> QpAttr {
    QpAttr {
        sq_psn: 500,
        rq_psn: 500,
        timeout,
        retry_cnt,
        rnr_retry: 7,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..QpAttr::default()
    }
}

/// A pair with a 64-byte region on A (source) and one writable by A on B; returns the pair,
/// A's SGE and B's region as a WRITE target.
fn pair(attrs: &QpAttr) -> (SimPair, Sge, RemoteAddr) {
    let mut p = SimPair::new_rc(3, FaultConfig::none(), Mtu::Mtu1024, attrs);
    let (src, lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    let (dst, _, rkey) = p.register(
        Side::B,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    p.write(Side::A, src, &[0x5a; 64]);
    let sge = Sge {
        addr: src,
        length: 8,
        lkey,
    };
    let remote = RemoteAddr {
        remote_addr: dst,
        rkey,
    };
    (p, sge, remote)
}

/// An 8-byte WRITE, signaled or not.
fn write(wr_id: u64, sge: Sge, remote: RemoteAddr, signaled: bool) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaWrite,
        send_flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        remote,
        ..SendWr::send(wr_id, vec![sge])
    }
}

/// The parsed packets `side` sent, in order: (opcode, PSN, AckReq).
fn sent_by(p: &SimPair, side: Side) -> Vec<(Opcode, u32, bool)> {
    p.trace
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Sent { from, bytes, .. } if *from == side => {
                let r = RoceRepr::parse(bytes).expect("own packets parse").0;
                Some((r.bth.opcode, r.bth.psn.value(), r.bth.ack_req))
            }
            _ => None,
        })
        .collect()
}

fn ack_reqs(p: &SimPair) -> Vec<bool> {
    sent_by(p, Side::A).iter().map(|s| s.2).collect()
}

#[test]
fn unsignaled_writes_ask_for_no_ack_and_the_signaled_one_acknowledges_them_all() {
    let (mut p, sge, remote) = pair(&attrs(10, 7));
    let mut wrs: Vec<SendWr> = (0..5).map(|i| write(i, sge, remote, false)).collect();
    wrs.push(write(5, sge, remote, true));
    p.post_send(Side::A, &wrs).unwrap();
    p.run(1_000);
    assert_eq!(ack_reqs(&p), [false, false, false, false, false, true]);
    // One ACK, for the last PSN: it retires all six WQEs.
    assert_eq!(sent_by(&p, Side::B), [(Opcode::RC_ACKNOWLEDGE, 505, false)]);
    let wcs: Vec<_> = p.a.completions.iter().map(|c| c.wc.wr_id).collect();
    assert_eq!(wcs, [5], "only the signaled WQE completes");
    assert!(p.a.qp.sq.is_empty());
    assert_eq!(p.a.qp.counters.retransmitted_packets, 0);
    assert_eq!(p.read(Side::B, remote.remote_addr, 8), vec![0x5a; 8]);
}

#[test]
fn an_unsignaled_tail_is_acknowledged_once_the_traffic_pauses() {
    let (mut p, sge, remote) = pair(&attrs(10, 7));
    let wrs: Vec<SendWr> = (0..3).map(|i| write(i, sge, remote, false)).collect();
    p.post_send(Side::A, &wrs).unwrap();
    p.run(1_000);
    assert_eq!(ack_reqs(&p), [false, false, false]);
    // The responder owed one ACK and sent it when the wire went idle, before any timer.
    assert_eq!(sent_by(&p, Side::B), [(Opcode::RC_ACKNOWLEDGE, 502, false)]);
    assert!(p.a.qp.sq.is_empty());
    assert!(p.a.completions.is_empty());
    assert_eq!(p.a.qp.counters.ack_timeouts, 0);
    assert_eq!(p.a.qp.counters.retransmitted_packets, 0);
    assert!(p.now_ns < 100_000, "no timer ran: {} ns", p.now_ns);
}

#[test]
fn against_a_responder_that_only_answers_requests_the_timer_asks_again() {
    let (mut p, sge, remote) = pair(&attrs(10, 1));
    p.lazy_acks = false;
    let wrs: Vec<SendWr> = (0..3).map(|i| write(i, sge, remote, false)).collect();
    p.post_send(Side::A, &wrs).unwrap();
    p.run(1_000);
    let a = sent_by(&p, Side::A);
    // The retransmission (go-back-N from the first unacknowledged PSN) asks on every
    // message, so the duplicates are answered and a single retry is enough.
    assert_eq!(
        a.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(),
        [
            (500, false),
            (501, false),
            (502, false),
            (500, true),
            (501, true),
            (502, true)
        ]
    );
    assert!(!sent_by(&p, Side::B).is_empty());
    assert!(p.a.qp.sq.is_empty());
    assert!(p.a.completions.is_empty(), "no error completion");
    assert_eq!(p.a.qp.state(), softverbs_api::QpState::Rts);
    assert_eq!(p.a.qp.counters.ack_timeouts, 1);
}

/// What a case changes on the pair before posting.
type Setup = dyn Fn(&mut SimPair);

#[test]
fn every_message_asks_where_coalescing_is_off_or_unsafe() {
    let off = |p: &mut SimPair| p.a.qp.coalesce_acks = false;
    let tiny_queue = |p: &mut SimPair| p.a.qp.sq = WorkQueue::new(2);
    let cases: [(&str, QpAttr, &Setup); 4] = [
        ("turned off", attrs(10, 7), &off),
        ("ACK timeout under 4 ms", attrs(9, 7), &|_| {}),
        ("no retry to spare", attrs(10, 0), &|_| {}),
        ("a send queue of 2", attrs(10, 7), &tiny_queue),
    ];
    for (name, attrs, setup) in cases {
        let (mut p, sge, remote) = pair(&attrs);
        setup(&mut p);
        for i in 0..2 {
            p.post_send(Side::A, &[write(i, sge, remote, false)])
                .unwrap();
        }
        p.run(1_000);
        assert_eq!(ack_reqs(&p), [true, true], "{name}");
        assert_eq!(sent_by(&p, Side::B).len(), 2, "{name}: an ACK per message");
        assert!(p.a.qp.sq.is_empty(), "{name}");
    }
}

#[test]
fn a_long_stream_of_unsignaled_writes_asks_every_coalesced_packets_per_ack() {
    let every = COALESCED_PACKETS_PER_ACK as usize;
    let (mut p, sge, remote) = pair(&attrs(10, 7));
    for i in 0..(2 * every + every / 2) as u64 {
        p.post_send(Side::A, &[write(i, sge, remote, false)])
            .unwrap();
    }
    p.run(10_000);
    let asked: Vec<usize> = ack_reqs(&p)
        .iter()
        .enumerate()
        .filter(|(_, &a)| a)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(asked, [every - 1, 2 * every - 1]);
    assert!(p.a.qp.sq.is_empty(), "the tail's ACK came unasked");
    assert_eq!(p.a.qp.counters.retransmitted_packets, 0);
}

/// A LOCAL_INV runs once everything before it has completed: the WRITE before it must get
/// its ACK, whether the two are posted together or the LOCAL_INV after the WRITE left.
#[test]
fn a_local_operation_behind_unsignaled_work_does_not_wait_for_the_timer() {
    for together in [true, false] {
        let (mut p, sge, remote) = pair(&attrs(10, 7));
        // The responder never volunteers an ACK, like rxe's: only the requester can help.
        p.lazy_acks = false;
        let (_, _, rkey) = p.register(
            Side::A,
            64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        );
        let inv = SendWr {
            opcode: WrOpcode::LocalInv,
            invalidate_rkey: rkey,
            ..SendWr::send(2, vec![])
        };
        if together {
            p.post_send(Side::A, &[write(1, sge, remote, false), inv])
                .unwrap();
        } else {
            p.post_send(Side::A, &[write(1, sge, remote, false)])
                .unwrap();
            // The WRITE reaches B, which owes an ACK it will not send.
            assert!(p.step());
            assert!(sent_by(&p, Side::B).is_empty());
            p.post_send(Side::A, &[inv]).unwrap();
        }
        p.run(1_000);
        let a = sent_by(&p, Side::A);
        let expected: &[(Opcode, u32, bool)] = if together {
            &[(Opcode::RC_RDMA_WRITE_ONLY, 500, true)]
        } else {
            // The WRITE again, now asking: B answers the duplicate with an ACK.
            &[
                (Opcode::RC_RDMA_WRITE_ONLY, 500, false),
                (Opcode::RC_RDMA_WRITE_ONLY, 500, true),
            ]
        };
        assert_eq!(a, expected, "together: {together}");
        assert_eq!(
            p.a.completion_summary(),
            [(2, WcStatus::LocQpOpErr, WcOpcode::LocalInv)],
            "together: {together} (a plain MR cannot be invalidated)"
        );
        assert_eq!(p.a.qp.counters.ack_timeouts, 0, "together: {together}");
    }
}

/// A responder acknowledges a packet that asked (AckReq) or that ended a message, never a
/// FIRST or MIDDLE packet nobody asked about, even when the traffic pauses in the middle of
/// a message. Kernel rxe's responder does the same; an ACK of everything a kernel rxe
/// requester had sent, arriving while that requester waited for its window, left it with
/// nothing outstanding and so without a retransmission timer: stopped for good (issue 26).
#[test]
fn a_pause_in_the_middle_of_a_message_gets_no_ack_of_its_middle() {
    let mtu = 1024usize;
    let mut p = SimPair::new_rc(3, FaultConfig::none(), Mtu::Mtu1024, &attrs(10, 7));
    let (src, lkey, _) = p.register(Side::A, 3 * mtu, AccessFlags::LOCAL_WRITE);
    let (dst, _, rkey) = p.register(
        Side::B,
        3 * mtu,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let data: Vec<u8> = (0..3 * mtu).map(|i| (i * 7) as u8).collect();
    p.write(Side::A, src, &data);
    // The LAST packet is lost: B sees FIRST and MIDDLE, then a quiet wire.
    p.lose.push((Side::A, 2));
    let sge = Sge {
        addr: src,
        length: data.len() as u32,
        lkey,
    };
    let remote = RemoteAddr {
        remote_addr: dst,
        rkey,
    };
    let wr = write(1, sge, remote, true);
    p.post_send(Side::A, &[wr]).unwrap();
    p.run(1_000);
    let a = sent_by(&p, Side::A);
    assert_eq!(
        a[..3].iter().map(|s| (s.0, s.2)).collect::<Vec<_>>(),
        [
            (Opcode::RC_RDMA_WRITE_FIRST, false),
            (Opcode::RC_RDMA_WRITE_MIDDLE, false),
            (Opcode::RC_RDMA_WRITE_LAST, true)
        ]
    );
    let b = sent_by(&p, Side::B);
    assert!(
        !b.iter()
            .any(|s| s.0 == Opcode::RC_ACKNOWLEDGE && s.1 == 501),
        "B acknowledged the MIDDLE packet nobody asked about: {b:?}"
    );
    // The requester's timer resends the message, and it completes once.
    assert_eq!(
        p.a.completion_summary(),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.read(Side::B, dst, data.len()), data);
}
