//! The test bodies, written once against the softverbs API and run on every backend: each
//! checks real bytes and every completion field both backends define.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use softverbs::{
    AccessFlags, AsyncElement, AsyncEventKind, MwBindTarget, MwType, PortState, QpAttr, QpAttrMask,
    QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, SrqAttr, VerbsError, WcFlags, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use softverbs_conformance::{pattern, read_u64, write_u64};

use crate::bench::{
    ah_to, assert_quiet, connect, pair, poll_1, poll_n, Bench, End, EndConfig, Parts, MR_LEN, QKEY,
    WAIT,
};

/// A case: its name and body (panics on failure).
pub type Case = (&'static str, fn(&Bench));

/// Every case, in run order.
pub const CASES: &[Case] = &[
    ("device_query", device_query),
    ("rc_send_sizes", rc_send_sizes),
    ("rc_send_inline", rc_send_inline),
    ("rc_write_read", rc_write_read),
    ("rc_atomics", rc_atomics),
    ("rc_fence_unsignaled", rc_fence_unsignaled),
    ("rc_remote_access_error", rc_remote_access_error),
    ("typed_errors", typed_errors),
    ("uc_send_write", uc_send_write),
    ("ud_send", ud_send),
    ("srq_shared_by_two_qps", srq_shared_by_two_qps),
    ("mw_type1_and_type2", mw_type1_and_type2),
    ("mw_send_with_inv", mw_send_with_inv),
    ("comp_channel", comp_channel),
    ("qp_query", qp_query),
    ("cq_resize", cq_resize),
];

fn rdma(
    op: WrOpcode,
    wr_id: u64,
    sg: Vec<softverbs::Sge>,
    mr: &softverbs::Mr,
    off: usize,
) -> SendWr {
    SendWr {
        opcode: op,
        remote: RemoteAddr {
            remote_addr: mr.addr() + off as u64,
            rkey: mr.rkey(),
        },
        ..SendWr::send(wr_id, sg)
    }
}

/// How many divergences [`divergence`] has noted (for the summary).
pub static DIVERGENCES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Records a behaviour in which a backend differs from the emulator: allowed only on the
/// hardware backend (the emulator is the reference of these bodies), printed on every run.
fn divergence(bench: &Bench, tag: &str, what: &str) {
    assert_ne!(bench.backend, "emu", "the emulator: {what}");
    DIVERGENCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    println!(
        "[{}] divergence from the emulator [{tag}]: {what}",
        bench.backend
    );
}

fn check_ok(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode, byte_len: usize, what: &str) {
    assert_eq!(wc.wr_id, wr_id, "{what}: wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "{what}: status in {wc:?}");
    assert_eq!(wc.opcode, opcode, "{what}: opcode in {wc:?}");
    assert_eq!(wc.byte_len as usize, byte_len, "{what}: byte_len in {wc:?}");
}

fn device_query(bench: &Bench) {
    let ctx = bench.context(0);
    let dev = ctx.query_device().expect("query_device");
    assert!(dev.phys_port_cnt >= 1, "{dev:?}");
    assert!(
        dev.max_qp > 0 && dev.max_cqe > 0 && dev.max_mr > 0,
        "{dev:?}"
    );
    let port = ctx.query_port(1).expect("query_port");
    assert_eq!(port.state, PortState::Active, "{port:?}");
    assert!(port.link_layer_ethernet, "{port:?}");
    assert!(port.gid_tbl_len >= 2, "{port:?}");
    // A port that does not exist, and a GID index beyond the table: EINVAL both.
    assert_eq!(
        ctx.query_port(9).map(|_| ()).unwrap_err().errno(),
        libc::EINVAL
    );
    let err = ctx.query_gid(1, port.gid_tbl_len).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    let listed = softverbs::devices_for(ctx.provider()).expect("device list");
    let me = listed
        .iter()
        .find(|d| d.name == ctx.name())
        .unwrap_or_else(|| panic!("{} not in {listed:?}", ctx.name()));
    assert_eq!(me.backend, bench.backend);
    assert_eq!(me.guid, dev.node_guid, "listed GUID vs query_device");
}

fn rc_send_sizes(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    for (i, len) in [0usize, 1, 1000, 1024, 1025, 5000, 65536]
        .into_iter()
        .enumerate()
    {
        let msg = pattern(i as u64, len);
        a.mr.write(0, &msg).unwrap();
        b.mr.fill(0xEE).unwrap();
        b.post_recv(100 + i as u64, 0, 70000);
        let imm = (i % 2 == 1).then_some(0x1234_5600 + i as u32);
        let sg = if len == 0 {
            vec![]
        } else {
            vec![a.sge(0, len as u32)]
        };
        a.post_send(match imm {
            Some(imm) => SendWr::send_with_imm(i as u64, sg, imm),
            None => SendWr::send(i as u64, sg),
        });
        let swc = poll_1(&a.scq, "send completion");
        check_ok(&swc, i as u64, WcOpcode::Send, len, "send");
        assert_eq!(swc.qp_num, a.qp.qp_num());
        let rwc = poll_1(&b.rcq, "recv completion");
        check_ok(&rwc, 100 + i as u64, WcOpcode::Recv, len, "recv");
        assert_eq!(rwc.qp_num, b.qp.qp_num());
        assert_eq!(
            rwc.wc_flags.contains(WcFlags::WITH_IMM),
            imm.is_some(),
            "{rwc:?}"
        );
        if let Some(imm) = imm {
            assert_eq!(rwc.imm_data, imm, "{rwc:?}");
        }
        assert_eq!(b.bytes(0, len), msg, "received bytes of {len}");
        assert!(
            b.bytes(len, 16).iter().all(|&x| x == 0xEE),
            "bytes past {len} written"
        );
    }
}

fn rc_send_inline(bench: &Bench) {
    let mut cfg = EndConfig::new(QpType::Rc);
    cfg.cap.max_inline_data = 64;
    let (a, b) = pair(bench, &cfg);
    assert!(a.qp.cap().max_inline_data >= 64, "granted {:?}", a.qp.cap());
    let msg = pattern(7, 48);
    a.mr.write(0, &msg).unwrap();
    b.post_recv(1, 0, 4096);
    let wr = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..SendWr::send(1, vec![a.sge(0, 48)])
    };
    a.post_send(wr);
    // Inline data was copied at post time: overwriting the source now changes nothing.
    a.mr.write(0, &[0u8; 48]).unwrap();
    check_ok(
        &poll_1(&a.scq, "inline send"),
        1,
        WcOpcode::Send,
        48,
        "inline send",
    );
    check_ok(
        &poll_1(&b.rcq, "inline recv"),
        1,
        WcOpcode::Recv,
        48,
        "inline recv",
    );
    assert_eq!(b.bytes(0, 48), msg);
}

fn rc_write_read(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    b.mr.fill(0xEE).unwrap();
    // WRITE of 3000 bytes from two SGEs to offset 4099 of b.
    let msg = pattern(1, 3000);
    a.mr.write(0, &msg[..1000]).unwrap();
    a.mr.write(8192, &msg[1000..]).unwrap();
    a.post_send(rdma(
        WrOpcode::RdmaWrite,
        1,
        vec![a.sge(0, 1000), a.sge(8192, 2000)],
        &b.mr,
        4099,
    ));
    check_ok(
        &poll_1(&a.scq, "write"),
        1,
        WcOpcode::RdmaWrite,
        3000,
        "write",
    );
    assert_eq!(b.bytes(4099, 3000), msg);
    assert_eq!(b.bytes(4096, 3), vec![0xEE; 3]);
    assert_eq!(b.bytes(7099, 5), vec![0xEE; 5]);
    assert_quiet(
        &b.rcq,
        Duration::from_millis(50),
        "a WRITE consumes no receive",
    );
    // WRITE_WITH_IMM consumes a receive, which reports the length and the immediate.
    b.post_recv(9, 100_000, 16);
    let msg2 = pattern(2, 700);
    a.mr.write(20_000, &msg2).unwrap();
    let mut w = rdma(
        WrOpcode::RdmaWriteWithImm,
        2,
        vec![a.sge(20_000, 700)],
        &b.mr,
        30_000,
    );
    w.imm_data = 0xdead_beef;
    a.post_send(w);
    check_ok(
        &poll_1(&a.scq, "write imm"),
        2,
        WcOpcode::RdmaWrite,
        700,
        "write imm",
    );
    let rwc = poll_1(&b.rcq, "write imm recv");
    check_ok(&rwc, 9, WcOpcode::RecvRdmaWithImm, 700, "write imm recv");
    assert!(rwc.wc_flags.contains(WcFlags::WITH_IMM), "{rwc:?}");
    assert_eq!(rwc.imm_data, 0xdead_beef);
    assert_eq!(b.bytes(30_000, 700), msg2);
    // READ of 5000 bytes from b into two SGEs of a.
    let src = pattern(3, 5000);
    b.mr.write(50_000, &src).unwrap();
    a.mr.fill(0).unwrap();
    a.post_send(rdma(
        WrOpcode::RdmaRead,
        3,
        vec![a.sge(60_000, 1), a.sge(70_000, 4999)],
        &b.mr,
        50_000,
    ));
    check_ok(&poll_1(&a.scq, "read"), 3, WcOpcode::RdmaRead, 5000, "read");
    assert_eq!(a.bytes(60_000, 1), src[..1]);
    assert_eq!(a.bytes(70_000, 4999), src[1..]);
    assert_eq!(a.bytes(60_001, 8), vec![0; 8]);
}

fn rc_atomics(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    write_u64(&b.mr, 4096, 100);
    let atomic = |op, wr_id, local: usize, cmp_add: u64, swap: u64| SendWr {
        compare_add: cmp_add,
        swap,
        ..rdma(op, wr_id, vec![a.sge(local, 8)], &b.mr, 4096)
    };
    a.post_send(atomic(WrOpcode::AtomicFetchAndAdd, 1, 0, 5, 0));
    check_ok(
        &poll_1(&a.scq, "fetch_add"),
        1,
        WcOpcode::FetchAdd,
        8,
        "fetch_add",
    );
    assert_eq!(read_u64(&a.mr, 0), 100);
    assert_eq!(read_u64(&b.mr, 4096), 105);
    a.post_send(atomic(WrOpcode::AtomicCmpAndSwp, 2, 8, 105, 7));
    check_ok(
        &poll_1(&a.scq, "cmp_swp hit"),
        2,
        WcOpcode::CompSwap,
        8,
        "cmp_swp",
    );
    assert_eq!(read_u64(&a.mr, 8), 105);
    assert_eq!(read_u64(&b.mr, 4096), 7);
    a.post_send(atomic(WrOpcode::AtomicCmpAndSwp, 3, 16, 1, 9));
    check_ok(
        &poll_1(&a.scq, "cmp_swp miss"),
        3,
        WcOpcode::CompSwap,
        8,
        "cmp_swp",
    );
    assert_eq!(read_u64(&a.mr, 16), 7, "a miss returns the current value");
    assert_eq!(read_u64(&b.mr, 4096), 7, "a miss changes nothing");
    // 64-bit wrap-around.
    write_u64(&b.mr, 4104, u64::MAX);
    let mut w = atomic(WrOpcode::AtomicFetchAndAdd, 4, 24, 2, 0);
    w.remote.remote_addr += 8;
    a.post_send(w);
    check_ok(
        &poll_1(&a.scq, "fetch_add wrap"),
        4,
        WcOpcode::FetchAdd,
        8,
        "wrap",
    );
    assert_eq!(read_u64(&a.mr, 24), u64::MAX);
    assert_eq!(read_u64(&b.mr, 4104), 1);
}

fn rc_fence_unsignaled(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    let msg = pattern(4, 2048);
    a.mr.write(0, &msg).unwrap();
    // An unsignaled WRITE, then a fenced, signaled READ of what it wrote: one completion,
    // and the READ sees the WRITE's bytes.
    let mut w = rdma(WrOpcode::RdmaWrite, 1, vec![a.sge(0, 2048)], &b.mr, 0);
    w.send_flags = SendFlags::empty();
    let mut r = rdma(WrOpcode::RdmaRead, 2, vec![a.sge(10_000, 2048)], &b.mr, 0);
    r.send_flags = SendFlags::SIGNALED | SendFlags::FENCE;
    a.qp.post_send(&[w, r]).expect("post list");
    check_ok(
        &poll_1(&a.scq, "fenced read"),
        2,
        WcOpcode::RdmaRead,
        2048,
        "read",
    );
    assert_quiet(&a.scq, Duration::from_millis(50), "the unsignaled WRITE");
    assert_eq!(a.bytes(10_000, 2048), msg);
    // A solicited SEND: the receiver sees an ordinary receive.
    b.post_recv(5, 0, 64);
    let s = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        ..SendWr::send(3, vec![a.sge(0, 64)])
    };
    a.post_send(s);
    check_ok(
        &poll_1(&a.scq, "solicited"),
        3,
        WcOpcode::Send,
        64,
        "solicited",
    );
    check_ok(
        &poll_1(&b.rcq, "solicited recv"),
        5,
        WcOpcode::Recv,
        64,
        "recv",
    );
}

fn rc_remote_access_error(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    // An MR of b without remote rights: a WRITE to it is refused, its bytes stay.
    let local_only =
        b.pd.register(
            softverbs_conformance::buffer(4096),
            AccessFlags::LOCAL_WRITE,
        )
        .expect("register");
    local_only.fill(0x5A).unwrap();
    a.mr.write(0, &pattern(9, 512)).unwrap();
    a.post_send(rdma(
        WrOpcode::RdmaWrite,
        1,
        vec![a.sge(0, 512)],
        &local_only,
        0,
    ));
    let wc = poll_1(&a.scq, "refused write");
    assert_eq!(wc.wr_id, 1);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    assert_eq!(
        local_only.to_vec(),
        vec![0x5A; 4096],
        "refused WRITE changed memory"
    );
    let (attr, _) = a.qp.query().expect("query_qp");
    assert_eq!(attr.qp_state, QpState::Err, "the requester's QP is in ERR");
    // The emulator reports the violation on the responder's QP as an async event; kernel
    // rxe 6.1 does not (a divergence, reported rather than asserted away).
    let ev = b
        .ctx
        .async_events()
        .unwrap()
        .get(Some(Duration::from_secs(2)));
    let ev = ev.expect("get event").map(|e| (e.kind, e.element));
    let want = Some((AsyncEventKind::QpAccessErr, AsyncElement::Qp(b.qp.qp_num())));
    if ev != want {
        let state = b.qp.state().expect("query_qp");
        divergence(
            bench,
            "qp-access-event",
            &format!("no QP_ACCESS_ERR async event for the responder (got {ev:?}; its QP is in {state:?})"),
        );
    }
    // Later WRs are flushed.
    a.post_send(SendWr::send(2, vec![a.sge(0, 8)]));
    let wc = poll_1(&a.scq, "flushed");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr), "{wc:?}");
}

fn typed_errors(bench: &Bench) {
    let ctx = bench.context(0);
    let pd = ctx.alloc_pd().unwrap();
    // REMOTE_WRITE without LOCAL_WRITE: EINVAL.
    let err = pd
        .register(
            softverbs_conformance::buffer(4096),
            AccessFlags::REMOTE_WRITE,
        )
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err:?}");
    // RESET -> RTS skips states: EINVAL.
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.qp_builder().build(&cq, &cq).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    let err = qp.modify(&rts, QpAttrMask::STATE).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    drop(qp);
    // A WR list whose second WR has more SGEs than the QP allows: the first is posted and
    // completes, the second is reported by index with EINVAL.
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    b.post_recv(1, 0, 64);
    let good = SendWr::send(1, vec![a.sge(0, 8)]);
    let bad = SendWr::send(2, (0..5).map(|i| a.sge(i * 8, 8)).collect());
    let err = a.qp.post_send(&[good, bad]).unwrap_err();
    assert_eq!(err.index, 1, "{err}");
    assert_eq!(err.error.errno(), libc::EINVAL, "{err}");
    check_ok(
        &poll_1(&a.scq, "first WR"),
        1,
        WcOpcode::Send,
        8,
        "first WR",
    );
    let rerr =
        a.qp.post_recv(&[
            RecvWr {
                wr_id: 3,
                sg_list: vec![a.sge(0, 8)],
            },
            RecvWr {
                wr_id: 4,
                sg_list: (0..5).map(|i| a.sge(i * 8, 8)).collect(),
            },
        ])
        .unwrap_err();
    assert_eq!(
        (rerr.index, rerr.error.errno()),
        (1, libc::EINVAL),
        "{rerr}"
    );
    // Destroying a CQ that a QP uses: EBUSY (through the backend layer, which the safe
    // handles never let happen).
    let err = a.ctx.backend().destroy_cq(a.scq.id()).unwrap_err();
    assert_eq!(err.errno(), libc::EBUSY, "{err}");
}

fn uc_send_write(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Uc));
    let msg = pattern(11, 3000);
    a.mr.write(0, &msg).unwrap();
    b.post_recv(1, 0, 4096);
    a.post_send(SendWr::send_with_imm(1, vec![a.sge(0, 3000)], 77));
    check_ok(
        &poll_1(&a.scq, "uc send"),
        1,
        WcOpcode::Send,
        3000,
        "uc send",
    );
    let rwc = poll_1(&b.rcq, "uc recv");
    check_ok(&rwc, 1, WcOpcode::Recv, 3000, "uc recv");
    assert_eq!(rwc.imm_data, 77);
    assert_eq!(b.bytes(0, 3000), msg);
    b.post_recv(2, 0, 16);
    let mut w = rdma(
        WrOpcode::RdmaWriteWithImm,
        2,
        vec![a.sge(0, 2500)],
        &b.mr,
        10_000,
    );
    w.imm_data = 78;
    a.post_send(w);
    check_ok(
        &poll_1(&a.scq, "uc write"),
        2,
        WcOpcode::RdmaWrite,
        2500,
        "uc write",
    );
    let rwc = poll_1(&b.rcq, "uc write imm");
    check_ok(&rwc, 2, WcOpcode::RecvRdmaWithImm, 2500, "uc write imm");
    assert_eq!(rwc.imm_data, 78);
    assert_eq!(b.bytes(10_000, 2500), msg[..2500]);
}

fn ud_send(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Ud));
    let ah = ah_to(&a, &b);
    let msg = pattern(12, 900);
    a.mr.write(0, &msg).unwrap();
    b.mr.fill(0xEE).unwrap();
    b.post_recv(1, 0, 40 + 1024);
    let wr = SendWr {
        ud: Some(ah.dest(b.qp.qp_num(), QKEY)),
        ..SendWr::send_with_imm(1, vec![a.sge(0, 900)], 0x0102_0304)
    };
    a.post_send(wr);
    check_ok(
        &poll_1(&a.scq, "ud send"),
        1,
        WcOpcode::Send,
        900,
        "ud send",
    );
    let rwc = poll_1(&b.rcq, "ud recv");
    check_ok(&rwc, 1, WcOpcode::Recv, 940, "ud recv (GRH + payload)");
    assert!(
        rwc.wc_flags.contains(WcFlags::GRH | WcFlags::WITH_IMM),
        "{rwc:?}"
    );
    assert_eq!(rwc.imm_data, 0x0102_0304);
    assert_eq!(rwc.src_qp, a.qp.qp_num(), "{rwc:?}");
    assert_eq!(b.bytes(40, 900), msg);
    // The GRH area names the sender: an AH made from it reaches a.
    let back =
        b.pd.create_ah_from_wc(&rwc, &b.bytes(0, 40))
            .expect("AH from wc");
    assert_eq!(back.attr().dgid, a.gid());
    // A wrong Q_Key is dropped silently at the receiver.
    b.post_recv(2, 0, 1064);
    let wrong = SendWr {
        ud: Some(ah.dest(b.qp.qp_num(), QKEY ^ 1)),
        ..SendWr::send(2, vec![a.sge(0, 16)])
    };
    a.post_send(wrong);
    check_ok(
        &poll_1(&a.scq, "wrong qkey send"),
        2,
        WcOpcode::Send,
        16,
        "send",
    );
    assert_quiet(&b.rcq, Duration::from_millis(300), "a wrong Q_Key");
}

fn srq_shared_by_two_qps(bench: &Bench) {
    let cfg = EndConfig::new(QpType::Rc);
    let bctx = bench.context(1);
    let bpd = bctx.alloc_pd().unwrap();
    let (srq, granted) = bpd
        .create_srq(&SrqAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 0,
        })
        .expect("create_srq");
    assert!(granted.max_wr >= 16, "{granted:?}");
    let shared_cq = bctx.create_cq(64).unwrap();
    let parts = Parts {
        pd: Some(&bpd),
        rcq: Some(&shared_cq),
        srq: Some(&srq),
    };
    let b1 = End::build(&bctx, &cfg, &parts);
    let b2 = End::build(&bctx, &cfg, &parts);
    let a1 = End::new(bench, 0, &cfg);
    let a2 = End::new(bench, 0, &cfg);
    connect(&a1, &b1, QpType::Rc);
    connect(&a2, &b2, QpType::Rc);
    // Receives posted to a QP with an SRQ: refused.
    let err = b1
        .qp
        .post_recv(&[RecvWr {
            wr_id: 0,
            sg_list: vec![],
        }])
        .unwrap_err();
    assert_eq!(err.error.errno(), libc::EINVAL, "{err}");
    let wrs: Vec<RecvWr> = (0..6)
        .map(|i| RecvWr {
            wr_id: 10 + i,
            sg_list: vec![b1.sge(i as usize * 1024, 1024)],
        })
        .collect();
    srq.post_recv(&wrs).expect("post_srq_recv");
    let events = bctx.async_events().expect("async events");
    srq.arm_limit(4).expect("arm limit");
    let mut want = Vec::new();
    for (k, end) in [&a1, &a2, &a1].into_iter().enumerate() {
        let msg = pattern(20 + k as u64, 100 + k);
        end.mr.write(0, &msg).unwrap();
        end.post_send(SendWr::send(k as u64, vec![end.sge(0, msg.len() as u32)]));
        check_ok(
            &poll_1(&end.scq, "srq send"),
            k as u64,
            WcOpcode::Send,
            msg.len(),
            "send",
        );
        want.push(msg);
    }
    let wcs = poll_n(&shared_cq, 3, "srq receives");
    // One SRQ, consumed in order: WR 10, 11, 12 whatever the QP.
    for (k, wc) in wcs.iter().enumerate() {
        check_ok(wc, 10 + k as u64, WcOpcode::Recv, want[k].len(), "srq recv");
        let qp = if k == 1 { &b2 } else { &b1 };
        assert_eq!(wc.qp_num, qp.qp.qp_num(), "{wc:?}");
        assert_eq!(b1.bytes(k * 1024, want[k].len()), want[k]);
    }
    // 3 of 6 left, below the limit 4: one SRQ_LIMIT_REACHED, and the limit disarms.
    let ev = events
        .get(Some(WAIT))
        .expect("get event")
        .expect("SRQ limit event");
    assert_eq!(ev.kind, AsyncEventKind::SrqLimitReached, "{ev:?}");
    assert_eq!(ev.element, AsyncElement::Srq(srq.id()), "{ev:?}");
    assert_eq!(srq.query().unwrap().srq_limit, 0);
}

fn mw_type1_and_type2(bench: &Bench) {
    let mut cfg = EndConfig::new(QpType::Rc);
    cfg.mr_access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    let (a, b) = pair(bench, &cfg);
    b.mr.fill(0xEE).unwrap();
    let rights = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // Type 2: bound by a WR on b's QP, used by a over that QP.
    let mw2 = b.pd.alloc_mw(MwType::Type2).expect("alloc_mw type 2");
    let t2 = MwBindTarget {
        mr: &b.mr,
        offset: 4096,
        len: 2048,
        access: rights,
    };
    b.post_send(mw2.bind_wr(t2, 1, SendFlags::SIGNALED).expect("bind_wr"));
    check_ok(
        &poll_1(&b.scq, "bind type 2"),
        1,
        WcOpcode::BindMw,
        0,
        "bind type 2",
    );
    let msg = pattern(30, 1000);
    a.mr.write(0, &msg).unwrap();
    let through = |wr_id, op, len: u32, rkey: u32, off: u64| SendWr {
        opcode: op,
        remote: RemoteAddr {
            remote_addr: b.mr.addr() + off,
            rkey,
        },
        ..SendWr::send(wr_id, vec![a.sge(0, len)])
    };
    a.post_send(through(
        2,
        WrOpcode::RdmaWrite,
        1000,
        mw2.rkey(),
        4096 + 100,
    ));
    check_ok(
        &poll_1(&a.scq, "write via mw2"),
        2,
        WcOpcode::RdmaWrite,
        1000,
        "write",
    );
    assert_eq!(b.bytes(4196, 1000), msg);
    // Type 1: bound with the verb; a READ through it.
    let mw1 = b.pd.alloc_mw(MwType::Type1).expect("alloc_mw type 1");
    let t1 = MwBindTarget {
        mr: &b.mr,
        offset: 8192,
        len: 512,
        access: AccessFlags::REMOTE_READ,
    };
    let rkey1 =
        b.qp.bind_mw(&mw1, Some(t1), 3, SendFlags::SIGNALED)
            .expect("bind_mw");
    check_ok(
        &poll_1(&b.scq, "bind type 1"),
        3,
        WcOpcode::BindMw,
        0,
        "bind type 1",
    );
    b.mr.write(8192, &pattern(31, 512)).unwrap();
    let mut r = through(4, WrOpcode::RdmaRead, 512, rkey1, 8192);
    r.sg_list = vec![a.sge(20_000, 512)];
    a.post_send(r);
    check_ok(
        &poll_1(&a.scq, "read via mw1"),
        4,
        WcOpcode::RdmaRead,
        512,
        "read",
    );
    assert_eq!(a.bytes(20_000, 512), pattern(31, 512));
    // LOCAL_INV of the type 2 window: a WRITE through it is refused, memory unchanged.
    b.post_send(mw2.local_inv_wr(5, SendFlags::SIGNALED));
    check_ok(
        &poll_1(&b.scq, "local inv"),
        5,
        WcOpcode::LocalInv,
        0,
        "local inv",
    );
    a.post_send(through(6, WrOpcode::RdmaWrite, 8, mw2.rkey(), 4096));
    let wc = poll_1(&a.scq, "write after invalidate");
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(b.bytes(4096, 100), vec![0xEE; 100]);
    assert_eq!(MR_LEN, b.mr.len());
}

fn mw_send_with_inv(bench: &Bench) {
    let mut cfg = EndConfig::new(QpType::Rc);
    cfg.mr_access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    let (a, b) = pair(bench, &cfg);
    let mw = b.pd.alloc_mw(MwType::Type2).expect("alloc_mw type 2");
    let t = MwBindTarget {
        mr: &b.mr,
        offset: 0,
        len: 4096,
        access: AccessFlags::REMOTE_WRITE,
    };
    b.post_send(mw.bind_wr(t, 1, SendFlags::SIGNALED).expect("bind_wr"));
    check_ok(&poll_1(&b.scq, "bind"), 1, WcOpcode::BindMw, 0, "bind");
    let rkey = mw.rkey();
    b.post_recv(2, 8192, 64);
    a.post_send(SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: rkey,
        ..SendWr::send(3, vec![a.sge(0, 16)])
    });
    check_ok(
        &poll_1(&a.scq, "send with inv"),
        3,
        WcOpcode::Send,
        16,
        "send with inv",
    );
    let rwc = poll_1(&b.rcq, "recv with inv");
    check_ok(&rwc, 2, WcOpcode::Recv, 16, "recv with inv");
    if rwc.wc_flags.contains(WcFlags::WITH_INV) {
        assert_eq!(rwc.invalidated_rkey, rkey, "{rwc:?}");
    } else {
        // Kernel rxe 6.1 writes the kernel's IB_WC_WITH_INVALIDATE bit (1 << 2, which is
        // IBV_WC_IP_CSUM_OK in verbs.h) into user completions, so verbs sees no WITH_INV.
        divergence(
            bench,
            "with-inv-flag",
            &format!(
                "the receive of a SEND_WITH_INV has flags {:?}, not WITH_INV",
                rwc.wc_flags
            ),
        );
    }
    // The window is invalid now: a WRITE through it is refused.
    a.post_send(SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: RemoteAddr {
            remote_addr: b.mr.addr(),
            rkey,
        },
        ..SendWr::send(4, vec![a.sge(0, 8)])
    });
    let wc = poll_1(&a.scq, "write after remote invalidate");
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemAccessErr), "{wc:?}");
}

fn comp_channel(bench: &Bench) {
    let cfg = EndConfig::new(QpType::Rc);
    let (a, b) = pair(bench, &cfg);
    let ch = b.ctx.create_comp_channel().expect("channel");
    let cq = b
        .ctx
        .create_cq_with_channel(16, &ch)
        .expect("cq on channel");
    let end = End::build(
        &b.ctx,
        &cfg,
        &Parts {
            rcq: Some(&cq),
            ..Parts::default()
        },
    );
    let a2 = End::build(&a.ctx, &cfg, &Parts::default());
    connect(&a2, &end, QpType::Rc);
    // Nothing pending: no event, and the descriptor is not readable.
    assert!(ch.get_event(Some(Duration::ZERO)).unwrap().is_none());
    cq.req_notify(false).expect("arm");
    end.post_recv(1, 0, 64);
    a2.post_send(SendWr::send(1, vec![a2.sge(0, 64)]));
    let mut fds = [PollFd::new(ch.as_fd(), PollFlags::POLLIN)];
    let n = poll(
        &mut fds,
        PollTimeout::try_from(WAIT).expect("WAIT fits poll(2)"),
    )
    .expect("poll");
    assert_eq!(n, 1, "channel descriptor readable after a completion");
    let got = ch
        .get_event(Some(WAIT))
        .expect("get_event")
        .expect("an event");
    assert_eq!(got.id(), cq.id());
    check_ok(&poll_1(&cq, "after event"), 1, WcOpcode::Recv, 64, "recv");
    got.ack_events(1).expect("ack");
    // Solicited-only arming: a plain SEND raises no event, a solicited one does.
    cq.req_notify(true).expect("arm solicited");
    end.post_recv(2, 0, 64);
    end.post_recv(3, 0, 64);
    a2.post_send(SendWr::send(2, vec![a2.sge(0, 8)]));
    check_ok(&poll_1(&cq, "plain"), 2, WcOpcode::Recv, 8, "plain");
    assert!(
        ch.get_event(Some(Duration::from_millis(200)))
            .unwrap()
            .is_none(),
        "event for an unsolicited SEND"
    );
    let s = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        ..SendWr::send(3, vec![a2.sge(0, 8)])
    };
    a2.post_send(s);
    let got = ch
        .get_event(Some(WAIT))
        .expect("get_event")
        .expect("solicited event");
    check_ok(&poll_1(&cq, "solicited"), 3, WcOpcode::Recv, 8, "solicited");
    got.ack_events(1).expect("ack");
    poll_n(&a2.scq, 3, "sends");
    drop((a, b));
}

fn qp_query(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    let (attr, init) = a.qp.query().expect("query_qp");
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.dest_qp_num, b.qp.qp_num());
    assert_eq!(attr.path_mtu, softverbs::Mtu::Mtu1024);
    assert_eq!(attr.sq_psn, 0x12_3456);
    assert_eq!(attr.rq_psn, 0xff_fff0);
    assert_eq!(attr.ah_attr.dgid, b.gid());
    assert!(attr
        .qp_access_flags
        .contains(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ));
    assert_eq!(init.qp_type, QpType::Rc);
    assert_eq!(init.send_cq, a.scq.id());
    assert!(init.cap.max_send_wr >= 64);
}

/// `ibv_resize_cq`: completions queued stay and arrive in order after a grow; a size of 0 is
/// EINVAL (both backends; hardware may grant more than asked).
fn cq_resize(bench: &Bench) {
    let (a, b) = pair(bench, &EndConfig::new(QpType::Rc));
    for i in 0..3 {
        b.post_recv(i, 0, 64);
    }
    let sends: Vec<SendWr> = (0..3).map(|i| SendWr::send(i, vec![a.sge(0, 8)])).collect();
    a.qp.post_send(&sends).expect("post_send");
    poll_n(&a.scq, 3, "sends");
    let err = b.rcq.resize(0).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    let granted = b.rcq.resize(500).expect("resize_cq");
    assert!(granted >= 500 && b.rcq.capacity() == granted, "{granted}");
    let ids: Vec<u64> = poll_n(&b.rcq, 3, "receives queued before the resize")
        .iter()
        .map(|wc| wc.wr_id)
        .collect();
    assert_eq!(ids, [0, 1, 2]);
}
