//! RC RDMA and atomic requests the responder must refuse, over UDP between emulated devices:
//! a bad rkey, one byte out of bounds (at either end of the region), an MR or a QP lacking
//! the access, a misaligned atomic; and local errors of READ / atomic destinations. The
//! sender's WR completes with the status the IB spec / rxe name, every WR behind it is flushed
//! in order, both QPs end in ERR (only the sender for a local error), and no byte of the
//! target memory changes (no partial write).
//!
//! File number 32: devices on 127.10.32.n.

use softverbs::{
    AccessFlags, Mr, QpState, RcConnectOptions, RemoteAddr, SendFlags, SendWr, Sge, WcStatus,
};
use softverbs_conformance::{
    assert_cq_empty, check_error_wc, check_flushed, check_recv_wc, check_send_wc, cmp_swap_wr,
    connect_pair_with, fetch_add_wr, open_udp_device, pattern, poll_1, poll_n, rdma_read_wr,
    rdma_write_imm_wr, rdma_write_wr, register_mr, remote_all_access, remote_at, side_pair,
    wait_until, Side, SideConfig,
};

const FILE: u8 = 32;
const CANARY: u8 = 0xEE;
/// What a's READ / atomic destinations hold before the test.
const LOCAL_CANARY: u8 = 0x3C;
/// Bytes of b's target MR.
const TARGET_LEN: usize = 8192;
/// Where in a's local MR the bad WR's READ / atomic destination is.
const DEST: usize = 16 * 1024;

/// What a test case has to build its bad WR with.
struct Setup {
    a: Side,
    b: Side,
    /// On b, with every remote access; filled with CANARY.
    target: Mr,
    /// On a (LOCAL_WRITE): data of the WRITEs at 0, destinations from `DEST` on (filled with
    /// LOCAL_CANARY).
    local: Mr,
}

impl Setup {
    fn sge(&self, offset: usize, len: u32) -> Sge {
        self.local.sge(offset, len).unwrap()
    }
}

/// Where the error is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detected {
    /// By b's responder (a NAK): both QPs go to ERR.
    Remote,
    /// By a before anything is sent: only a goes to ERR.
    Local,
}

/// Posts [SEND, `bad`, unsignaled WRITE, SEND, READ] on a, b having two receives posted, and
/// checks: the first SEND succeeds; `bad` completes with `status`; the three behind it are
/// flushed in order; a (and for a remote error b, whose second receive is flushed) ends in
/// ERR; the target MR, every MR of `extra` and a's destinations are byte-identical to before.
///
/// `bad` builds the failing WR (wr_id 11) and returns the MRs it made (filled with CANARY by
/// then), which are kept alive and checked.
fn refused(
    na: u8,
    nb: u8,
    b_access: AccessFlags,
    where_: Detected,
    status: WcStatus,
    bad: impl FnOnce(&Setup) -> (SendWr, Vec<Mr>),
) {
    let opts_b = RcConnectOptions {
        access: b_access,
        ..RcConnectOptions::default()
    };
    let cfg = SideConfig::default();
    let (a, b) = side_pair(&open_udp_device(FILE, na), &open_udp_device(FILE, nb), &cfg);
    connect_pair_with(
        &a,
        &b,
        0x7f_fff0,
        0x12,
        &RcConnectOptions::default(),
        &opts_b,
    );
    let target = register_mr(&b.pd, TARGET_LEN, remote_all_access());
    target.fill(CANARY).unwrap();
    let local = register_mr(&a.pd, 2 * DEST, AccessFlags::LOCAL_WRITE);
    local.write(0, &pattern(1, DEST)).unwrap();
    local.write(DEST, &vec![LOCAL_CANARY; DEST]).unwrap();
    let setup = Setup {
        a,
        b,
        target,
        local,
    };
    let (bad_wr, extra) = bad(&setup);
    assert_eq!(bad_wr.wr_id, 11);
    let Setup {
        a,
        b,
        target,
        local,
    } = &setup;
    let extra_before: Vec<Vec<u8>> = extra.iter().map(Mr::to_vec).collect();
    b.post_recv(1, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    b.post_recv(2, vec![b.recv_mr.sge(0, 4096).unwrap()]);

    // A SEND first (it works whatever the QP's remote access), so that the bad WR is not at
    // the front of the queue when posted.
    let good = SendWr::send(10, vec![local.sge(0, 100).unwrap()]);
    let behind_write = SendWr {
        send_flags: SendFlags::empty(),
        ..rdma_write_wr(
            12,
            vec![local.sge(0, 3000).unwrap()],
            remote_at(target, 1000),
        )
    };
    let behind_send = SendWr::send(13, vec![local.sge(0, 50).unwrap()]);
    let behind_read = rdma_read_wr(
        14,
        vec![local.sge(DEST + 8192, 500).unwrap()],
        remote_at(target, 0),
    );
    a.qp.post_send(&[good, bad_wr, behind_write, behind_send, behind_read])
        .expect("errors of a valid-looking WR show only when it is executed");

    let s = poll_n(&a.send_cq, 5, "sender completions");
    check_send_wc(&s[0], 10, 100, a.qpn());
    check_error_wc(&s[1], 11, status, a.qpn());
    assert_eq!(s[1].vendor_err, 0, "{:?}", s[1]);
    check_flushed(&s[2], 12, a.qpn());
    check_flushed(&s[3], 13, a.qpn());
    check_flushed(&s[4], 14, a.qpn());
    assert_cq_empty(&a.send_cq, "a send");
    assert_eq!(a.qp.state().unwrap(), QpState::Err);

    // b received the good SEND, and nothing else.
    check_recv_wc(
        &poll_1(&b.recv_cq, "the good SEND"),
        1,
        100,
        None,
        b.qpn(),
        a.qpn(),
    );
    match where_ {
        Detected::Remote => {
            wait_until("b in ERR", || b.qp.state().unwrap() == QpState::Err);
            // Its other receive is flushed: the SEND behind the bad WR never arrived.
            check_flushed(&poll_1(&b.recv_cq, "b's receive 2"), 2, b.qpn());
        }
        Detected::Local => {
            // b never saw the bad WR, nor anything behind it.
            assert_eq!(b.qp.state().unwrap(), QpState::Rts);
        }
    }
    assert_cq_empty(&b.recv_cq, "b recv");
    assert_cq_empty(&b.send_cq, "b send");

    // The target is byte-identical: neither the bad WR nor the WRITE behind it landed.
    if let Some(at) = target.to_vec().iter().position(|&x| x != CANARY) {
        panic!("target byte {at} was written");
    }
    for (i, (mr, before)) in extra.iter().zip(&extra_before).enumerate() {
        assert!(mr.to_vec() == *before, "extra MR {i} changed");
    }
    // a's destinations (of the bad WR and the READ behind) are untouched.
    if let Some(at) = local.to_vec()[DEST..]
        .iter()
        .position(|&x| x != LOCAL_CANARY)
    {
        panic!("local destination byte {} was written", DEST + at);
    }
}

/// `r` with its rkey changed to one that names no MR.
fn bad_key(r: RemoteAddr) -> RemoteAddr {
    RemoteAddr {
        rkey: r.rkey ^ 0x5a5a_0000,
        ..r
    }
}

/// An MR on b of `len` bytes with `access`, filled with CANARY.
fn extra_mr(s: &Setup, len: usize, access: AccessFlags) -> Mr {
    let mr = register_mr(&s.b.pd, len, access);
    mr.fill(CANARY).unwrap();
    mr
}

/// The remote address `len` bytes before the end of `mr`, moved `by` bytes further.
fn near_end(mr: &Mr, len: usize, by: i64) -> RemoteAddr {
    RemoteAddr {
        remote_addr: (mr.addr() + (mr.len() - len) as u64).wrapping_add_signed(by),
        rkey: mr.rkey(),
    }
}

/// One byte before the start of `mr`.
fn before_start(mr: &Mr) -> RemoteAddr {
    RemoteAddr {
        remote_addr: mr.addr() - 1,
        rkey: mr.rkey(),
    }
}

fn all() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
}

// ---- RDMA WRITE ----

#[test]
fn write_with_a_bad_rkey_is_rem_access_err() {
    refused(1, 2, all(), Detected::Remote, WcStatus::RemAccessErr, |s| {
        let wr = rdma_write_wr(11, vec![s.sge(0, 100)], bad_key(remote_at(&s.target, 200)));
        (wr, vec![])
    });
}

#[test]
fn write_one_byte_past_the_end_is_rem_access_err() {
    refused(3, 4, all(), Detected::Remote, WcStatus::RemAccessErr, |s| {
        let wr = rdma_write_wr(11, vec![s.sge(0, 100)], near_end(&s.target, 100, 1));
        (wr, vec![])
    });
}

#[test]
fn multi_packet_write_one_byte_past_the_end_writes_nothing() {
    // 3 packets at MTU 1024; only the last byte of the last one is outside: the whole WRITE
    // is refused at its first packet.
    refused(5, 6, all(), Detected::Remote, WcStatus::RemAccessErr, |s| {
        let wr = rdma_write_wr(11, vec![s.sge(0, 3000)], near_end(&s.target, 3000, 1));
        (wr, vec![])
    });
}

#[test]
fn write_one_byte_before_the_start_is_rem_access_err() {
    refused(7, 8, all(), Detected::Remote, WcStatus::RemAccessErr, |s| {
        let wr = rdma_write_wr(11, vec![s.sge(0, 100)], before_start(&s.target));
        (wr, vec![])
    });
}

#[test]
fn write_to_an_mr_without_remote_write_is_rem_access_err() {
    refused(
        9,
        10,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let ro = extra_mr(s, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
            let wr = rdma_write_wr(11, vec![s.sge(0, 100)], remote_at(&ro, 0));
            (wr, vec![ro])
        },
    );
}

#[test]
fn write_to_a_qp_without_remote_write_is_rem_inv_req_err() {
    refused(
        11,
        12,
        AccessFlags::REMOTE_READ,
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            let wr = rdma_write_wr(11, vec![s.sge(0, 100)], remote_at(&s.target, 200));
            (wr, vec![])
        },
    );
}

#[test]
fn write_to_an_mr_of_another_pd_is_rem_access_err() {
    refused(
        13,
        14,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            // A region b registered in a PD that is not its QP's.
            let other_pd = s.b.ctx.alloc_pd().unwrap();
            let foreign = register_mr(&other_pd, 4096, remote_all_access());
            foreign.fill(CANARY).unwrap();
            let wr = rdma_write_wr(11, vec![s.sge(0, 100)], remote_at(&foreign, 0));
            (wr, vec![foreign])
        },
    );
}

#[test]
fn write_with_the_rkey_of_a_deregistered_mr_is_rem_access_err() {
    refused(
        15,
        16,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            // The same memory registered again: the old rkey must not reach it.
            let old = register_mr(&s.b.pd, 4096, remote_all_access());
            let stale = remote_at(&old, 0);
            let again =
                s.b.pd
                    .register(old.into_buffer().unwrap(), remote_all_access())
                    .unwrap();
            assert_eq!(again.addr(), stale.remote_addr);
            assert_ne!(again.rkey(), stale.rkey);
            again.fill(CANARY).unwrap();
            let wr = rdma_write_wr(11, vec![s.sge(0, 100)], stale);
            (wr, vec![again])
        },
    );
}

#[test]
fn write_with_imm_with_a_bad_rkey_is_rem_access_err_and_completes_no_receive() {
    // b's second receive is there for it, but is flushed, not completed.
    refused(
        17,
        18,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_write_imm_wr(
                11,
                vec![s.sge(0, 100)],
                bad_key(remote_at(&s.target, 0)),
                0x1234,
            );
            (wr, vec![])
        },
    );
}

#[test]
fn write_with_imm_to_a_qp_without_remote_write_is_rem_inv_req_err() {
    refused(
        19,
        20,
        AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            let wr = rdma_write_imm_wr(11, vec![s.sge(0, 3000)], remote_at(&s.target, 0), 7);
            (wr, vec![])
        },
    );
}

#[test]
fn read_of_an_mr_of_another_pd_is_rem_access_err() {
    refused(
        33,
        34,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let other_pd = s.b.ctx.alloc_pd().unwrap();
            let foreign = register_mr(&other_pd, 4096, remote_all_access());
            foreign.fill(CANARY).unwrap();
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 100)], remote_at(&foreign, 0));
            (wr, vec![foreign])
        },
    );
}

// ---- RDMA READ ----

#[test]
fn read_with_a_bad_rkey_is_rem_access_err() {
    refused(
        21,
        22,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_read_wr(
                11,
                vec![s.sge(DEST, 100)],
                bad_key(remote_at(&s.target, 200)),
            );
            (wr, vec![])
        },
    );
}

#[test]
fn read_one_byte_past_the_end_is_rem_access_err() {
    refused(
        23,
        24,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 100)], near_end(&s.target, 100, 1));
            (wr, vec![])
        },
    );
}

#[test]
fn multi_packet_read_one_byte_past_the_end_reads_nothing() {
    refused(
        25,
        26,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_read_wr(
                11,
                vec![s.sge(DEST, 2000), s.sge(DEST + 4096, 2000)],
                near_end(&s.target, 4000, 1),
            );
            (wr, vec![])
        },
    );
}

#[test]
fn read_one_byte_before_the_start_is_rem_access_err() {
    refused(
        27,
        28,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 100)], before_start(&s.target));
            (wr, vec![])
        },
    );
}

#[test]
fn read_of_an_mr_without_remote_read_is_rem_access_err() {
    refused(
        29,
        30,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wo = extra_mr(
                s,
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            );
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 100)], remote_at(&wo, 0));
            (wr, vec![wo])
        },
    );
}

#[test]
fn read_from_a_qp_without_remote_read_is_rem_inv_req_err() {
    refused(
        31,
        32,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 100)], remote_at(&s.target, 0));
            (wr, vec![])
        },
    );
}

// ---- atomics ----

#[test]
fn atomic_with_a_bad_rkey_is_rem_access_err() {
    refused(
        41,
        42,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = fetch_add_wr(11, s.sge(DEST, 8), bad_key(remote_at(&s.target, 8)), 1);
            (wr, vec![])
        },
    );
}

#[test]
fn atomic_one_byte_past_the_end_is_rem_access_err() {
    refused(
        43,
        44,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            // A 15-byte region: the aligned word at 8 needs byte 15, one past its end.
            let short = extra_mr(s, 15, remote_all_access());
            let wr = cmp_swap_wr(
                11,
                s.sge(DEST, 8),
                remote_at(&short, 8),
                u64::from_ne_bytes([CANARY; 8]),
                1,
            );
            (wr, vec![short])
        },
    );
}

#[test]
fn atomic_before_the_start_is_rem_access_err() {
    refused(
        45,
        46,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let r = remote_at(&s.target, 0);
            let wr = fetch_add_wr(
                11,
                s.sge(DEST, 8),
                RemoteAddr {
                    remote_addr: r.remote_addr - 8,
                    ..r
                },
                1,
            );
            (wr, vec![])
        },
    );
}

#[test]
fn atomic_on_an_mr_without_remote_atomic_is_rem_access_err() {
    refused(
        47,
        48,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let no_atomic = extra_mr(
                s,
                64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            );
            let wr = fetch_add_wr(11, s.sge(DEST, 8), remote_at(&no_atomic, 8), 1);
            (wr, vec![no_atomic])
        },
    );
}

#[test]
fn atomic_on_a_qp_without_remote_atomic_is_rem_inv_req_err() {
    refused(
        49,
        50,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            let wr = fetch_add_wr(11, s.sge(DEST, 8), remote_at(&s.target, 8), 1);
            (wr, vec![])
        },
    );
}

#[test]
fn misaligned_fetch_and_add_is_rem_inv_req_err() {
    refused(
        51,
        52,
        all(),
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            let wr = fetch_add_wr(11, s.sge(DEST, 8), remote_at(&s.target, 9), 1);
            (wr, vec![])
        },
    );
}

#[test]
fn misaligned_compare_and_swap_is_rem_inv_req_err() {
    refused(
        53,
        54,
        all(),
        Detected::Remote,
        WcStatus::RemInvReqErr,
        |s| {
            // It would match the canary bytes if it were executed.
            let wr = cmp_swap_wr(
                11,
                s.sge(DEST, 8),
                remote_at(&s.target, 204),
                u64::from_ne_bytes([CANARY; 8]),
                0,
            );
            (wr, vec![])
        },
    );
}

// ---- local errors of READ / atomic destinations ----

#[test]
fn read_into_a_bad_lkey_is_loc_prot_err() {
    refused(61, 62, all(), Detected::Local, WcStatus::LocProtErr, |s| {
        let sge = Sge {
            lkey: s.local.lkey() ^ 0x5a5a_0000,
            ..s.sge(DEST, 100)
        };
        let wr = rdma_read_wr(11, vec![sge], remote_at(&s.target, 0));
        (wr, vec![])
    });
}

#[test]
fn read_into_memory_without_local_write_is_loc_prot_err() {
    refused(63, 64, all(), Detected::Local, WcStatus::LocProtErr, |s| {
        let ro = register_mr(&s.a.pd, 4096, AccessFlags::empty());
        ro.fill(CANARY).unwrap();
        let wr = rdma_read_wr(11, vec![ro.sge(0, 100).unwrap()], remote_at(&s.target, 0));
        (wr, vec![ro])
    });
}

#[test]
fn atomic_into_a_bad_lkey_is_loc_prot_err() {
    refused(65, 66, all(), Detected::Local, WcStatus::LocProtErr, |s| {
        let sge = Sge {
            lkey: s.local.lkey() ^ 0x5a5a_0000,
            ..s.sge(DEST, 8)
        };
        let wr = fetch_add_wr(11, sge, remote_at(&s.target, 8), 1);
        (wr, vec![])
    });
}

// ---- address arithmetic ----

/// `mr`'s rkey with an address whose range of `len` bytes wraps past 2^64.
fn wrapping(mr: &Mr, len: u64) -> RemoteAddr {
    RemoteAddr {
        remote_addr: u64::MAX - len / 2,
        rkey: mr.rkey(),
    }
}

#[test]
fn write_whose_range_wraps_around_the_address_space_is_rem_access_err() {
    refused(
        71,
        72,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_write_wr(11, vec![s.sge(0, 100)], wrapping(&s.target, 100));
            (wr, vec![])
        },
    );
}

#[test]
fn read_whose_range_wraps_around_the_address_space_is_rem_access_err() {
    refused(
        73,
        74,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = rdma_read_wr(11, vec![s.sge(DEST, 3000)], wrapping(&s.target, 3000));
            (wr, vec![])
        },
    );
}

#[test]
fn atomic_at_the_top_of_the_address_space_is_refused() {
    // An aligned word whose end wraps to 0: outside every region.
    refused(
        75,
        76,
        all(),
        Detected::Remote,
        WcStatus::RemAccessErr,
        |s| {
            let wr = fetch_add_wr(
                11,
                s.sge(DEST, 8),
                RemoteAddr {
                    remote_addr: u64::MAX - 7,
                    rkey: s.target.rkey(),
                },
                1,
            );
            (wr, vec![])
        },
    );
}
