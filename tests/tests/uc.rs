//! UC over UDP loopback: SEND / SEND_WITH_IMM / RDMA WRITE / WRITE_WITH_IMM without ACKs,
//! sends completing once they are out, READ and atomics refused at post time, and a lossy
//! link dropping whole messages without corrupting the ones that arrive.

use std::collections::HashSet;

use softverbs::{
    AccessFlags, Context, DeviceConfig, QpType, RcConnectOptions, RemoteAddr, SendWr, WcOpcode,
    WcStatus, WrOpcode,
};
use softverbs_conformance::*;
use softverbs_emu::net::fault::{FaultConfig, FaultSetting};

const FILE: u8 = 33;

fn uc_side(ctx: &Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let send_cq = ctx.create_cq(256).unwrap();
    let recv_cq = ctx.create_cq(256).unwrap();
    let qp = pd
        .qp_builder()
        .qp_type(QpType::Uc)
        .build(&send_cq, &recv_cq)
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    Side {
        ctx: ctx.clone(),
        send_mr: pd
            .register(buffer(64 * 1024), AccessFlags::LOCAL_WRITE)
            .unwrap(),
        recv_mr: pd.register(buffer(64 * 1024), access).unwrap(),
        pd,
        send_cq,
        recv_cq,
        qp,
    }
}

fn uc_pair(ctx_a: &Context, ctx_b: &Context) -> (Side, Side) {
    let a = uc_side(ctx_a);
    burn_qpns(ctx_b, 4);
    let b = uc_side(ctx_b);
    let opts = RcConnectOptions::default();
    let ep_a = a.qp.endpoint(0xff_fffe, 1).unwrap();
    let ep_b = b.qp.endpoint(0x100, 1).unwrap();
    a.qp.connect_uc(0xff_fffe, &ep_b, &opts).unwrap();
    b.qp.connect_uc(0x100, &ep_a, &opts).unwrap();
    (a, b)
}

#[test]
fn send_and_write_with_and_without_immediate() {
    let (a, b) = uc_pair(&open_udp_device(FILE, 1), &open_udp_device(FILE, 2));
    // SEND of 3.5 MTUs (its PSNs wrap around 2^24), then SEND_WITH_IMM.
    let msg = pattern(1, 3584);
    a.send_mr.write(0, &msg).unwrap();
    b.post_recv(10, vec![b.recv_mr.sge(0, 4096).unwrap()]);
    b.post_recv(11, vec![b.recv_mr.sge(4096, 4096).unwrap()]);
    a.post_send(SendWr::send(1, vec![a.send_mr.sge(0, 3584).unwrap()]));
    a.post_send(SendWr::send_with_imm(
        2,
        vec![a.send_mr.sge(0, 10).unwrap()],
        0xabcd,
    ));
    check_send_wc(&poll_1(&a.send_cq, "send"), 1, 3584, a.qpn());
    check_send_wc(&poll_1(&a.send_cq, "send imm"), 2, 10, a.qpn());
    let wcs = poll_n(&b.recv_cq, 2, "receives");
    check_recv_wc(&wcs[0], 10, 3584, None, b.qpn(), a.qpn());
    check_recv_wc(&wcs[1], 11, 10, Some(0xabcd), b.qpn(), a.qpn());
    let mut got = vec![0u8; 3584];
    b.recv_mr.read(0, &mut got).unwrap();
    assert_bytes_eq(&got, &msg, "UC SEND payload");
    // RDMA WRITE (no completion at the target) and WRITE_WITH_IMM (consumes a receive).
    let data = pattern(2, 5000);
    a.send_mr.write(8192, &data).unwrap();
    let remote = RemoteAddr {
        remote_addr: b.recv_mr.addr() + 16384,
        rkey: b.recv_mr.rkey(),
    };
    let write = SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote,
        ..SendWr::send(3, vec![a.send_mr.sge(8192, 5000).unwrap()])
    };
    a.post_send(write);
    let swc = poll_1(&a.send_cq, "write");
    assert_eq!(
        (swc.wr_id, swc.status, swc.opcode),
        (3, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    b.post_recv(12, vec![]);
    let write_imm = SendWr {
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: 77,
        remote: RemoteAddr {
            remote_addr: remote.remote_addr + 5000,
            ..remote
        },
        ..SendWr::send(4, vec![a.send_mr.sge(8192, 100).unwrap()])
    };
    a.post_send(write_imm);
    poll_1(&a.send_cq, "write imm");
    let wc = poll_1(&b.recv_cq, "write imm receive");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.imm_data, wc.byte_len),
        (12, WcOpcode::RecvRdmaWithImm, 77, 100)
    );
    let mut got = vec![0u8; 5100];
    b.recv_mr.read(16384, &mut got).unwrap();
    assert_bytes_eq(&got[..5000], &data, "UC WRITE");
    assert_bytes_eq(&got[5000..], &data[..100], "UC WRITE_WITH_IMM");
    assert_eq!(
        a.counters().sent_responses + b.counters().sent_responses,
        0,
        "no ACKs on UC"
    );
}

#[test]
fn read_atomics_and_send_with_inv_are_refused_at_post_time() {
    let (a, b) = uc_pair(&open_udp_device(FILE, 3), &open_udp_device(FILE, 4));
    let remote = RemoteAddr {
        remote_addr: b.recv_mr.addr(),
        rkey: b.recv_mr.rkey(),
    };
    for (opcode, errno) in [
        (WrOpcode::RdmaRead, libc::EINVAL),
        (WrOpcode::AtomicCmpAndSwp, libc::EINVAL),
        (WrOpcode::AtomicFetchAndAdd, libc::EINVAL),
        (WrOpcode::AtomicWrite, libc::EINVAL),
        (WrOpcode::SendWithInv, libc::EOPNOTSUPP),
    ] {
        let wr = SendWr {
            opcode,
            remote,
            ..SendWr::send(1, vec![a.send_mr.sge(0, 8).unwrap()])
        };
        let e = a.qp.post_send(&[wr]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, errno), "{opcode:?}");
    }
    assert_cq_empty(&a.send_cq, "nothing was posted");
}

#[test]
fn a_lossy_link_drops_whole_messages_and_never_corrupts_one() {
    let faults = FaultSetting::new(
        FaultConfig {
            loss_per_mille: 80,
            reorder_per_mille: 30,
            dup_per_mille: 30,
            ..FaultConfig::none()
        },
        17,
    );
    let ctx_a = register_and_open(DeviceConfig {
        faults: Some(faults.clone()),
        ..DeviceConfig::new(device_name(FILE, 5), test_ip(FILE, 5))
    });
    let (a, b) = uc_pair(&ctx_a, &open_udp_device(FILE, 6));
    const N: usize = 60;
    const LEN: usize = 2500; // three packets at MTU 1024
    const SLOT: usize = 4096;
    let slots =
        b.pd.register(buffer(N * SLOT), AccessFlags::LOCAL_WRITE)
            .unwrap();
    for k in 0..N {
        b.post_recv(k as u64, vec![slots.sge(k * SLOT, SLOT as u32).unwrap()]);
    }
    for k in 0..N {
        let off = (k % 8) * SLOT;
        a.send_mr.write(off, &pattern(k as u64, LEN)).unwrap();
        let sge = a.send_mr.sge(off, LEN as u32).unwrap();
        a.post_send(SendWr::send_with_imm(k as u64, vec![sge], k as u32));
        // Each send completes as soon as it is out; one at a time keeps its buffer stable.
        let wc = poll_1(&a.send_cq, "UC send");
        assert_eq!(wc.status, WcStatus::Success);
    }
    let lost = faults.counters.snapshot().dropped;
    assert!(lost > 0, "the link lost nothing: the test proves nothing");
    // Give the last packets time to land, then check every receive that completed.
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline && got.len() < N {
        let more = b
            .recv_cq
            .poll_wait(1, std::time::Duration::from_millis(200));
        got.extend(more.unwrap());
    }
    assert!(
        got.len() < N,
        "{lost} packets lost yet all {N} messages arrived"
    );
    assert!(!got.is_empty(), "nothing arrived");
    let mut seen = HashSet::new();
    for wc in &got {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert!(seen.insert(wc.imm_data), "message {} twice", wc.imm_data);
        assert!(seen.len() <= N);
        assert_eq!(wc.byte_len as usize, LEN);
        let mut data = vec![0u8; LEN];
        slots.read(wc.wr_id as usize * SLOT, &mut data).unwrap();
        assert_bytes_eq(&data, &pattern(wc.imm_data as u64, LEN), "UC message");
    }
}
