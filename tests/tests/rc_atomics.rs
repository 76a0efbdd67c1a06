//! RC atomics end to end over UDP between emulated devices: CMP_AND_SWP that matches and that
//! does not, FETCH_AND_ADD wrapping around 2^64, the original value in the local 8-byte buffer
//! in host byte order, neighbouring bytes untouched; post-time checks of the local buffer; and
//! FETCH_AND_ADDs from several QPs on their own threads on one remote word: exactly once
//! each.
//!
//! File number 31: devices on 127.10.31.n.

use std::collections::BTreeSet;

use softverbs::{
    AccessFlags, Context, Mr, QpState, RcConnectOptions, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use softverbs_conformance::{
    assert_cq_empty, check_send_wc_op, cmp_swap_wr, fetch_add_wr, open_udp_device, poll_1, poll_n,
    rc_pair, read_u64, register_mr, remote_all_access, remote_at, write_u64, Side, SideConfig,
    WAIT,
};

const FILE: u8 = 31;
const CANARY: u8 = 0xEE;

/// A connected pair with an atomic target MR of `len` bytes on b, filled with CANARY, and a
/// local MR of 4 KiB on a for the original values, filled with CANARY too.
fn atomic_pair(na: u8, nb: u8, len: usize, opts: &RcConnectOptions) -> (Side, Side, Mr, Mr) {
    let (a, b) = rc_pair(FILE, na, nb, &SideConfig::default(), opts);
    let target = register_mr(&b.pd, len, remote_all_access());
    target.fill(CANARY).unwrap();
    let local = register_mr(&a.pd, 4096, AccessFlags::LOCAL_WRITE);
    local.fill(CANARY).unwrap();
    (a, b, target, local)
}

/// Checks that only the 8 bytes at `word` of `mr` differ from CANARY.
fn only_word_changed(mr: &Mr, word: usize, what: &str) {
    let image = mr.to_vec();
    let outside = image
        .iter()
        .enumerate()
        .find(|&(i, &x)| !(word..word + 8).contains(&i) && x != CANARY);
    assert!(
        outside.is_none(),
        "{what}: byte {:?} outside the word was written",
        outside
    );
}

#[test]
fn compare_and_swap_swaps_only_on_a_match() {
    let (a, b, target, local) = atomic_pair(1, 2, 4096, &RcConnectOptions::default());
    // The word at offset 1032 of the MR; original values land at odd local offsets (the
    // local buffer needs no alignment).
    let word = 1032;
    let v0 = 0x1122_3344_5566_7788u64;
    let v1 = 0x8877_6655_4433_2211u64;
    let v2 = 0xDEAD_BEEF_0000_0001u64;
    write_u64(&target, word, v0);
    let wrs = vec![
        // Matches: swaps in v1, returns v0.
        cmp_swap_wr(
            1,
            local.sge(3, 8).unwrap(),
            remote_at(&target, word),
            v0,
            v1,
        ),
        // Does not match (compares against v0 again): no swap, returns v1.
        cmp_swap_wr(
            2,
            local.sge(17, 8).unwrap(),
            remote_at(&target, word),
            v0,
            v2,
        ),
        // Off by one bit: still no match.
        cmp_swap_wr(
            3,
            local.sge(33, 8).unwrap(),
            remote_at(&target, word),
            v1 ^ 1,
            v2,
        ),
        // Matches v1: swaps in v2, returns v1.
        cmp_swap_wr(
            4,
            local.sge(49, 8).unwrap(),
            remote_at(&target, word),
            v1,
            v2,
        ),
    ];
    a.qp.post_send(&wrs).expect("post");
    let s = poll_n(&a.send_cq, 4, "CMP_AND_SWPs");
    for (i, wc) in s.iter().enumerate() {
        check_send_wc_op(wc, i as u64 + 1, WcOpcode::CompSwap, 8, a.qpn());
    }
    // The original value, in host byte order, at each WR's local buffer.
    assert_eq!(read_u64(&local, 3), v0, "swap 1 original");
    assert_eq!(read_u64(&local, 17), v1, "swap 2 original (no match)");
    assert_eq!(read_u64(&local, 33), v1, "swap 3 original (no match)");
    assert_eq!(read_u64(&local, 49), v1, "swap 4 original");
    assert_eq!(read_u64(&target, word), v2, "final value");
    only_word_changed(&target, word, "remote MR");
    // Only the 4 x 8 result bytes changed locally.
    let image = local.to_vec();
    for (i, &x) in image.iter().enumerate() {
        let in_result = [3, 17, 33, 49].iter().any(|&o| (o..o + 8).contains(&i));
        assert!(in_result || x == CANARY, "local byte {i} was written");
    }
    assert_cq_empty(&b.recv_cq, "atomics complete nothing at the target");
}

#[test]
fn fetch_and_add_wraps_around() {
    let (a, b, target, local) = atomic_pair(3, 4, 64, &RcConnectOptions::default());
    // The last word of a 64-byte MR.
    let word = 56;
    write_u64(&target, word, u64::MAX - 1);
    let adds = [3u64, 0, u64::MAX, 1 << 63, 1 << 63];
    let wrs: Vec<SendWr> = adds
        .iter()
        .enumerate()
        .map(|(i, &add)| {
            fetch_add_wr(
                i as u64,
                local.sge(8 * i, 8).unwrap(),
                remote_at(&target, word),
                add,
            )
        })
        .collect();
    a.qp.post_send(&wrs).expect("post");
    let s = poll_n(&a.send_cq, adds.len(), "FETCH_AND_ADDs");
    let mut value = u64::MAX - 1;
    for (i, wc) in s.iter().enumerate() {
        check_send_wc_op(wc, i as u64, WcOpcode::FetchAdd, 8, a.qpn());
        assert_eq!(read_u64(&local, 8 * i), value, "original of add {i}");
        value = value.wrapping_add(adds[i]);
    }
    // MAX-1 +3 = 1, +0 = 1, +MAX = 0, +2^63 +2^63 = 0.
    assert_eq!(value, 0);
    assert_eq!(read_u64(&target, word), value);
    only_word_changed(&target, word, "remote MR");
    assert_cq_empty(&b.recv_cq, "b recv");
}

#[test]
fn atomics_on_the_first_and_last_words_of_a_region() {
    let (a, _b, target, local) = atomic_pair(5, 6, 4096, &RcConnectOptions::default());
    write_u64(&target, 0, 10);
    write_u64(&target, 4088, 20);
    a.qp.post_send(&[
        fetch_add_wr(1, local.sge(0, 8).unwrap(), remote_at(&target, 0), 5),
        cmp_swap_wr(
            2,
            local.sge(8, 8).unwrap(),
            remote_at(&target, 4088),
            20,
            21,
        ),
    ])
    .expect("post");
    let s = poll_n(&a.send_cq, 2, "atomics");
    check_send_wc_op(&s[0], 1, WcOpcode::FetchAdd, 8, a.qpn());
    check_send_wc_op(&s[1], 2, WcOpcode::CompSwap, 8, a.qpn());
    assert_eq!((read_u64(&local, 0), read_u64(&local, 8)), (10, 20));
    assert_eq!((read_u64(&target, 0), read_u64(&target, 4088)), (15, 21));
    let image = target.to_vec();
    assert!(image[8..4088].iter().all(|&x| x == CANARY));
}

#[test]
fn an_atomic_needs_an_8_byte_local_buffer() {
    let (a, _b, target, local) = atomic_pair(7, 8, 64, &RcConnectOptions::default());
    write_u64(&target, 0, 100);
    let good = |id: u64| fetch_add_wr(id, local.sge(0, 8).unwrap(), remote_at(&target, 0), 1);
    let with_sges = |wr: SendWr, sges| SendWr {
        sg_list: sges,
        ..wr
    };
    let bad: Vec<(&str, SendWr)> = vec![
        (
            "4-byte FETCH_AND_ADD",
            with_sges(good(9), vec![local.sge(0, 4).unwrap()]),
        ),
        (
            "16-byte FETCH_AND_ADD",
            with_sges(good(9), vec![local.sge(0, 16).unwrap()]),
        ),
        ("FETCH_AND_ADD without a buffer", with_sges(good(9), vec![])),
        (
            "4-byte CMP_AND_SWP",
            cmp_swap_wr(9, local.sge(0, 4).unwrap(), remote_at(&target, 0), 0, 1),
        ),
        (
            "9-byte CMP_AND_SWP",
            cmp_swap_wr(9, local.sge(0, 9).unwrap(), remote_at(&target, 0), 0, 1),
        ),
    ];
    let mut expect = 100;
    for (k, (what, wr)) in bad.into_iter().enumerate() {
        let id = 10 * k as u64;
        // A good atomic before the bad one is posted; the one after it is not.
        let err = a.qp.post_send(&[good(id), wr, good(id + 2)]).unwrap_err();
        assert_eq!((err.index, err.error.errno()), (1, 22), "{what}: {err}");
        let wc = poll_1(&a.send_cq, what);
        check_send_wc_op(&wc, id, WcOpcode::FetchAdd, 8, a.qpn());
        assert_eq!(read_u64(&local, 0), expect, "{what}");
        expect += 1;
        assert_cq_empty(&a.send_cq, what);
    }
    assert_eq!(read_u64(&target, 0), expect, "one add per good WR");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn many_atomics_with_max_rd_atomic_1_complete_in_order() {
    let opts = RcConnectOptions {
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..RcConnectOptions::default()
    };
    let (a, _b, target, local) = atomic_pair(9, 10, 64, &opts);
    write_u64(&target, 8, 0);
    const N: usize = 48; // all posted at once, issued one at a time
    let wrs: Vec<SendWr> = (0..N)
        .map(|i| {
            if i % 2 == 0 {
                fetch_add_wr(
                    i as u64,
                    local.sge(8 * i, 8).unwrap(),
                    remote_at(&target, 8),
                    1,
                )
            } else {
                // Always matches: the value is i after i operations.
                cmp_swap_wr(
                    i as u64,
                    local.sge(8 * i, 8).unwrap(),
                    remote_at(&target, 8),
                    i as u64,
                    i as u64 + 1,
                )
            }
        })
        .collect();
    a.qp.post_send(&wrs).expect("post");
    let s = poll_n(&a.send_cq, N, "atomics");
    for (i, wc) in s.iter().enumerate() {
        let op = if i % 2 == 0 {
            WcOpcode::FetchAdd
        } else {
            WcOpcode::CompSwap
        };
        check_send_wc_op(wc, i as u64, op, 8, a.qpn());
        assert_eq!(read_u64(&local, 8 * i), i as u64, "original of atomic {i}");
    }
    assert_eq!(read_u64(&target, 8), N as u64);
}

/// Runs `ops` FETCH_AND_ADD(1)s on `qp`'s remote word, at most `window` outstanding; returns
/// the original values in completion order (which must be posting order).
fn fetch_adds(
    qp: &softverbs::Qp,
    cq: &softverbs::Cq,
    local: &Mr,
    remote: softverbs::RemoteAddr,
    ops: usize,
    window: usize,
) -> Vec<u64> {
    let mut posted = 0;
    let mut done = 0;
    let mut wcs = [WorkCompletion::default(); 32];
    while done < ops {
        while posted < ops && posted - done < window {
            let wr = fetch_add_wr(posted as u64, local.sge(8 * posted, 8).unwrap(), remote, 1);
            qp.post_send(&[wr])
                .unwrap_or_else(|e| panic!("post {posted}: {e}"));
            posted += 1;
        }
        let first = cq.poll_wait(1, WAIT).expect("poll_cq");
        assert_eq!(first.len(), 1, "no completion within {WAIT:?} after {done}");
        let more = cq.poll(&mut wcs).expect("poll_cq");
        for wc in first.iter().chain(&wcs[..more]) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.opcode, WcOpcode::FetchAdd, "{wc:?}");
            assert_eq!(wc.wr_id, done as u64, "completions in order: {wc:?}");
            done += 1;
        }
    }
    (0..ops)
        .map(|i| softverbs_conformance::read_u64(local, 8 * i))
        .collect()
}

#[test]
fn concurrent_fetch_adds_from_four_qps_on_one_word_are_exact() {
    const PAIRS: usize = 4;
    const OPS: usize = 500;
    const WINDOW: usize = 16;
    // b holds the counter; two initiator devices with two QPs each.
    let ctx_b = open_udp_device(FILE, 11);
    let initiators: Vec<Context> = (12..14).map(|n| open_udp_device(FILE, n)).collect();
    let pd_b = ctx_b.alloc_pd().unwrap();
    let cq_b = ctx_b.create_cq(16).unwrap();
    let counter = register_mr(&pd_b, 64, remote_all_access());
    counter.fill(CANARY).unwrap();
    let word = 24;
    write_u64(&counter, word, 0);
    let opts = RcConnectOptions::default();
    struct Initiator {
        qp: softverbs::Qp,
        cq: softverbs::Cq,
        local: Mr,
    }
    let mut inits = Vec::new();
    let mut responders = Vec::new();
    for i in 0..PAIRS {
        let ctx = &initiators[i % initiators.len()];
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd.qp_builder().build(&cq, &cq).unwrap();
        let qp_b = pd_b.qp_builder().build(&cq_b, &cq_b).unwrap();
        let psn = 0x10_0000 * i as u32 + 7;
        let ep_a = qp.endpoint(psn, 1).unwrap();
        let ep_b = qp_b.endpoint(psn + 3, 1).unwrap();
        qp.connect_rc(psn, &ep_b, &opts).unwrap();
        qp_b.connect_rc(psn + 3, &ep_a, &opts).unwrap();
        let local = register_mr(&pd, OPS * 8, AccessFlags::LOCAL_WRITE);
        inits.push(Initiator { qp, cq, local });
        responders.push(qp_b);
    }
    let remote = remote_at(&counter, word);
    let results: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = inits
            .iter()
            .map(|init| {
                s.spawn(move || fetch_adds(&init.qp, &init.cq, &init.local, remote, OPS, WINDOW))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("initiator thread"))
            .collect()
    });
    assert_eq!(
        read_u64(&counter, word),
        (PAIRS * OPS) as u64,
        "final count"
    );
    only_word_changed(&counter, word, "counter MR");
    let mut seen = BTreeSet::new();
    for (i, originals) in results.iter().enumerate() {
        // One QP's atomics execute in its order: its originals only grow.
        assert!(
            originals.windows(2).all(|w| w[0] < w[1]),
            "QP {i}: originals not increasing: {originals:?}"
        );
        for &v in originals {
            assert!(seen.insert(v), "original {v} returned twice");
        }
    }
    let expected: BTreeSet<u64> = (0..(PAIRS * OPS) as u64).collect();
    assert_eq!(seen, expected, "every value from 0 exactly once");
    for init in &inits {
        assert_cq_empty(&init.cq, "initiator CQ");
        assert_eq!(init.qp.state().unwrap(), QpState::Rts);
    }
    assert_cq_empty(&cq_b, "responder CQ");
    drop(responders);
}
