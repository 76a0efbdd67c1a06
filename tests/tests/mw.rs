//! Memory windows over UDP between emulated devices: type 1 windows bound with the verb and
//! type 2 windows bound with a BIND_MW work request; remote WRITE / READ / atomics through a
//! window inside its bounds and rights (bytes verified); refusals (REM_ACCESS_ERR at the
//! requester, the target unchanged) outside the window, without the right, after LOCAL_INV,
//! SEND_WITH_INV, unbinding, rebinding and deallocation, and through another QP; SEND_WITH_INV
//! completions (WITH_INV and the rkey); double invalidation; binds the spec forbids
//! (IBV_WC_MW_BIND_ERR, QP in ERR); EBUSY for an MR with a bound window; typed errors of the
//! safe API.
//!
//! b owns the windows, a uses them. File number 40: devices on 127.10.40.n.

use softverbs::{
    next_rkey, AccessFlags, BindMwWr, Mr, Mw, MwBindInfo, MwBindTarget, MwType, Pd, QpState,
    RcConnectOptions, RemoteAddr, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use softverbs_conformance::{
    check_error_wc, check_flushed, check_send_wc, check_send_wc_op, cmp_swap_wr, fetch_add_wr,
    open_udp_device, pattern, poll_1, rc_pair, rdma_read_wr, rdma_write_wr, read_u64, register_mr,
    wait_until, write_u64, Side, SideConfig,
};

const FILE: u8 = 40;
/// Bytes of b's MR under the windows.
const LEN: usize = 8192;
/// Where the usual window starts in it, and its length.
const WIN_OFF: usize = 1024;
const WIN_LEN: usize = 2048;
const CANARY: u8 = 0xEE;

fn connected(na: u8, nb: u8) -> (Side, Side) {
    rc_pair(
        FILE,
        na,
        nb,
        &SideConfig::default(),
        &RcConnectOptions::default(),
    )
}

/// What an MR needs for windows with every right (and no remote rights of its own, so that
/// any access that works went through a window).
fn bindable() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND
}

fn all_rights() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
}

/// b's MR under the windows, filled with CANARY.
fn window_mr(pd: &Pd, access: AccessFlags) -> Mr {
    let mr = register_mr(pd, LEN, access);
    mr.fill(CANARY).unwrap();
    mr
}

fn target(mr: &Mr, offset: usize, len: usize, access: AccessFlags) -> MwBindTarget<'_> {
    MwBindTarget {
        mr,
        offset,
        len,
        access,
    }
}

/// Byte `offset` of `mr` as a peer addresses it through `rkey`.
fn at(mr: &Mr, offset: usize, rkey: u32) -> RemoteAddr {
    RemoteAddr {
        remote_addr: mr.addr() + offset as u64,
        rkey,
    }
}

/// Binds type 2 window `mw` to `t` through b's QP and waits for the bind's completion;
/// returns the window's rkey.
fn bind_type2<'mr>(b: &Side, mw: &Mw<'mr>, t: MwBindTarget<'mr>, wr_id: u64) -> u32 {
    let wr = mw.bind_wr(t, wr_id, SendFlags::SIGNALED).unwrap();
    b.post_send(wr);
    let wc = poll_1(&b.send_cq, "bind");
    check_send_wc_op(&wc, wr_id, WcOpcode::BindMw, 0, b.qpn());
    mw.rkey()
}

/// Binds type 1 window `mw` to `t` (or unbinds it) with the verb through b's QP and waits for
/// the completion; returns the new rkey.
fn bind_type1<'mr>(b: &Side, mw: &Mw<'mr>, t: Option<MwBindTarget<'mr>>, wr_id: u64) -> u32 {
    let before = mw.rkey();
    let rkey = b.qp.bind_mw(mw, t, wr_id, SendFlags::SIGNALED).unwrap();
    assert_eq!(rkey, next_rkey(before), "the verb gives the next rkey");
    assert_eq!(mw.rkey(), rkey);
    let wc = poll_1(&b.send_cq, "bind_mw");
    check_send_wc_op(&wc, wr_id, WcOpcode::BindMw, 0, b.qpn());
    rkey
}

/// a WRITEs `data` to `remote` and waits for the completion.
fn write_from_a(a: &Side, wr_id: u64, data: &[u8], remote: RemoteAddr) -> WorkCompletion {
    a.send_mr.write(0, data).unwrap();
    a.post_send(rdma_write_wr(
        wr_id,
        vec![a.send_mr.sge(0, data.len() as u32).unwrap()],
        remote,
    ));
    poll_1(&a.send_cq, "write")
}

/// a posts `wr` (wr_id 99), which b must refuse: a gets REM_ACCESS_ERR, both QPs end in ERR
/// and no byte of `mr` changes.
fn refused(a: &Side, b: &Side, mr: &Mr, wr: SendWr) {
    assert_eq!(wr.wr_id, 99);
    let before = mr.to_vec();
    a.post_send(wr);
    let wc = poll_1(&a.send_cq, "refused request");
    check_error_wc(&wc, 99, WcStatus::RemAccessErr, a.qpn());
    wait_until("b in ERR", || b.qp.state().unwrap() == QpState::Err);
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert!(mr.to_vec() == before, "the target MR changed");
}

/// A signaled 1-byte WRITE from a (wr_id 99) to `remote`.
fn write_99(a: &Side, remote: RemoteAddr) -> SendWr {
    a.send_mr.write(0, &[0x11; 64]).unwrap();
    rdma_write_wr(99, vec![a.send_mr.sge(0, 1).unwrap()], remote)
}

#[test]
fn type2_window_serves_write_read_and_atomics_inside_its_bounds() {
    let (a, b) = connected(1, 2);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    assert_eq!(mw.mw_type(), MwType::Type2);
    let first = mw.rkey();
    assert_ne!(first, mr.rkey());
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    assert_eq!(rkey, next_rkey(first));

    // The whole window, in two packets, then its last byte alone.
    let msg = pattern(40, WIN_LEN);
    let wc = write_from_a(&a, 2, &msg, at(&mr, WIN_OFF, rkey));
    check_send_wc_op(&wc, 2, WcOpcode::RdmaWrite, WIN_LEN, a.qpn());
    let wc = write_from_a(&a, 3, &[0x5A], at(&mr, WIN_OFF + WIN_LEN - 1, rkey));
    check_send_wc_op(&wc, 3, WcOpcode::RdmaWrite, 1, a.qpn());
    let image = mr.to_vec();
    assert_eq!(image[WIN_OFF..WIN_OFF + WIN_LEN - 1], msg[..WIN_LEN - 1]);
    assert_eq!(image[WIN_OFF + WIN_LEN - 1], 0x5A);
    assert!(image[..WIN_OFF].iter().all(|&x| x == CANARY));
    assert!(image[WIN_OFF + WIN_LEN..].iter().all(|&x| x == CANARY));

    // READ it back.
    a.recv_mr.fill(0).unwrap();
    a.post_send(rdma_read_wr(
        4,
        vec![a.recv_mr.sge(0, WIN_LEN as u32).unwrap()],
        at(&mr, WIN_OFF, rkey),
    ));
    let wc = poll_1(&a.send_cq, "read");
    check_send_wc_op(&wc, 4, WcOpcode::RdmaRead, WIN_LEN, a.qpn());
    assert_eq!(
        a.recv_mr.to_vec()[..WIN_LEN],
        image[WIN_OFF..WIN_OFF + WIN_LEN]
    );

    // Atomics on a word of the window.
    let word = WIN_OFF + 64;
    write_u64(&mr, word, 40);
    a.post_send(fetch_add_wr(
        5,
        a.recv_mr.sge(0, 8).unwrap(),
        at(&mr, word, rkey),
        2,
    ));
    let wc = poll_1(&a.send_cq, "fetch_add");
    check_send_wc_op(&wc, 5, WcOpcode::FetchAdd, 8, a.qpn());
    assert_eq!(read_u64(&a.recv_mr, 0), 40);
    a.post_send(cmp_swap_wr(
        6,
        a.recv_mr.sge(8, 8).unwrap(),
        at(&mr, word, rkey),
        42,
        7,
    ));
    let wc = poll_1(&a.send_cq, "cmp_swap");
    check_send_wc_op(&wc, 6, WcOpcode::CompSwap, 8, a.qpn());
    assert_eq!(read_u64(&a.recv_mr, 8), 42);
    assert_eq!(read_u64(&mr, word), 7);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn type1_window_binds_rebinds_and_unbinds_through_the_verb() {
    let (a, b) = connected(3, 4);
    let mr = window_mr(&b.pd, bindable());
    let idle_qp = b.pd.qp_builder().build(&b.send_cq, &b.recv_cq).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    // A bind the QP refuses to post (not in RTS) uses up no key: the next bind gets the next
    // key after the window's first.
    let e = idle_qp
        .bind_mw(
            &mw,
            Some(target(&mr, 0, 8, AccessFlags::REMOTE_WRITE)),
            9,
            SendFlags::SIGNALED,
        )
        .unwrap_err();
    assert_eq!(e.errno(), 22);
    let rkey = bind_type1(
        &b,
        &mw,
        Some(target(&mr, WIN_OFF, WIN_LEN, AccessFlags::REMOTE_WRITE)),
        1,
    );
    let msg = pattern(41, 1500);
    let wc = write_from_a(&a, 2, &msg, at(&mr, WIN_OFF + 100, rkey));
    check_send_wc_op(&wc, 2, WcOpcode::RdmaWrite, 1500, a.qpn());
    assert_eq!(mr.to_vec()[WIN_OFF + 100..WIN_OFF + 1600], msg[..]);

    // Rebound elsewhere, read-only, with the next key.
    let rkey2 = bind_type1(
        &b,
        &mw,
        Some(target(&mr, 4096, 512, AccessFlags::REMOTE_READ)),
        3,
    );
    assert_ne!(rkey2, rkey);
    mr.write(4096, &pattern(42, 512)).unwrap();
    a.post_send(rdma_read_wr(
        4,
        vec![a.recv_mr.sge(0, 512).unwrap()],
        at(&mr, 4096, rkey2),
    ));
    let wc = poll_1(&a.send_cq, "read");
    check_send_wc_op(&wc, 4, WcOpcode::RdmaRead, 512, a.qpn());
    assert_eq!(a.recv_mr.to_vec()[..512], pattern(42, 512)[..]);

    // A zero-length bind unbinds: the key opens nothing now.
    bind_type1(&b, &mw, None, 5);
    refused(
        &a,
        &b,
        &mr,
        rdma_read_wr(99, vec![a.recv_mr.sge(0, 1).unwrap()], at(&mr, 4096, rkey2)),
    );
}

#[test]
fn one_byte_past_the_window_end_is_refused() {
    let (a, b) = connected(5, 6);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    // The second byte lies outside the window, though inside the MR.
    let mut wr = write_99(&a, at(&mr, WIN_OFF + WIN_LEN - 1, rkey));
    wr.sg_list = vec![a.send_mr.sge(0, 2).unwrap()];
    refused(&a, &b, &mr, wr);
}

#[test]
fn one_byte_before_the_window_start_is_refused() {
    let (a, b) = connected(7, 8);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    refused(
        &a,
        &b,
        &mr,
        rdma_read_wr(
            99,
            vec![a.recv_mr.sge(0, 16).unwrap()],
            at(&mr, WIN_OFF - 1, rkey),
        ),
    );
}

#[test]
fn a_write_through_a_read_only_window_is_refused() {
    let (a, b) = connected(9, 10);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(
        &b,
        &mw,
        target(&mr, WIN_OFF, WIN_LEN, AccessFlags::REMOTE_READ),
        1,
    );
    refused(&a, &b, &mr, write_99(&a, at(&mr, WIN_OFF, rkey)));
}

#[test]
fn an_atomic_through_a_window_without_the_right_is_refused() {
    let (a, b) = connected(11, 12);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let rkey = bind_type1(
        &b,
        &mw,
        Some(target(
            &mr,
            WIN_OFF,
            WIN_LEN,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )),
        1,
    );
    refused(
        &a,
        &b,
        &mr,
        fetch_add_wr(99, a.recv_mr.sge(0, 8).unwrap(), at(&mr, WIN_OFF, rkey), 1),
    );
}

#[test]
fn local_inv_closes_a_type2_window() {
    let (a, b) = connected(13, 14);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    let wc = write_from_a(&a, 2, &[1; 8], at(&mr, WIN_OFF, rkey));
    check_send_wc_op(&wc, 2, WcOpcode::RdmaWrite, 8, a.qpn());
    b.post_send(mw.local_inv_wr(3, SendFlags::SIGNALED));
    let wc = poll_1(&b.send_cq, "local_inv");
    check_send_wc_op(&wc, 3, WcOpcode::LocalInv, 0, b.qpn());
    refused(&a, &b, &mr, write_99(&a, at(&mr, WIN_OFF, rkey)));
}

#[test]
fn send_with_inv_closes_a_type2_window_and_reports_the_rkey() {
    let (a, b) = connected(15, 16);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    b.post_recv(7, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    let msg = pattern(43, 3000);
    a.send_mr.write(0, &msg).unwrap();
    a.post_send(SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: rkey,
        ..SendWr::send(2, vec![a.send_mr.sge(0, 3000).unwrap()])
    });
    let recv = poll_1(&b.recv_cq, "receive with invalidate");
    assert_eq!(recv.wr_id, 7);
    assert_eq!(recv.status, WcStatus::Success, "{recv:?}");
    assert_eq!(recv.opcode, WcOpcode::Recv);
    assert_eq!(recv.byte_len, 3000);
    assert_eq!(recv.wc_flags, WcFlags::WITH_INV);
    assert_eq!(recv.invalidated_rkey, rkey);
    assert_eq!(recv.qp_num, b.qpn());
    assert_eq!(recv.src_qp, a.qpn());
    assert_eq!(b.recv_mr.to_vec()[..3000], msg[..]);
    let wc = poll_1(&a.send_cq, "send with invalidate");
    check_send_wc(&wc, 2, 3000, a.qpn());
    refused(&a, &b, &mr, write_99(&a, at(&mr, WIN_OFF, rkey)));
}

#[test]
fn a_deallocated_window_opens_nothing() {
    let (a, b) = connected(17, 18);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    drop(mw);
    refused(&a, &b, &mr, write_99(&a, at(&mr, WIN_OFF, rkey)));
}

#[test]
fn the_old_rkey_of_a_rebound_type1_window_opens_nothing() {
    let (a, b) = connected(19, 20);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let old = bind_type1(&b, &mw, Some(target(&mr, 0, LEN, all_rights())), 1);
    let new = bind_type1(&b, &mw, Some(target(&mr, 0, LEN, all_rights())), 2);
    assert_eq!(new, next_rkey(old));
    let wc = write_from_a(&a, 3, &[3; 4], at(&mr, 0, new));
    check_send_wc_op(&wc, 3, WcOpcode::RdmaWrite, 4, a.qpn());
    refused(&a, &b, &mr, write_99(&a, at(&mr, 0, old)));
}

#[test]
fn a_type2_window_serves_only_the_qp_it_was_bound_through() {
    let ctx_a = open_udp_device(FILE, 21);
    let ctx_b = open_udp_device(FILE, 22);
    let cfg = SideConfig::default();
    let (a, b) = softverbs_conformance::side_pair(&ctx_a, &ctx_b, &cfg);
    softverbs_conformance::connect_pair(&a, &b, 1, 2, &RcConnectOptions::default());
    // A second connection whose b-side QP is in the window's PD too.
    let a2 = Side::new(&ctx_a, &cfg);
    let send_cq = ctx_b.create_cq(16).unwrap();
    let recv_cq = ctx_b.create_cq(16).unwrap();
    let b2 = Side {
        ctx: ctx_b.clone(),
        pd: b.pd.clone(),
        qp: b.pd.qp_builder().build(&send_cq, &recv_cq).unwrap(),
        send_cq,
        recv_cq,
        send_mr: register_mr(&b.pd, 64, AccessFlags::LOCAL_WRITE),
        recv_mr: register_mr(&b.pd, 64, AccessFlags::LOCAL_WRITE),
    };
    softverbs_conformance::connect_pair(&a2, &b2, 3, 4, &RcConnectOptions::default());
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    // Through the QP it was bound through: fine; through b2 (same PD): refused.
    let wc = write_from_a(&a, 2, &[2; 8], at(&mr, WIN_OFF, rkey));
    check_send_wc_op(&wc, 2, WcOpcode::RdmaWrite, 8, a.qpn());
    refused(&a2, &b2, &mr, write_99(&a2, at(&mr, WIN_OFF, rkey)));
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn local_inv_twice_fails_the_second_time() {
    let (_a, b) = connected(23, 24);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    b.post_send(mw.local_inv_wr(2, SendFlags::SIGNALED));
    b.post_send(mw.local_inv_wr(3, SendFlags::SIGNALED));
    b.post_send(SendWr::send(4, vec![]));
    let wc = poll_1(&b.send_cq, "first local_inv");
    check_send_wc_op(&wc, 2, WcOpcode::LocalInv, 0, b.qpn());
    let wc = poll_1(&b.send_cq, "second local_inv");
    check_error_wc(&wc, 3, WcStatus::LocQpOpErr, b.qpn());
    assert_eq!(wc.opcode, WcOpcode::LocalInv);
    check_flushed(&poll_1(&b.send_cq, "flushed send"), 4, b.qpn());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}

#[test]
fn local_inv_of_a_type1_window_fails() {
    let (_a, b) = connected(25, 26);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    bind_type1(&b, &mw, Some(target(&mr, 0, 64, all_rights())), 1);
    b.post_send(mw.local_inv_wr(2, SendFlags::SIGNALED));
    let wc = poll_1(&b.send_cq, "local_inv");
    check_error_wc(&wc, 2, WcStatus::LocQpOpErr, b.qpn());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}

#[test]
fn send_with_inv_twice_fails_the_second_time() {
    let (a, b) = connected(27, 28);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, WIN_OFF, WIN_LEN, all_rights()), 1);
    b.post_recv(10, vec![b.recv_mr.sge(0, 64).unwrap()]);
    b.post_recv(11, vec![b.recv_mr.sge(0, 64).unwrap()]);
    let inv = |wr_id| SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: rkey,
        ..SendWr::send(wr_id, vec![a.send_mr.sge(0, 16).unwrap()])
    };
    a.post_send(inv(2));
    let recv = poll_1(&b.recv_cq, "first receive");
    assert_eq!(
        (
            recv.wr_id,
            recv.status,
            recv.wc_flags,
            recv.invalidated_rkey
        ),
        (10, WcStatus::Success, WcFlags::WITH_INV, rkey)
    );
    check_send_wc(&poll_1(&a.send_cq, "first send"), 2, 16, a.qpn());
    // The window is free now: the same rkey cannot be invalidated again.
    a.post_send(inv(3));
    let recv = poll_1(&b.recv_cq, "second receive");
    check_error_wc(&recv, 11, WcStatus::RemInvReqErr, b.qpn());
    let wc = poll_1(&a.send_cq, "second send");
    check_error_wc(&wc, 3, WcStatus::RemInvReqErr, a.qpn());
    wait_until("b in ERR", || b.qp.state().unwrap() == QpState::Err);
}

/// Posts the raw BIND_MW `wr` (wr_id 1) on b, followed by a SEND (wr_id 2): the bind fails
/// with IBV_WC_MW_BIND_ERR, the SEND is flushed, b's QP ends in ERR.
fn bind_fails(b: &Side, wr: SendWr) {
    assert_eq!(wr.wr_id, 1);
    b.post_send(wr);
    b.post_send(SendWr::send(2, vec![]));
    let wc = poll_1(&b.send_cq, "bind");
    check_error_wc(&wc, 1, WcStatus::MwBindErr, b.qpn());
    assert_eq!(wc.opcode, WcOpcode::BindMw);
    check_flushed(&poll_1(&b.send_cq, "flushed"), 2, b.qpn());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}

/// A BIND_MW work request built by hand (what the safe API would refuse).
fn raw_bind(mw: &Mw<'_>, mr: &Mr, offset: u64, length: u64, access: AccessFlags) -> SendWr {
    SendWr {
        opcode: WrOpcode::BindMw,
        bind_mw: Some(BindMwWr {
            mw: mw.id(),
            rkey: next_rkey(mw.rkey()),
            bind_info: MwBindInfo {
                mr_lkey: mr.lkey(),
                addr: mr.addr() + offset,
                length,
                mw_access_flags: access,
            },
        }),
        ..SendWr::send(1, vec![])
    }
}

#[test]
fn a_bind_beyond_the_mr_fails() {
    let (_a, b) = connected(29, 30);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    // The safe API refuses it before posting ...
    let e = mw
        .bind_wr(
            target(&mr, LEN - 8, 9, AccessFlags::REMOTE_READ),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap_err();
    assert_eq!(e.errno(), 22);
    // ... and the device refuses it if it comes anyway.
    bind_fails(
        &b,
        raw_bind(&mw, &mr, LEN as u64 - 8, 9, AccessFlags::REMOTE_READ),
    );
    // Nothing was bound: the MR can be deregistered.
    b.ctx.backend().dereg_mr(mr.lkey()).unwrap();
}

#[test]
fn a_bind_to_an_mr_without_mw_bind_access_fails() {
    let (_a, b) = connected(31, 32);
    let mr = window_mr(&b.pd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let wr = mw
        .bind_wr(
            target(&mr, 0, 64, AccessFlags::REMOTE_READ),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap();
    bind_fails(&b, wr);
}

#[test]
fn a_writable_window_needs_local_write_on_the_mr() {
    let (_a, b) = connected(33, 34);
    let mr = window_mr(&b.pd, AccessFlags::MW_BIND);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let rkey =
        b.qp.bind_mw(
            &mw,
            Some(target(&mr, 0, 64, AccessFlags::REMOTE_WRITE)),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(rkey, mw.rkey());
    let wc = poll_1(&b.send_cq, "bind");
    check_error_wc(&wc, 1, WcStatus::MwBindErr, b.qpn());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}

#[test]
fn a_bound_type2_window_cannot_be_bound_again() {
    let (_a, b) = connected(35, 36);
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    bind_type2(&b, &mw, target(&mr, 0, 64, AccessFlags::REMOTE_READ), 0x10);
    let wr = SendWr {
        wr_id: 1,
        ..mw.bind_wr(
            target(&mr, 64, 64, AccessFlags::REMOTE_READ),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap()
    };
    bind_fails(&b, wr);
}

#[test]
fn an_mr_with_a_bound_window_cannot_be_deregistered() {
    let ctx = open_udp_device(FILE, 37);
    let ctx_a = open_udp_device(FILE, 38);
    let cfg = SideConfig::default();
    let (a, b) = softverbs_conformance::side_pair(&ctx_a, &ctx, &cfg);
    softverbs_conformance::connect_pair(&a, &b, 5, 6, &RcConnectOptions::default());
    let backend = b.ctx.backend().clone();

    // Type 2: EBUSY while bound, and the window still works; free once invalidated.
    let mr = window_mr(&b.pd, bindable());
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind_type2(&b, &mw, target(&mr, 0, 64, all_rights()), 1);
    let e = backend.dereg_mr(mr.lkey()).unwrap_err();
    assert_eq!(e.errno(), 16, "{e}");
    let wc = write_from_a(&a, 2, &[6; 8], at(&mr, 0, rkey));
    check_send_wc_op(&wc, 2, WcOpcode::RdmaWrite, 8, a.qpn());
    assert_eq!(mr.to_vec()[..8], [6; 8]);
    b.post_send(mw.local_inv_wr(3, SendFlags::SIGNALED));
    check_send_wc_op(
        &poll_1(&b.send_cq, "local_inv"),
        3,
        WcOpcode::LocalInv,
        0,
        b.qpn(),
    );
    backend.dereg_mr(mr.lkey()).unwrap();

    // Type 1: EBUSY while bound; deallocating the window frees the MR.
    let mr1 = window_mr(&b.pd, bindable());
    let mw1 = b.pd.alloc_mw(MwType::Type1).unwrap();
    bind_type1(&b, &mw1, Some(target(&mr1, 0, 64, all_rights())), 4);
    assert_eq!(backend.dereg_mr(mr1.lkey()).unwrap_err().errno(), 16);
    drop(mw1);
    mr1.into_buffer().unwrap();

    // A PD that holds only a window is busy too.
    let pd2 = ctx.alloc_pd().unwrap();
    let _mw2 = pd2.alloc_mw(MwType::Type1).unwrap();
    assert_eq!(backend.dealloc_pd(pd2.id()).unwrap_err().errno(), 16);

    // Destroying the QP a type 2 window was bound through unbinds it.
    let mr3 = window_mr(&b.pd, bindable());
    let mw3 = b.pd.alloc_mw(MwType::Type2).unwrap();
    bind_type2(&b, &mw3, target(&mr3, 0, 64, all_rights()), 5);
    assert_eq!(backend.dereg_mr(mr3.lkey()).unwrap_err().errno(), 16);
    drop(b.qp);
    backend.dereg_mr(mr3.lkey()).unwrap();
}

#[test]
fn misuse_of_the_window_api_is_a_typed_error() {
    let ctx = open_udp_device(FILE, 39);
    let other_ctx = open_udp_device(FILE, 40);
    let b = Side::new(&ctx, &SideConfig::default());
    let mr = window_mr(&b.pd, bindable());
    // (Declared before the windows: an MR must outlive every window that may point into it.)
    let pd2 = ctx.alloc_pd().unwrap();
    let mr2 = window_mr(&pd2, bindable());
    let type1 = b.pd.alloc_mw(MwType::Type1).unwrap();
    let first = type1.rkey();
    let type2 = b.pd.alloc_mw(MwType::Type2).unwrap();
    let t = |len| Some(target(&mr, 0, len, AccessFlags::REMOTE_READ));
    let flags = SendFlags::SIGNALED;
    let errno = |r: Result<u32, softverbs::VerbsError>| r.unwrap_err().errno();

    // The verb binds type 1 windows only; the work request, type 2 only.
    assert_eq!(errno(b.qp.bind_mw(&type2, t(8), 1, flags)), 22);
    assert_eq!(
        type1
            .bind_wr(target(&mr, 0, 8, AccessFlags::REMOTE_READ), 1, flags)
            .unwrap_err()
            .errno(),
        22
    );
    // Zero-length type 2 bind; a range beyond the MR.
    assert_eq!(
        type2
            .bind_wr(target(&mr, 0, 0, AccessFlags::REMOTE_READ), 1, flags)
            .unwrap_err()
            .errno(),
        22
    );
    assert_eq!(errno(b.qp.bind_mw(&type1, t(LEN + 1), 1, flags)), 22);
    // An MR of another PD: EPERM (as the rxe provider); a QP of another PD: EINVAL.
    let other_pd_target = Some(target(&mr2, 0, 8, AccessFlags::REMOTE_READ));
    assert_eq!(errno(b.qp.bind_mw(&type1, other_pd_target, 1, flags)), 1);
    let cq2 = ctx.create_cq(4).unwrap();
    let qp2 = pd2.qp_builder().build(&cq2, &cq2).unwrap();
    assert_eq!(errno(qp2.bind_mw(&type1, t(8), 1, flags)), 22);
    // A window of another device.
    let foreign = other_ctx
        .alloc_pd()
        .unwrap()
        .alloc_mw(MwType::Type1)
        .unwrap();
    assert_eq!(errno(b.qp.bind_mw(&foreign, t(8), 1, flags)), 22);
    // The QP is not in RTS: the post is refused.
    assert_eq!(errno(b.qp.bind_mw(&type1, t(8), 1, flags)), 22);
    // None of these bound anything: the window keeps its key.
    assert_eq!(type1.rkey(), first);
    // A BIND_MW work request without its bind part.
    let bare = SendWr {
        opcode: WrOpcode::BindMw,
        ..SendWr::send(1, vec![])
    };
    let e = b.qp.post_send(&[bare]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, 22));

    // The backend layer: unknown PD, unknown window, an address without an MR.
    let backend = ctx.backend();
    assert_eq!(
        backend.alloc_mw(0xdead, MwType::Type1).unwrap_err().errno(),
        22
    );
    assert_eq!(backend.dealloc_mw(type2.id() ^ 1).unwrap_err().errno(), 22);
    let bind = softverbs::MwBind {
        wr_id: 1,
        send_flags: flags,
        bind_info: MwBindInfo {
            mr_lkey: 0,
            addr: mr.addr(),
            length: 8,
            mw_access_flags: AccessFlags::REMOTE_READ,
        },
    };
    assert_eq!(
        backend
            .bind_mw(b.qpn(), type1.id(), &bind)
            .unwrap_err()
            .errno(),
        22
    );
}
