//! RC SEND / SEND_WITH_IMM / RECV end to end over UDP between two emulated devices: every
//! path MTU, message sizes around the MTU boundaries, 64 KiB and 1 MiB, gather and scatter lists
//! split differently on each side (zero-length SGEs included), every destination byte and
//! every completion field checked; and WR lists of 32 posted in one call.
//!
//! File number 4: devices on 127.10.4.n.

use softverbs::{Mtu, RcConnectOptions, RecvWr, SendFlags, SendWr, Sge, WcOpcode};
use softverbs_conformance::{
    assert_bytes_eq, check_recv_wc, check_send_wc, connect_pair, open_udp_device, pattern, poll_1,
    poll_n, side_pair, Layout, SideConfig,
};

const FILE: u8 = 4;
const MIB: usize = 1 << 20;
const CANARY: u8 = 0xEE;

/// Gather layouts of the sender (at most 4 SGEs).
fn send_layout(kind: usize, len: usize) -> Layout {
    match kind % 3 {
        // Four pieces, one empty, placed out of order in the MR with gaps between them.
        0 => Layout::new(len, &[1, 0, 2, 1], &[2, 0, 3, 1], 5, 13, 0),
        // One SGE.
        1 => Layout::new(len, &[1], &[0], 0, 0, 0),
        // Empty first and last SGEs around two pieces.
        _ => Layout::new(len, &[0, 1, 1, 0], &[0, 1, 2, 3], 100, 3, 0),
    }
}

/// Scatter layouts of the receiver (at most 5 SGEs), split differently from the sender's.
fn recv_layout(kind: usize, len: usize) -> Layout {
    match kind % 3 {
        // Five pieces, the first empty, placed in reverse order, with room to spare.
        0 => Layout::new(len, &[0, 3, 1, 1, 2], &[4, 3, 2, 1, 0], 1, 7, 100),
        // Two contiguous pieces that hold the message exactly.
        1 => Layout::new(len, &[1, 1], &[0, 1], 0, 0, 0),
        // Three pieces, the middle one empty, one spare byte.
        _ => Layout::new(len, &[5, 0, 1], &[1, 2, 0], 3, 1, 1),
    }
}

fn side_config(max_len: usize) -> SideConfig {
    let mut cfg = SideConfig {
        buf_len: max_len + 8192,
        ..SideConfig::default()
    };
    cfg.cap.max_send_sge = 4;
    cfg.cap.max_recv_sge = 5;
    cfg
}

/// Sends every size as a SEND and as a SEND_WITH_IMM from a to b at path MTU `mtu`.
fn run_sizes(na: u8, nb: u8, mtu: Mtu) {
    let m = mtu.bytes() as usize;
    let sizes = [0, 1, m - 1, m, m + 1, 3 * m + 7, 64 * 1024, MIB];
    let cfg = side_config(*sizes.iter().max().unwrap());
    let (a, b) = side_pair(&open_udp_device(FILE, na), &open_udp_device(FILE, nb), &cfg);
    let opts = RcConnectOptions {
        path_mtu: mtu,
        ..RcConnectOptions::default()
    };
    // a's PSNs wrap around 2^24 during the larger messages.
    connect_pair(&a, &b, 0xff_ff00, 0x00_0042, &opts);
    assert_eq!(a.qp.query().unwrap().0.path_mtu, mtu);

    let mut seq = 0u64;
    for &len in &sizes {
        for with_imm in [false, true] {
            seq += 1;
            let what = format!("MTU {m}, {len} bytes, imm {with_imm}");
            let msg = pattern(seq, len);
            let slayout = send_layout(seq as usize, len);
            let rlayout = recv_layout(seq as usize + 1, len);
            assert!(slayout.extent() <= cfg.buf_len && rlayout.extent() <= cfg.buf_len);
            assert_eq!(slayout.total(), len);
            slayout.write(&a.send_mr, &msg);
            b.recv_mr.fill(CANARY).unwrap();

            // A zero-byte SEND goes with no SGE at all on either side.
            let (ssges, rsges) = if len == 0 && !with_imm {
                (Vec::new(), Vec::new())
            } else {
                (slayout.sges(&a.send_mr), rlayout.sges(&b.recv_mr))
            };
            let imm = (seq as u32).wrapping_mul(0x9E37_79B9);
            let recv_id = 1_000 + seq;
            let before = a.counters();
            b.qp.post_recv(&[RecvWr {
                wr_id: recv_id,
                sg_list: rsges,
            }])
            .unwrap_or_else(|e| panic!("{what}: post_recv: {e}"));
            let wr = if with_imm {
                SendWr::send_with_imm(seq, ssges, imm)
            } else {
                SendWr::send(seq, ssges)
            };
            a.qp.post_send(&[wr])
                .unwrap_or_else(|e| panic!("{what}: post_send: {e}"));

            let recv = poll_1(&b.recv_cq, &what);
            check_recv_wc(
                &recv,
                recv_id,
                len,
                with_imm.then_some(imm),
                b.qpn(),
                a.qpn(),
            );
            let send = poll_1(&a.send_cq, &what);
            check_send_wc(&send, seq, len, a.qpn());
            // The message was cut at the path MTU: ceil(len / mtu) packets (one when empty),
            // not counting retransmissions.
            let after = a.counters();
            let first_transmissions = (after.sent_requests - before.sent_requests)
                - (after.retransmitted_packets - before.retransmitted_packets);
            assert_eq!(
                first_transmissions,
                len.div_ceil(m).max(1) as u64,
                "{what}: request packets"
            );

            let image = b.recv_mr.to_vec();
            assert_bytes_eq(&rlayout.gather(&image, len), &msg, &what);
            if let Some(at) = rlayout.untouched_outside(&image, len, CANARY) {
                panic!("{what}: byte {at} of the receive MR outside the message was written");
            }
        }
    }
    // Nothing else arrived on either side.
    softverbs_conformance::assert_cq_empty(&a.send_cq, "a send");
    softverbs_conformance::assert_cq_empty(&b.recv_cq, "b recv");
    softverbs_conformance::assert_cq_empty(&a.recv_cq, "a recv");
    softverbs_conformance::assert_cq_empty(&b.send_cq, "b send");
}

#[test]
fn send_recv_mtu_256() {
    run_sizes(1, 2, Mtu::Mtu256);
}

#[test]
fn send_recv_mtu_512() {
    run_sizes(3, 4, Mtu::Mtu512);
}

#[test]
fn send_recv_mtu_1024() {
    run_sizes(5, 6, Mtu::Mtu1024);
}

#[test]
fn send_recv_mtu_2048() {
    run_sizes(7, 8, Mtu::Mtu2048);
}

#[test]
fn send_recv_mtu_4096() {
    run_sizes(9, 10, Mtu::Mtu4096);
}

#[test]
fn lists_of_32_receives_and_32_sends_complete_in_order() {
    const N: usize = 32;
    const SLOT: usize = 4096;
    let cfg = SideConfig {
        buf_len: N * SLOT,
        ..SideConfig::default()
    };
    let (a, b) = side_pair(&open_udp_device(FILE, 11), &open_udp_device(FILE, 12), &cfg);
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu1024,
        ..RcConnectOptions::default()
    };
    connect_pair(&a, &b, 0x10, 0x20, &opts);
    b.recv_mr.fill(CANARY).unwrap();

    // Message i: (i * 97) % 3500 bytes (0 to 3 packets) in slot i of each MR.
    let len_of = |i: usize| (i * 97 + i * i * 31) % 3500;
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| pattern(500 + i as u64, len_of(i))).collect();
    for (i, msg) in msgs.iter().enumerate() {
        a.send_mr.write(i * SLOT, msg).unwrap();
    }
    let recvs: Vec<RecvWr> = (0..N)
        .map(|i| RecvWr {
            wr_id: 7_000 + i as u64,
            sg_list: vec![b.recv_mr.sge(i * SLOT, SLOT as u32).unwrap()],
        })
        .collect();
    b.qp.post_recv(&recvs).expect("post 32 receives");
    let sends: Vec<SendWr> = (0..N)
        .map(|i| {
            let sge = vec![a.send_mr.sge(i * SLOT, len_of(i) as u32).unwrap()];
            if i % 2 == 0 {
                SendWr::send(i as u64, sge)
            } else {
                SendWr::send_with_imm(i as u64, sge, 0xABC0_0000 + i as u32)
            }
        })
        .collect();
    a.qp.post_send(&sends).expect("post 32 sends");

    let rwcs = poll_n(&b.recv_cq, N, "32 receives");
    let swcs = poll_n(&a.send_cq, N, "32 sends");
    let image = b.recv_mr.to_vec();
    for i in 0..N {
        let imm = (i % 2 == 1).then_some(0xABC0_0000 + i as u32);
        check_recv_wc(&rwcs[i], 7_000 + i as u64, len_of(i), imm, b.qpn(), a.qpn());
        check_send_wc(&swcs[i], i as u64, len_of(i), a.qpn());
        assert_eq!(swcs[i].opcode, WcOpcode::Send);
        let slot = &image[i * SLOT..(i + 1) * SLOT];
        assert_bytes_eq(&slot[..len_of(i)], &msgs[i], &format!("message {i}"));
        assert!(
            slot[len_of(i)..].iter().all(|&x| x == CANARY),
            "message {i} wrote past its length"
        );
    }
}

#[test]
fn inline_sends_copy_the_data_at_post_time() {
    let mut cfg = SideConfig::default();
    cfg.cap.max_inline_data = 64;
    let (a, b) = side_pair(&open_udp_device(FILE, 13), &open_udp_device(FILE, 14), &cfg);
    connect_pair(&a, &b, 1, 2, &RcConnectOptions::default());
    assert!(a.qp.cap().max_inline_data >= 64);
    b.recv_mr.fill(CANARY).unwrap();
    for i in 0..3u64 {
        b.post_recv(i, vec![b.recv_mr.sge(i as usize * 100, 100).unwrap()]);
    }

    // 60 bytes gathered from two SGEs, inline; the buffer is overwritten right after the
    // post returns, before the data can have gone out by any other route.
    let msg = pattern(40, 60);
    a.send_mr.write(0, &msg[..25]).unwrap();
    a.send_mr.write(1000, &msg[25..]).unwrap();
    let inline = |id: u64, sges| SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..SendWr::send(id, sges)
    };
    a.qp.post_send(&[inline(
        1,
        vec![
            a.send_mr.sge(0, 25).unwrap(),
            a.send_mr.sge(1000, 35).unwrap(),
        ],
    )])
    .expect("inline post");
    a.send_mr.fill(0).unwrap();
    check_recv_wc(&poll_1(&b.recv_cq, "recv"), 0, 60, None, b.qpn(), a.qpn());
    check_send_wc(&poll_1(&a.send_cq, "send"), 1, 60, a.qpn());
    assert_bytes_eq(&b.recv_mr.to_vec()[..60], &msg, "inline message");

    // More inline bytes than max_inline_data: EINVAL at that WR, the one before is posted.
    let err =
        a.qp.post_send(&[
            inline(2, vec![a.send_mr.sge(0, 64).unwrap()]),
            inline(3, vec![a.send_mr.sge(0, 65).unwrap()]),
        ])
        .unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, 22), "{err}");
    check_send_wc(&poll_1(&a.send_cq, "send 2"), 2, 64, a.qpn());
    check_recv_wc(&poll_1(&b.recv_cq, "recv 1"), 1, 64, None, b.qpn(), a.qpn());

    // The emulator reads process memory only through registered regions: an inline SGE with
    // a bad lkey is refused at post time (EINVAL) instead of reading arbitrary memory.
    let bogus = Sge {
        addr: a.send_mr.addr(),
        length: 16,
        lkey: a.send_mr.lkey() ^ 0x0100_0000,
    };
    let err = a.qp.post_send(&[inline(4, vec![bogus])]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, 22), "{err}");
    assert_eq!(a.qp.state().unwrap(), softverbs::QpState::Rts);
    send_ok_after(&a, &b);
}

/// One more plain message a -> b (into b's receive 2) to show the QP still works.
fn send_ok_after(a: &softverbs_conformance::Side, b: &softverbs_conformance::Side) {
    a.send_mr.write(0, &pattern(41, 10)).unwrap();
    a.post_send(SendWr::send(5, vec![a.send_mr.sge(0, 10).unwrap()]));
    check_recv_wc(&poll_1(&b.recv_cq, "recv 2"), 2, 10, None, b.qpn(), a.qpn());
    check_send_wc(&poll_1(&a.send_cq, "send 5"), 5, 10, a.qpn());
    assert_bytes_eq(
        &b.recv_mr.to_vec()[200..210],
        &pattern(41, 10),
        "last message",
    );
}
