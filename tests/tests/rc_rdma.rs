//! RC RDMA WRITE, WRITE_WITH_IMM and READ end to end over UDP between two emulated devices:
//! sizes around the MTU up to 1 MiB at two path MTUs, gather lists on the WRITE side and
//! scatter lists on the READ side, to and from an offset inside the remote MR with every byte
//! of both MRs checked (guard bytes around the accessed range stay untouched); WRITE_WITH_IMM
//! consuming a receive (and RNR until one is posted); ordering of mixed WR lists; unsignaled
//! WRITEs read back by a READ; FENCE and `max_rd_atomic` 1; post-time errors; a 1 MiB READ at
//! MTU 256 (and long READs under loss or outlasting the ACK timeout); a mix of RDMA and
//! atomics under loss, duplication and reordering; a responder that is only in RTR.
//!
//! File number 30: devices on 127.10.30.n.

use softverbs::{
    Context, DeviceConfig, Mr, Mtu, QpState, RcConnectOptions, RemoteAddr, SendFlags, SendWr,
    WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
use softverbs_conformance::{
    assert_bytes_eq, assert_cq_empty, check_recv_wc, check_send_wc, check_send_wc_op, cmp_swap_wr,
    connect_pair, connect_pair_with, device_name, fetch_add_wr, open_udp_device, pattern, poll_1,
    poll_n, rdma_read_wr, rdma_write_imm_wr, rdma_write_wr, read_u64, register_and_open,
    register_mr, remote_all_access, remote_at, side_pair, test_ip, to_rtr_only, wait_until,
    write_u64, Layout, Side, SideConfig, WAIT,
};

use softverbs_emu::net::fault::{FaultConfig, FaultSetting};

const FILE: u8 = 30;
const MIB: usize = 1 << 20;
const CANARY: u8 = 0xEE;
/// Where RDMA operations land in the remote MR: inside it, not page- nor word-aligned.
const REMOTE_OFFSET: usize = 4096 + 13;
/// Guard bytes after the largest access in the remote MR.
const GUARD: usize = 4096;

/// A connected pair plus an RDMA-accessible MR on b.
struct RdmaPair {
    a: Side,
    b: Side,
    /// On b: LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.
    target: Mr,
}

fn side_config(max_len: usize) -> SideConfig {
    let mut cfg = SideConfig {
        buf_len: max_len + 8192,
        ..SideConfig::default()
    };
    cfg.cap.max_send_sge = 5;
    cfg.cap.max_recv_sge = 4;
    cfg
}

/// Opens devices `na` and `nb`, connects a side on each with `opts_a` / `opts_b`, and
/// registers a target MR of `REMOTE_OFFSET + max_len + GUARD` bytes on b.
fn rdma_pair_with(
    na: u8,
    nb: u8,
    max_len: usize,
    opts_a: &RcConnectOptions,
    opts_b: &RcConnectOptions,
) -> RdmaPair {
    let cfg = side_config(max_len);
    let (a, b) = side_pair(&open_udp_device(FILE, na), &open_udp_device(FILE, nb), &cfg);
    // a's PSNs wrap around 2^24 during the larger messages.
    connect_pair_with(&a, &b, 0xff_ff00, 0x00_0042, opts_a, opts_b);
    let target = register_mr(&b.pd, REMOTE_OFFSET + max_len + GUARD, remote_all_access());
    RdmaPair { a, b, target }
}

fn rdma_pair(na: u8, nb: u8, max_len: usize, mtu: Mtu) -> RdmaPair {
    let opts = RcConnectOptions {
        path_mtu: mtu,
        ..RcConnectOptions::default()
    };
    rdma_pair_with(na, nb, max_len, &opts, &opts)
}

/// The sizes of every size test: empty, one byte, around one MTU, several MTUs, 64 KiB, 1 MiB.
fn sizes(mtu: Mtu) -> [usize; 8] {
    let m = mtu.bytes() as usize;
    [0, 1, m - 1, m, m + 1, 3 * m + 7, 64 * 1024, MIB]
}

/// Gather layouts of a WRITE (at most 5 SGEs), exactly `len` bytes.
fn gather_layout(kind: usize, len: usize) -> Layout {
    match kind % 3 {
        // Four pieces, one empty, placed out of order with gaps between them.
        0 => Layout::new(len, &[1, 0, 2, 1], &[2, 0, 3, 1], 5, 13, 0),
        // One SGE.
        1 => Layout::new(len, &[1], &[0], 0, 0, 0),
        // Five pieces, empty first and last.
        _ => Layout::new(len, &[0, 1, 3, 1, 0], &[0, 1, 2, 3, 4], 100, 3, 0),
    }
}

/// Scatter layouts of a READ (at most 5 SGEs), exactly `len` bytes (a READ's length is its
/// scatter list's total).
fn scatter_layout(kind: usize, len: usize) -> Layout {
    match kind % 3 {
        // Five pieces, the first empty, placed in reverse order with gaps.
        0 => Layout::new(len, &[0, 3, 1, 1, 2], &[4, 3, 2, 1, 0], 1, 7, 0),
        // Two contiguous pieces.
        1 => Layout::new(len, &[1, 1], &[0, 1], 0, 0, 0),
        // Three pieces, the middle one empty.
        _ => Layout::new(len, &[5, 0, 1], &[1, 2, 0], 3, 1, 0),
    }
}

/// Checks that `image` holds `want` at `offset` and `canary` everywhere else.
fn check_placed(image: &[u8], offset: usize, want: &[u8], canary: u8, what: &str) {
    assert_bytes_eq(&image[offset..offset + want.len()], want, what);
    if let Some(at) = image[..offset].iter().position(|&x| x != canary) {
        panic!("{what}: byte {at} before the accessed range was written");
    }
    if let Some(at) = image[offset + want.len()..]
        .iter()
        .position(|&x| x != canary)
    {
        panic!(
            "{what}: byte {} after the accessed range was written",
            offset + want.len() + at
        );
    }
}

/// Request packets `a` sent between two counter snapshots, not counting retransmissions.
fn first_transmissions(
    before: &softverbs_emu::transport::Counters,
    after: &softverbs_emu::transport::Counters,
) -> u64 {
    (after.sent_requests - before.sent_requests)
        - (after.retransmitted_packets - before.retransmitted_packets)
}

/// WRITEs of every size from a (gathered from several SGEs) to `REMOTE_OFFSET` of b's MR.
fn run_write_sizes(na: u8, nb: u8, mtu: Mtu) {
    let m = mtu.bytes() as usize;
    let p = rdma_pair(na, nb, MIB, mtu);
    let (a, b) = (&p.a, &p.b);
    // A receive posted before any WRITE: plain WRITEs must leave it alone.
    b.post_recv(999, vec![b.recv_mr.sge(0, 64).unwrap()]);
    for (k, &len) in sizes(mtu).iter().enumerate() {
        let seq = k as u64 + 1;
        let what = format!("WRITE of {len} bytes at MTU {m}");
        let msg = pattern(seq, len);
        let layout = gather_layout(k, len);
        assert!(layout.extent() <= a.send_mr.len());
        layout.write(&a.send_mr, &msg);
        p.target.fill(CANARY).unwrap();
        // A zero-byte WRITE goes with no SGE at all.
        let sges = if len == 0 {
            Vec::new()
        } else {
            layout.sges(&a.send_mr)
        };
        let before = a.counters();
        a.post_send(rdma_write_wr(
            seq,
            sges,
            remote_at(&p.target, REMOTE_OFFSET),
        ));
        let wc = poll_1(&a.send_cq, &what);
        check_send_wc_op(&wc, seq, WcOpcode::RdmaWrite, len, a.qpn());
        assert_eq!(
            first_transmissions(&before, &a.counters()),
            len.div_ceil(m).max(1) as u64,
            "{what}: request packets"
        );
        check_placed(&p.target.to_vec(), REMOTE_OFFSET, &msg, CANARY, &what);
    }
    assert_cq_empty(&b.recv_cq, "plain WRITEs complete nothing at the target");
    assert_cq_empty(&b.send_cq, "b send");
    // The receive posted first is still the next one: a SEND takes it.
    a.send_mr.write(0, &pattern(77, 10)).unwrap();
    a.post_send(SendWr::send(100, vec![a.send_mr.sge(0, 10).unwrap()]));
    check_recv_wc(&poll_1(&b.recv_cq, "recv"), 999, 10, None, b.qpn(), a.qpn());
    check_send_wc(&poll_1(&a.send_cq, "send"), 100, 10, a.qpn());
}

#[test]
fn write_sizes_mtu_1024() {
    run_write_sizes(1, 2, Mtu::Mtu1024);
}

#[test]
fn write_sizes_mtu_4096() {
    run_write_sizes(3, 4, Mtu::Mtu4096);
}

/// READs of every size from `REMOTE_OFFSET` of b's MR into a (scattered over several SGEs).
fn run_read_sizes(na: u8, nb: u8, mtu: Mtu) {
    let m = mtu.bytes() as usize;
    let p = rdma_pair(na, nb, MIB, mtu);
    let (a, b) = (&p.a, &p.b);
    for (k, &len) in sizes(mtu).iter().enumerate() {
        let seq = k as u64 + 1;
        let what = format!("READ of {len} bytes at MTU {m}");
        let msg = pattern(100 + seq, len);
        p.target.fill(0x5A).unwrap();
        p.target.write(REMOTE_OFFSET, &msg).unwrap();
        let remote_before = p.target.to_vec();
        let layout = scatter_layout(k, len);
        assert!(layout.extent() <= a.send_mr.len());
        a.send_mr.fill(CANARY).unwrap();
        let sges = if len == 0 {
            Vec::new()
        } else {
            layout.sges(&a.send_mr)
        };
        let before = a.counters();
        let b_before = b.counters();
        a.post_send(rdma_read_wr(seq, sges, remote_at(&p.target, REMOTE_OFFSET)));
        let wc = poll_1(&a.send_cq, &what);
        check_send_wc_op(&wc, seq, WcOpcode::RdmaRead, len, a.qpn());
        // One request packet; at least one response per MTU of data (more if some were
        // asked for again).
        assert_eq!(
            first_transmissions(&before, &a.counters()),
            1,
            "{what}: one READ request"
        );
        let responses = b.counters().sent_responses - b_before.sent_responses;
        assert!(
            responses >= len.div_ceil(m).max(1) as u64,
            "{what}: only {responses} responses"
        );
        let image = a.send_mr.to_vec();
        assert_bytes_eq(&layout.gather(&image, len), &msg, &what);
        if let Some(at) = layout.untouched_outside(&image, len, CANARY) {
            panic!("{what}: local byte {at} outside the scatter list was written");
        }
        assert!(
            p.target.to_vec() == remote_before,
            "{what}: a READ changed the remote MR"
        );
    }
    assert_cq_empty(&a.send_cq, "a send");
    assert_cq_empty(&b.recv_cq, "READs complete nothing at the target");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn read_sizes_mtu_1024() {
    run_read_sizes(5, 6, Mtu::Mtu1024);
}

#[test]
fn read_sizes_mtu_4096() {
    run_read_sizes(7, 8, Mtu::Mtu4096);
}

#[test]
fn read_of_1_mib_at_mtu_256() {
    // 4096 response packets in one burst: whatever the sockets drop is asked for again.
    let p = rdma_pair(9, 10, MIB, Mtu::Mtu256);
    let (a, b) = (&p.a, &p.b);
    let msg = pattern(4096, MIB);
    p.target.fill(0x5A).unwrap();
    p.target.write(REMOTE_OFFSET, &msg).unwrap();
    for (round, layout) in [scatter_layout(0, MIB), scatter_layout(1, MIB)]
        .iter()
        .enumerate()
    {
        let what = format!("1 MiB READ at MTU 256, round {round}");
        a.send_mr.fill(CANARY).unwrap();
        let b_before = b.counters();
        a.post_send(rdma_read_wr(
            round as u64,
            layout.sges(&a.send_mr),
            remote_at(&p.target, REMOTE_OFFSET),
        ));
        let wc = poll_1(&a.send_cq, &what);
        check_send_wc_op(&wc, round as u64, WcOpcode::RdmaRead, MIB, a.qpn());
        assert!(b.counters().sent_responses - b_before.sent_responses >= 4096);
        let image = a.send_mr.to_vec();
        assert_bytes_eq(&layout.gather(&image, MIB), &msg, &what);
        assert_eq!(
            layout.untouched_outside(&image, MIB, CANARY),
            None,
            "{what}"
        );
    }
}

#[test]
fn zero_length_write_and_read_need_no_valid_rkey() {
    // IB spec C9-88 (and rxe): a zero-length RDMA access checks neither address nor key.
    let p = rdma_pair(11, 12, 4096, Mtu::Mtu1024);
    let (a, b) = (&p.a, &p.b);
    let nowhere = RemoteAddr {
        remote_addr: 0,
        rkey: 0x0bad_0bad,
    };
    p.target.fill(CANARY).unwrap();
    b.post_recv(7, vec![]);
    a.qp.post_send(&[
        rdma_write_wr(1, vec![], nowhere),
        rdma_read_wr(2, vec![], nowhere),
        rdma_write_imm_wr(3, vec![], nowhere, 0x1234_5678),
    ])
    .expect("post");
    let s = poll_n(&a.send_cq, 3, "zero-length RDMA");
    check_send_wc_op(&s[0], 1, WcOpcode::RdmaWrite, 0, a.qpn());
    check_send_wc_op(&s[1], 2, WcOpcode::RdmaRead, 0, a.qpn());
    check_send_wc_op(&s[2], 3, WcOpcode::RdmaWrite, 0, a.qpn());
    let r = poll_1(&b.recv_cq, "WRITE_WITH_IMM of nothing");
    check_write_imm_recv(&r, 7, 0, 0x1234_5678, b, a);
    assert!(p.target.to_vec().iter().all(|&x| x == CANARY));
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

/// Checks the receive completion of a WRITE_WITH_IMM on `b` from `a`.
fn check_write_imm_recv(wc: &WorkCompletion, wr_id: u64, len: usize, imm: u32, b: &Side, a: &Side) {
    assert_eq!(wc.wr_id, wr_id, "recv wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "recv status in {wc:?}");
    assert_eq!(
        wc.opcode,
        WcOpcode::RecvRdmaWithImm,
        "recv opcode in {wc:?}"
    );
    assert_eq!(wc.byte_len as usize, len, "recv byte_len in {wc:?}");
    assert!(
        wc.wc_flags.contains(WcFlags::WITH_IMM),
        "WITH_IMM in {wc:?}"
    );
    assert!(
        !wc.wc_flags.intersects(WcFlags::GRH | WcFlags::WITH_INV),
        "GRH / WITH_INV in {wc:?}"
    );
    assert_eq!(wc.imm_data, imm, "imm_data in {wc:?}");
    assert_eq!(wc.qp_num, b.qpn(), "recv qp_num in {wc:?}");
    assert_eq!(wc.src_qp, a.qpn(), "recv src_qp in {wc:?}");
    assert_eq!(wc.vendor_err, 0, "recv vendor_err in {wc:?}");
}

#[test]
fn write_with_imm_consumes_a_receive_and_leaves_its_buffer_alone() {
    let mtu = Mtu::Mtu1024;
    let m = mtu.bytes() as usize;
    let max = 64 * 1024;
    let p = rdma_pair(13, 14, max, mtu);
    let (a, b) = (&p.a, &p.b);
    b.recv_mr.fill(0x77).unwrap();
    for (k, &len) in [0, 1, m - 1, m + 1, 3 * m + 7, max].iter().enumerate() {
        let seq = k as u64 + 1;
        let what = format!("WRITE_WITH_IMM of {len} bytes");
        let msg = pattern(200 + seq, len);
        gather_layout(k, len).write(&a.send_mr, &msg);
        p.target.fill(CANARY).unwrap();
        // Receive buffers of 256 bytes (or none): the data goes to the RDMA target, so its
        // length does not matter.
        let rsges = if k % 2 == 0 {
            vec![b.recv_mr.sge(k * 256, 256).unwrap()]
        } else {
            Vec::new()
        };
        b.post_recv(1000 + seq, rsges);
        let imm = 0xA5A5_0000 | seq as u32;
        let sges = if len == 0 {
            Vec::new()
        } else {
            gather_layout(k, len).sges(&a.send_mr)
        };
        a.post_send(rdma_write_imm_wr(
            seq,
            sges,
            remote_at(&p.target, REMOTE_OFFSET),
            imm,
        ));
        let r = poll_1(&b.recv_cq, &what);
        check_write_imm_recv(&r, 1000 + seq, len, imm, b, a);
        let s = poll_1(&a.send_cq, &what);
        check_send_wc_op(&s, seq, WcOpcode::RdmaWrite, len, a.qpn());
        check_placed(&p.target.to_vec(), REMOTE_OFFSET, &msg, CANARY, &what);
        assert!(
            b.recv_mr.to_vec().iter().all(|&x| x == 0x77),
            "{what}: the receive buffer was written"
        );
    }
}

/// A WRITE_WITH_IMM of `len` bytes reaches b before any receive is posted: RNR NAKs (the
/// sender retries, infinitely with rnr_retry 7), then delivery once a receive is posted.
fn write_with_imm_waits_for_a_receive(na: u8, nb: u8, len: usize) {
    let a_opts = RcConnectOptions {
        rnr_retry: 7,
        ..RcConnectOptions::default()
    };
    // b asks senders to wait 1.28 ms after an RNR NAK.
    let b_opts = RcConnectOptions {
        min_rnr_timer: 14,
        ..RcConnectOptions::default()
    };
    let p = rdma_pair_with(na, nb, len, &a_opts, &b_opts);
    let (a, b) = (&p.a, &p.b);
    let msg = pattern(300, len);
    a.send_mr.write(0, &msg).unwrap();
    p.target.fill(CANARY).unwrap();
    b.recv_mr.fill(0x77).unwrap();
    a.post_send(rdma_write_imm_wr(
        1,
        vec![a.send_mr.sge(0, len as u32).unwrap()],
        remote_at(&p.target, REMOTE_OFFSET),
        0xFEED_F00D,
    ));
    wait_until("two RNR NAKs", || a.counters().rnr_naks_received >= 2);
    assert_cq_empty(&a.send_cq, "no completion while RNR-waiting");
    assert_cq_empty(&b.recv_cq, "no receive yet");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    b.post_recv(5, vec![b.recv_mr.sge(0, 64).unwrap()]);
    check_write_imm_recv(&poll_1(&b.recv_cq, "receive"), 5, len, 0xFEED_F00D, b, a);
    check_send_wc_op(
        &poll_1(&a.send_cq, "send"),
        1,
        WcOpcode::RdmaWrite,
        len,
        a.qpn(),
    );
    assert!(b.counters().rnr_naks_sent >= 2);
    check_placed(
        &p.target.to_vec(),
        REMOTE_OFFSET,
        &msg,
        CANARY,
        "WRITE_WITH_IMM after RNR",
    );
    assert!(b.recv_mr.to_vec().iter().all(|&x| x == 0x77));
}

#[test]
fn write_with_imm_without_a_receive_is_rnr_then_delivered_single_packet() {
    write_with_imm_waits_for_a_receive(15, 16, 100);
}

#[test]
fn write_with_imm_without_a_receive_is_rnr_then_delivered_multi_packet() {
    // 5 packets at MTU 1024: the first four land, the last waits for the receive.
    write_with_imm_waits_for_a_receive(17, 18, 4 * 1024 + 100);
}

#[test]
fn inline_write_copies_the_data_at_post_time() {
    let mut cfg = side_config(4096);
    cfg.cap.max_inline_data = 128;
    let (a, b) = side_pair(&open_udp_device(FILE, 19), &open_udp_device(FILE, 20), &cfg);
    connect_pair(&a, &b, 5, 6, &RcConnectOptions::default());
    let target = register_mr(&b.pd, 4096, remote_all_access());
    target.fill(CANARY).unwrap();
    let msg = pattern(400, 100);
    a.send_mr.write(0, &msg[..30]).unwrap();
    a.send_mr.write(500, &msg[30..]).unwrap();
    let wr = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..rdma_write_wr(
            1,
            vec![
                a.send_mr.sge(0, 30).unwrap(),
                a.send_mr.sge(500, 70).unwrap(),
            ],
            remote_at(&target, 33),
        )
    };
    a.post_send(wr);
    // The buffer is reusable as soon as the post returns.
    a.send_mr.fill(0).unwrap();
    check_send_wc_op(
        &poll_1(&a.send_cq, "inline WRITE"),
        1,
        WcOpcode::RdmaWrite,
        100,
        a.qpn(),
    );
    check_placed(&target.to_vec(), 33, &msg, CANARY, "inline WRITE");
}

#[test]
fn mixed_list_completes_in_order_with_per_op_opcodes() {
    const ROUNDS: usize = 4;
    const SLOT: usize = 8192;
    let p = rdma_pair(21, 22, ROUNDS * 2 * SLOT, Mtu::Mtu1024);
    let (a, b) = (&p.a, &p.b);
    p.target.fill(CANARY).unwrap();
    b.recv_mr.fill(CANARY).unwrap();
    // Remote layout: the atomic counter at 0; round r WRITEs at W(r), WRITE_WITH_IMM at I(r).
    let w_off = |r: usize| 64 + r * 2 * SLOT;
    let i_off = |r: usize| 64 + r * 2 * SLOT + SLOT;
    // Local layout on a: round r's SEND data, WRITE data, READ destination, atomic result,
    // WRITE_WITH_IMM data.
    let l_send = |r: usize| r * 5 * SLOT;
    let l_write = |r: usize| l_send(r) + SLOT;
    let l_read = |r: usize| l_send(r) + 2 * SLOT;
    let l_atomic = |r: usize| l_send(r) + 3 * SLOT;
    let l_imm = |r: usize| l_send(r) + 4 * SLOT;
    let (send_len, write_len, imm_len) = (100usize, 3000usize, 500usize);
    // Room for every round's local buffers.
    let lmr = &register_mr(&a.pd, ROUNDS * 5 * SLOT, remote_all_access());
    lmr.fill(CANARY).unwrap();

    let mut wrs = Vec::new();
    for r in 0..ROUNDS {
        let base = r as u64 * 10;
        lmr.write(l_send(r), &pattern(base, send_len)).unwrap();
        lmr.write(l_write(r), &pattern(base + 1, write_len))
            .unwrap();
        lmr.write(l_imm(r), &pattern(base + 4, imm_len)).unwrap();
        b.post_recv(
            500 + 2 * r as u64,
            vec![b.recv_mr.sge(r * 256, 256).unwrap()],
        );
        b.post_recv(501 + 2 * r as u64, vec![]);
        wrs.push(SendWr::send(
            base,
            vec![lmr.sge(l_send(r), send_len as u32).unwrap()],
        ));
        wrs.push(rdma_write_wr(
            base + 1,
            vec![lmr.sge(l_write(r), write_len as u32).unwrap()],
            remote_at(&p.target, w_off(r)),
        ));
        // Reads back what the WRITE just before it wrote: RC executes them in order.
        wrs.push(rdma_read_wr(
            base + 2,
            vec![lmr.sge(l_read(r), write_len as u32).unwrap()],
            remote_at(&p.target, w_off(r)),
        ));
        wrs.push(fetch_add_wr(
            base + 3,
            lmr.sge(l_atomic(r), 8).unwrap(),
            remote_at(&p.target, 0),
            r as u64 + 1,
        ));
        wrs.push(rdma_write_imm_wr(
            base + 4,
            vec![lmr.sge(l_imm(r), imm_len as u32).unwrap()],
            remote_at(&p.target, i_off(r)),
            0xCAFE_0000 + r as u32,
        ));
    }
    // The counter starts at 0x1_0000_0000.
    write_u64(&p.target, 0, 1 << 32);
    a.qp.post_send(&wrs).expect("post the mixed list");

    let s = poll_n(&a.send_cq, wrs.len(), "mixed list");
    let r = poll_n(&b.recv_cq, 2 * ROUNDS, "receives");
    let mut sum = 0u64;
    for round in 0..ROUNDS {
        let base = round as u64 * 10;
        let wc = &s[round * 5..round * 5 + 5];
        check_send_wc(&wc[0], base, send_len, a.qpn());
        check_send_wc_op(&wc[1], base + 1, WcOpcode::RdmaWrite, write_len, a.qpn());
        check_send_wc_op(&wc[2], base + 2, WcOpcode::RdmaRead, write_len, a.qpn());
        check_send_wc_op(&wc[3], base + 3, WcOpcode::FetchAdd, 8, a.qpn());
        check_send_wc_op(&wc[4], base + 4, WcOpcode::RdmaWrite, imm_len, a.qpn());
        check_recv_wc(
            &r[2 * round],
            500 + 2 * round as u64,
            send_len,
            None,
            b.qpn(),
            a.qpn(),
        );
        check_write_imm_recv(
            &r[2 * round + 1],
            501 + 2 * round as u64,
            imm_len,
            0xCAFE_0000 + round as u32,
            b,
            a,
        );
        let what = format!("round {round}");
        let remote = p.target.to_vec();
        let local = lmr.to_vec();
        assert_bytes_eq(
            &b.recv_mr.to_vec()[round * 256..round * 256 + send_len],
            &pattern(base, send_len),
            &format!("{what}: SEND"),
        );
        assert_bytes_eq(
            &remote[w_off(round)..w_off(round) + write_len],
            &pattern(base + 1, write_len),
            &format!("{what}: WRITE"),
        );
        assert_bytes_eq(
            &local[l_read(round)..l_read(round) + write_len],
            &pattern(base + 1, write_len),
            &format!("{what}: READ after WRITE"),
        );
        assert_eq!(
            read_u64(lmr, l_atomic(round)),
            (1 << 32) + sum,
            "{what}: FETCH_ADD original"
        );
        sum += round as u64 + 1;
        assert_bytes_eq(
            &remote[i_off(round)..i_off(round) + imm_len],
            &pattern(base + 4, imm_len),
            &format!("{what}: WRITE_WITH_IMM"),
        );
    }
    assert_eq!(read_u64(&p.target, 0), (1 << 32) + sum, "final counter");
    assert_cq_empty(&a.send_cq, "a send");
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn unsignaled_writes_then_a_signaled_read_of_the_same_memory() {
    const N: usize = 8;
    let len_of = |i: usize| 500 + 700 * i; // 500 .. 5400 bytes: one to six packets
    let total: usize = (0..N).map(len_of).sum();
    let p = rdma_pair(23, 24, total, Mtu::Mtu1024);
    let (a, b) = (&p.a, &p.b);
    p.target.fill(CANARY).unwrap();
    let local = register_mr(&a.pd, 2 * total, remote_all_access());
    local.fill(CANARY).unwrap();
    let mut wrs = Vec::new();
    let mut at = 0;
    let mut want = Vec::new();
    for i in 0..N {
        let msg = pattern(600 + i as u64, len_of(i));
        local.write(at, &msg).unwrap();
        wrs.push(SendWr {
            send_flags: SendFlags::empty(),
            ..rdma_write_wr(
                i as u64,
                vec![local.sge(at, len_of(i) as u32).unwrap()],
                remote_at(&p.target, REMOTE_OFFSET + at),
            )
        });
        want.extend_from_slice(&msg);
        at += len_of(i);
    }
    // The READ lands in the second half of the local MR, which the WRITEs did not use.
    wrs.push(rdma_read_wr(
        99,
        vec![local.sge(total, total as u32).unwrap()],
        remote_at(&p.target, REMOTE_OFFSET),
    ));
    a.qp.post_send(&wrs).expect("post");
    let wc = poll_1(&a.send_cq, "the READ");
    check_send_wc_op(&wc, 99, WcOpcode::RdmaRead, total, a.qpn());
    assert_bytes_eq(
        &local.to_vec()[total..],
        &want,
        "READ after unsignaled WRITEs",
    );
    check_placed(
        &p.target.to_vec(),
        REMOTE_OFFSET,
        &want,
        CANARY,
        "remote MR",
    );
    assert_cq_empty(&a.send_cq, "only the READ completes");
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn fenced_write_sends_what_the_read_before_it_fetched() {
    let p = rdma_pair(25, 26, 16 * 1024, Mtu::Mtu1024);
    let (a, b) = (&p.a, &p.b);
    let len = 6000;
    let x = pattern(700, len);
    p.target.fill(CANARY).unwrap();
    p.target.write(0, &x).unwrap();
    write_u64(&p.target, 12_000, 0x0102_0304_0506_0708);
    let local = register_mr(&a.pd, 16 * 1024, remote_all_access());
    local.fill(0x11).unwrap();
    let fenced = |wr: SendWr| SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::FENCE,
        ..wr
    };
    let wrs = vec![
        // READ remote [0, len) into local [0, len), then copy it with a fenced WRITE to
        // remote [REMOTE_OFFSET, +len): the WRITE may gather only once the READ is done.
        rdma_read_wr(
            1,
            vec![local.sge(0, len as u32).unwrap()],
            remote_at(&p.target, 0),
        ),
        fenced(rdma_write_wr(
            2,
            vec![local.sge(0, len as u32).unwrap()],
            remote_at(&p.target, REMOTE_OFFSET),
        )),
        // The same with an atomic: its original value, written back by a fenced WRITE.
        fetch_add_wr(
            3,
            local.sge(8192, 8).unwrap(),
            remote_at(&p.target, 12_000),
            1,
        ),
        fenced(rdma_write_wr(
            4,
            vec![local.sge(8192, 8).unwrap()],
            remote_at(&p.target, 12_008),
        )),
    ];
    a.qp.post_send(&wrs).expect("post");
    let s = poll_n(&a.send_cq, 4, "fenced list");
    check_send_wc_op(&s[0], 1, WcOpcode::RdmaRead, len, a.qpn());
    check_send_wc_op(&s[1], 2, WcOpcode::RdmaWrite, len, a.qpn());
    check_send_wc_op(&s[2], 3, WcOpcode::FetchAdd, 8, a.qpn());
    check_send_wc_op(&s[3], 4, WcOpcode::RdmaWrite, 8, a.qpn());
    let remote = p.target.to_vec();
    assert_bytes_eq(
        &remote[REMOTE_OFFSET..REMOTE_OFFSET + len],
        &x,
        "fenced WRITE of the READ's data",
    );
    assert_eq!(read_u64(&p.target, 12_000), 0x0102_0304_0506_0709);
    assert_eq!(
        read_u64(&p.target, 12_008),
        0x0102_0304_0506_0708,
        "fenced WRITE of the atomic's original value"
    );
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn max_rd_atomic_1_with_many_reads_and_atomics_outstanding() {
    // a may have one READ / atomic outstanding, b answers one at a time.
    let a_opts = RcConnectOptions {
        max_rd_atomic: 1,
        ..RcConnectOptions::default()
    };
    let b_opts = RcConnectOptions {
        max_dest_rd_atomic: 1,
        ..RcConnectOptions::default()
    };
    const N: usize = 12;
    const SLOT: usize = 4096;
    let p = rdma_pair_with(27, 28, N * SLOT, &a_opts, &b_opts);
    let (a, b) = (&p.a, &p.b);
    assert_eq!(a.qp.query().unwrap().0.max_rd_atomic, 1);
    let len_of = |i: usize| [1usize, 1024, 4000, 1025][i % 4];
    for i in 0..N {
        p.target
            .write(i * SLOT + 8, &pattern(800 + i as u64, len_of(i)))
            .unwrap();
    }
    write_u64(&p.target, 0, 5);
    let local = register_mr(&a.pd, (N + 1) * SLOT, remote_all_access());
    local.fill(CANARY).unwrap();
    // READs, each followed by a FETCH_ADD and (every third) a WRITE, all in one call.
    let mut wrs = Vec::new();
    for i in 0..N {
        let id = 10 * i as u64;
        wrs.push(rdma_read_wr(
            id,
            vec![local.sge(i * SLOT + 8, len_of(i) as u32).unwrap()],
            remote_at(&p.target, i * SLOT + 8),
        ));
        wrs.push(fetch_add_wr(
            id + 1,
            local.sge(i * SLOT, 8).unwrap(),
            remote_at(&p.target, 0),
            10,
        ));
        if i % 3 == 0 {
            wrs.push(rdma_write_wr(
                id + 2,
                vec![local.sge(i * SLOT + 8, 16).unwrap()],
                remote_at(&p.target, N * SLOT + i),
            ));
        }
    }
    a.qp.post_send(&wrs).expect("post");
    let s = poll_n(&a.send_cq, wrs.len(), "all WRs");
    for (wc, wr) in s.iter().zip(&wrs) {
        let (op, len) = match wr.wr_id % 10 {
            0 => (WcOpcode::RdmaRead, wr.total_length() as usize),
            1 => (WcOpcode::FetchAdd, 8),
            _ => (WcOpcode::RdmaWrite, 16),
        };
        check_send_wc_op(wc, wr.wr_id, op, len, a.qpn());
    }
    let image = local.to_vec();
    for i in 0..N {
        assert_bytes_eq(
            &image[i * SLOT + 8..i * SLOT + 8 + len_of(i)],
            &pattern(800 + i as u64, len_of(i)),
            &format!("READ {i}"),
        );
        assert_eq!(read_u64(&local, i * SLOT), 5 + 10 * i as u64, "atomic {i}");
    }
    assert_eq!(read_u64(&p.target, 0), 5 + 10 * N as u64);
    assert_cq_empty(&b.recv_cq, "b recv");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn post_errors_of_reads_and_atomics() {
    let mut cfg = side_config(4096);
    cfg.cap.max_inline_data = 64;
    let (a, b) = side_pair(&open_udp_device(FILE, 29), &open_udp_device(FILE, 30), &cfg);
    // a may not have any READ / atomic outstanding: it can never issue one.
    let a_opts = RcConnectOptions {
        max_rd_atomic: 0,
        ..RcConnectOptions::default()
    };
    connect_pair_with(&a, &b, 1, 2, &a_opts, &RcConnectOptions::default());
    assert_eq!(a.qp.query().unwrap().0.max_rd_atomic, 0);
    let target = register_mr(&b.pd, 4096, remote_all_access());
    target.fill(CANARY).unwrap();
    let sge = |off: usize, len: u32| a.send_mr.sge(off, len).unwrap();
    a.send_mr.write(0, &pattern(900, 64)).unwrap();

    // READ with IBV_SEND_INLINE (valid only for SEND and WRITE): EINVAL at its index, the
    // WRITE before it is posted.
    let inline_read = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..rdma_read_wr(2, vec![sge(100, 16)], remote_at(&target, 0))
    };
    let err =
        a.qp.post_send(&[
            rdma_write_wr(1, vec![sge(0, 32)], remote_at(&target, 0)),
            inline_read,
        ])
        .unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, 22), "{err}");
    check_send_wc_op(
        &poll_1(&a.send_cq, "WRITE 1"),
        1,
        WcOpcode::RdmaWrite,
        32,
        a.qpn(),
    );

    // READ and both atomics with max_rd_atomic 0: EINVAL at their index.
    let refused = [
        rdma_read_wr(3, vec![sge(100, 16)], remote_at(&target, 0)),
        fetch_add_wr(3, sge(200, 8), remote_at(&target, 64), 1),
        cmp_swap_wr(3, sge(200, 8), remote_at(&target, 64), 0, 1),
    ];
    for wr in refused {
        let op = wr.opcode;
        let err =
            a.qp.post_send(&[
                rdma_write_wr(4, vec![sge(0, 8)], remote_at(&target, 100)),
                wr,
                rdma_write_wr(5, vec![sge(0, 8)], remote_at(&target, 200)),
            ])
            .unwrap_err();
        assert_eq!((err.index, err.error.errno()), (1, 22), "{op:?}: {err}");
        check_send_wc_op(
            &poll_1(&a.send_cq, "WRITE 4"),
            4,
            WcOpcode::RdmaWrite,
            8,
            a.qpn(),
        );
        assert_cq_empty(&a.send_cq, "WR 5 was never posted");
    }
    // WRITEs and SENDs still work on that QP; nothing was flushed.
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    b.post_recv(1, vec![b.recv_mr.sge(0, 64).unwrap()]);
    a.post_send(SendWr::send(6, vec![sge(0, 10)]));
    check_send_wc(&poll_1(&a.send_cq, "SEND 6"), 6, 10, a.qpn());
    check_recv_wc(&poll_1(&b.recv_cq, "recv"), 1, 10, None, b.qpn(), a.qpn());
    let image = target.to_vec();
    assert_bytes_eq(&image[..32], &pattern(900, 32), "WRITE 1");
    assert_bytes_eq(&image[100..108], &pattern(900, 8), "WRITE 4");
    assert!(image[32..100].iter().all(|&x| x == CANARY));
    assert!(image[108..].iter().all(|&x| x == CANARY));
}

/// A device of this file whose link applies `faults` to what it sends.
fn faulty_device(n: u8, faults: &FaultSetting) -> Context {
    register_and_open(DeviceConfig {
        faults: Some(faults.clone()),
        ..DeviceConfig::new(device_name(FILE, n), test_ip(FILE, n))
    })
}

/// READs of 1 MiB at MTU 256 (4096 responses each) from b to a over `ctx_b`'s link, with
/// `opts`; every one must succeed with every byte in place.
fn long_reads(ctx_a: &Context, ctx_b: &Context, opts: &RcConnectOptions, rounds: u64) {
    let (a, b) = side_pair(ctx_a, ctx_b, &side_config(MIB));
    connect_pair(&a, &b, 0xff_f000, 0x10, opts);
    let target = register_mr(&b.pd, MIB, remote_all_access());
    let msg = pattern(4097, MIB);
    target.write(0, &msg).unwrap();
    for round in 0..rounds {
        let what = format!("1 MiB READ at MTU 256, round {round}");
        a.send_mr.fill(CANARY).unwrap();
        a.post_send(rdma_read_wr(
            round,
            vec![a.send_mr.sge(0, MIB as u32).unwrap()],
            remote_at(&target, 0),
        ));
        let wc = a.send_cq.poll_wait(1, WAIT).expect("poll_cq");
        assert_eq!(
            wc.len(),
            1,
            "{what}: no completion within {WAIT:?}; a: {:?}, b: {:?}",
            a.counters(),
            b.counters()
        );
        check_send_wc_op(&wc[0], round, WcOpcode::RdmaRead, MIB, a.qpn());
        assert_bytes_eq(&a.send_mr.to_vec()[..MIB], &msg, &what);
    }
}

#[test]
fn read_of_4096_responses_recovers_lost_responses() {
    // b loses 1% of what it sends: responses beyond the 128th go missing too, and the READ
    // must be asked again from the first missing one.
    let loss = FaultSetting::new(
        FaultConfig {
            loss_per_mille: 10,
            ..FaultConfig::none()
        },
        0x31,
    );
    // About 16 ms: a shorter timeout lets a loaded machine's scheduling stalls start retry
    // storms of whole response streams (seen with 4 ms while other builds ran).
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu256,
        timeout: 12,
        ..RcConnectOptions::default()
    };
    long_reads(
        &open_udp_device(FILE, 31),
        &faulty_device(32, &loss),
        &opts,
        2,
    );
    assert!(loss.counters.snapshot().dropped > 0);
}

#[test]
fn read_streaming_longer_than_the_ack_timeout_completes() {
    // Lossless; the ACK timeout (about 4 ms) is shorter than the whole READ takes, but
    // responses keep arriving, so (as in rxe, whose completer re-arms the retransmit timer
    // whenever it processes a response) no timeout should fire.
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu256,
        timeout: 10,
        ..RcConnectOptions::default()
    };
    long_reads(
        &open_udp_device(FILE, 33),
        &open_udp_device(FILE, 34),
        &opts,
        3,
    );
}

#[test]
fn long_read_does_not_use_up_a_small_retry_count() {
    // About 8 ms, still far shorter than the whole READ takes; 2 ms made a loaded machine's
    // scheduling stalls (no response processed at all) use up the retries.
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu256,
        timeout: 11,
        retry_cnt: 2,
        ..RcConnectOptions::default()
    };
    long_reads(
        &open_udp_device(FILE, 35),
        &open_udp_device(FILE, 36),
        &opts,
        3,
    );
}

#[test]
fn rdma_and_atomics_under_loss_duplication_and_reordering() {
    // Both links lose, duplicate and reorder. Every WR completes once, in order; duplicated
    // atomics are not executed twice; every byte lands where it should.
    let faults = FaultConfig {
        loss_per_mille: 50,
        burst_per_mille: 100,
        burst_max: 3,
        dup_per_mille: 50,
        reorder_per_mille: 30,
        ..FaultConfig::none()
    };
    let fa = FaultSetting::new(faults, 0x3101);
    let fb = FaultSetting::new(faults, 0x3102);
    let (ctx_a, ctx_b) = (faulty_device(37, &fa), faulty_device(38, &fb));
    const N: usize = 60;
    const SLOT: usize = 16 * 1024;
    let (a, b) = side_pair(&ctx_a, &ctx_b, &side_config(N * SLOT));
    let opts = RcConnectOptions {
        timeout: 8, // about 1 ms
        ..RcConnectOptions::default()
    };
    connect_pair(&a, &b, 0xff_fff8, 0x77, &opts);
    // b's target: slot i for WR i; the counter at the end.
    let target = register_mr(&b.pd, (N + 1) * SLOT, remote_all_access());
    target.fill(CANARY).unwrap();
    let counter = N * SLOT;
    write_u64(&target, counter, 1000);
    let local = register_mr(&a.pd, N * SLOT, remote_all_access());
    local.fill(CANARY).unwrap();
    // Each WR moves (i * 1237) % SLOT bytes (up to 16 packets).
    let len_of = |i: usize| (i * 1237) % SLOT;
    let mut wrs = Vec::new();
    let mut recvs = 0;
    let mut expected_target = vec![CANARY; (N + 1) * SLOT];
    for i in 0..N {
        let (l, r) = (i * SLOT, i * SLOT);
        let data = pattern(5000 + i as u64, len_of(i));
        let sge = vec![local.sge(l, len_of(i) as u32).unwrap()];
        let id = i as u64;
        let wr = match i % 5 {
            0 => {
                local.write(l, &data).unwrap();
                expected_target[r..r + data.len()].copy_from_slice(&data);
                rdma_write_wr(id, sge, remote_at(&target, r))
            }
            1 => {
                target.write(r, &data).unwrap();
                expected_target[r..r + data.len()].copy_from_slice(&data);
                rdma_read_wr(id, sge, remote_at(&target, r))
            }
            2 => fetch_add_wr(id, local.sge(l, 8).unwrap(), remote_at(&target, counter), 1),
            3 => cmp_swap_wr(
                id,
                local.sge(l, 8).unwrap(),
                remote_at(&target, counter),
                // Matches: 1000 plus the atomics before it.
                1000 + (i / 5 * 2 + 1) as u64,
                1000 + (i / 5 * 2 + 2) as u64,
            ),
            _ => {
                local.write(l, &data).unwrap();
                expected_target[r..r + data.len()].copy_from_slice(&data);
                b.post_recv(id, vec![]);
                recvs += 1;
                rdma_write_imm_wr(id, sge, remote_at(&target, r), id as u32)
            }
        };
        wrs.push(wr);
    }
    // At most 16 WRs outstanding.
    let mut done = Vec::new();
    for chunk in wrs.chunks(16) {
        a.qp.post_send(chunk).expect("post");
        let got = a.send_cq.poll_wait(chunk.len(), WAIT).expect("poll_cq");
        assert_eq!(
            got.len(),
            chunk.len(),
            "completions within {WAIT:?}: {got:?}; a: {:?}",
            a.counters()
        );
        done.extend(got);
    }
    let r = poll_n(&b.recv_cq, recvs, "WRITE_WITH_IMM receives");
    for (i, wc) in done.iter().enumerate() {
        let (op, len) = match i % 5 {
            0 | 4 => (WcOpcode::RdmaWrite, len_of(i)),
            1 => (WcOpcode::RdmaRead, len_of(i)),
            2 => (WcOpcode::FetchAdd, 8),
            _ => (WcOpcode::CompSwap, 8),
        };
        check_send_wc_op(wc, i as u64, op, len, a.qpn());
    }
    for (k, wc) in r.iter().enumerate() {
        let id = (5 * k + 4) as u64;
        check_write_imm_recv(wc, id, len_of(id as usize), id as u32, &b, &a);
    }
    let local_image = local.to_vec();
    for i in 0..N {
        let l = i * SLOT;
        match i % 5 {
            1 => assert_bytes_eq(
                &local_image[l..l + len_of(i)],
                &pattern(5000 + i as u64, len_of(i)),
                &format!("READ {i}"),
            ),
            2 => assert_eq!(
                read_u64(&local, l),
                1000 + (i / 5 * 2) as u64,
                "FETCH_ADD {i}"
            ),
            3 => assert_eq!(
                read_u64(&local, l),
                1000 + (i / 5 * 2 + 1) as u64,
                "CMP_SWP {i}"
            ),
            _ => {}
        }
    }
    // Every atomic executed exactly once: N / 5 FETCH_ADDs and as many matching swaps.
    let final_count = 1000 + (N / 5 * 2) as u64;
    assert_eq!(read_u64(&target, counter), final_count);
    expected_target[counter..counter + 8].copy_from_slice(&final_count.to_ne_bytes());
    assert_bytes_eq(&target.to_vec(), &expected_target, "b's target MR");
    // Nothing more turns up once late duplicates have had time to arrive.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_cq_empty(&a.send_cq, "a send");
    assert_cq_empty(&b.recv_cq, "b recv");
    let (fa, fb) = (fa.counters.snapshot(), fb.counters.snapshot());
    assert!(fa.dropped > 0 && fb.dropped > 0, "{fa:?} {fb:?}");
    assert!(fa.duplicated > 0 && fb.duplicated > 0, "{fa:?} {fb:?}");
}

#[test]
fn a_responder_only_in_rtr_serves_writes_reads_and_atomics() {
    // The responder side works from RTR on: b never goes to RTS.
    let cfg = side_config(8192);
    let (a, b) = side_pair(&open_udp_device(FILE, 39), &open_udp_device(FILE, 40), &cfg);
    let opts = RcConnectOptions::default();
    let ep_a = a.qp.endpoint(0x100, 1).unwrap();
    a.qp.connect_rc(0x100, &b.qp.endpoint(0x200, 1).unwrap(), &opts)
        .unwrap();
    to_rtr_only(&b, &ep_a, opts.path_mtu, opts.access, 16);
    let target = register_mr(&b.pd, 8192, remote_all_access());
    target.fill(CANARY).unwrap();
    write_u64(&target, 0, 41);
    let msg = pattern(39, 3000);
    a.send_mr.write(0, &msg).unwrap();
    b.post_recv(1, vec![]);
    a.qp.post_send(&[
        rdma_write_wr(
            1,
            vec![a.send_mr.sge(0, 3000).unwrap()],
            remote_at(&target, 100),
        ),
        rdma_read_wr(
            2,
            vec![a.send_mr.sge(4000, 3000).unwrap()],
            remote_at(&target, 100),
        ),
        fetch_add_wr(3, a.send_mr.sge(7000, 8).unwrap(), remote_at(&target, 0), 1),
        rdma_write_imm_wr(
            4,
            vec![a.send_mr.sge(0, 10).unwrap()],
            remote_at(&target, 4000),
            9,
        ),
    ])
    .expect("post");
    let s = poll_n(&a.send_cq, 4, "WRs to an RTR responder");
    check_send_wc_op(&s[0], 1, WcOpcode::RdmaWrite, 3000, a.qpn());
    check_send_wc_op(&s[1], 2, WcOpcode::RdmaRead, 3000, a.qpn());
    check_send_wc_op(&s[2], 3, WcOpcode::FetchAdd, 8, a.qpn());
    check_send_wc_op(&s[3], 4, WcOpcode::RdmaWrite, 10, a.qpn());
    check_write_imm_recv(&poll_1(&b.recv_cq, "recv"), 1, 10, 9, &b, &a);
    assert_bytes_eq(&a.send_mr.to_vec()[4000..7000], &msg, "READ from RTR");
    assert_eq!(read_u64(&a.send_mr, 7000), 41);
    assert_eq!(read_u64(&target, 0), 42);
    assert_eq!(b.qp.state().unwrap(), QpState::Rtr);
}
