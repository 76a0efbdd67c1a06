//! Memory windows in the sans-I/O transport under the deterministic simulator: BIND_MW is
//! local work ordered behind earlier WRs, remote access through a window's rkey, SEND_WITH_INV
//! and LOCAL_INV invalidating a type 2 window (exactly once, also under duplication and loss),
//! and the statuses of failing binds and invalidations.

use softverbs_api::mw::next_rkey;
use softverbs_api::{
    wr::RemoteAddr, AccessFlags, BindMwWr, Mtu, MwBindInfo, MwType, QpAttr, QpState, RecvWr,
    SendWr, Sge, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
use softverbs_emu::sim::{FaultConfig, Side, SimPair, TraceEvent};
use softverbs_emu::wire::{AethKind, NakCode, RoceRepr};

/// The PD of every simulated QP and region (the simulator's `SIM_PD`).
const PD: u32 = 1;

/// The simulator workload's attributes (short ACK timeout, infinite retries, 4 READ /
/// atomic resources each way), with PSNs that stay far from the wrap.
fn attrs() -> QpAttr {
    QpAttr {
        sq_psn: 100,
        rq_psn: 100,
        ..softverbs_emu::sim::workload::attrs()
    }
}

/// (wr_id, status, opcode) of every completion of `side`, in order.
fn wcs(p: &SimPair, side: Side) -> Vec<(u64, WcStatus, WcOpcode)> {
    let node = if side == Side::A { &p.a } else { &p.b };
    node.completion_summary()
}

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

/// A signaled BIND_MW of window `mw` (id, current rkey) to `[addr, addr + len)` of region
/// `lkey`, with the next rkey.
fn bind(wr_id: u64, mw: (u32, u32), lkey: u32, addr: u64, len: u64, access: AccessFlags) -> SendWr {
    SendWr {
        opcode: WrOpcode::BindMw,
        bind_mw: Some(BindMwWr {
            mw: mw.0,
            rkey: next_rkey(mw.1),
            bind_info: MwBindInfo {
                mr_lkey: lkey,
                addr,
                length: len,
                mw_access_flags: access,
            },
        }),
        ..SendWr::send(wr_id, vec![])
    }
}

fn write_wr(wr_id: u64, from: Sge, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: RemoteAddr { remote_addr, rkey },
        ..SendWr::send(wr_id, vec![from])
    }
}

/// A binds a type 2 window over part of its region, behind a READ it issued; B writes through
/// the window, then invalidates it with SEND_WITH_INV. Returns the pair and what A's window
/// covers: (address, rkey, region address).
fn bind_use_and_invalidate(seed: u64, faults: FaultConfig) -> (SimPair, u64, u32, u64) {
    let mut p = SimPair::new_rc(seed, faults, Mtu::Mtu1024, &attrs());
    // A: the region under the window (no remote rights of its own), a READ destination and a
    // receive buffer.
    let (region, region_lkey, region_rkey) = p.register(
        Side::A,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
    );
    let (dest, dest_lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    let (inbox, inbox_lkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    // B: what A reads, what B writes and sends.
    let (readable, _, readable_rkey) = p.register(Side::B, 64, AccessFlags::REMOTE_READ);
    p.write(Side::B, readable, &[0x42; 64]);
    let (src, src_lkey, _) = p.register(Side::B, 3000, AccessFlags::LOCAL_WRITE);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 1) as u8).collect();
    p.write(Side::B, src, &data);

    let mw = p.a.mem.alloc_window(PD, MwType::Type2).unwrap();
    let win = region + 512;
    let rkey = next_rkey(mw.1);
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        remote: RemoteAddr {
            remote_addr: readable,
            rkey: readable_rkey,
        },
        ..SendWr::send(1, vec![sge(dest, 64, dest_lkey)])
    };
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    p.post_send(
        Side::A,
        &[read, bind(2, mw, region_lkey, win, 3000, access)],
    )
    .unwrap();
    // The bind waits for the READ: nothing is bound yet.
    assert!(p.a.completions.is_empty());
    assert_eq!(
        p.a.mem
            .check_remote(PD, rkey, win, 1, AccessFlags::REMOTE_WRITE)
            .unwrap_err(),
        softverbs_emu::memory::MemError::InvalidKey
    );
    p.run(100_000);
    assert_eq!(
        wcs(&p, Side::A),
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead),
            (2, WcStatus::Success, WcOpcode::BindMw)
        ]
    );
    assert_eq!(p.a.completions[1].wc.byte_len, 0);
    assert_eq!(p.read(Side::A, dest, 64), [0x42; 64]);

    // B writes 3000 bytes (three packets) through the window; the region's own rkey has no
    // remote rights.
    p.post_send(
        Side::B,
        &[write_wr(10, sge(src, 3000, src_lkey), win, rkey)],
    )
    .unwrap();
    p.run(100_000);
    assert_eq!(
        wcs(&p, Side::B),
        [(10, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.read(Side::A, win, 3000), data);
    assert_eq!(p.read(Side::A, region, 512), vec![0; 512]);
    assert_ne!(region_rkey, rkey);

    // B invalidates the window with its SEND.
    p.post_recv(
        Side::A,
        &[RecvWr {
            wr_id: 20,
            sg_list: vec![sge(inbox, 64, inbox_lkey)],
        }],
    )
    .unwrap();
    let inv = SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: rkey,
        ..SendWr::send(11, vec![sge(src, 64, src_lkey)])
    };
    p.post_send(Side::B, &[inv]).unwrap();
    p.run(100_000);
    let recv = p.a.completions.last().unwrap().wc;
    assert_eq!(
        (recv.wr_id, recv.status, recv.opcode, recv.byte_len),
        (20, WcStatus::Success, WcOpcode::Recv, 64)
    );
    assert_eq!(recv.wc_flags, WcFlags::WITH_INV);
    assert_eq!(recv.invalidated_rkey, rkey);
    assert_eq!(p.a.completions.len(), 3, "one receive completion");
    assert_eq!(
        wcs(&p, Side::B)[1..],
        [(11, WcStatus::Success, WcOpcode::Send)]
    );
    assert_eq!(p.read(Side::A, inbox, 64), data[..64]);
    (p, win, rkey, region)
}

#[test]
fn bind_is_ordered_and_send_with_inv_closes_the_window() {
    let (mut p, win, rkey, _) = bind_use_and_invalidate(1, FaultConfig::none());
    let before = p.read(Side::A, win, 3000);
    // After the invalidation the rkey opens nothing: a remote access error NAK, and B's WRITE
    // fails with REM_ACCESS_ERR.
    let (src, src_lkey, _) = p.register(Side::B, 16, AccessFlags::LOCAL_WRITE);
    p.write(Side::B, src, &[0xAB; 16]);
    let sent_before = p.trace.len();
    p.post_send(Side::B, &[write_wr(12, sge(src, 16, src_lkey), win, rkey)])
        .unwrap();
    p.run(100_000);
    assert_eq!(
        wcs(&p, Side::B)[2..],
        [(12, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
    let naks: Vec<_> = p.trace[sent_before..]
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Sent { from, bytes, .. } if *from == Side::A => {
                RoceRepr::parse(bytes).unwrap().0.aeth
            }
            _ => None,
        })
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].kind(), AethKind::Nak(NakCode::RemoteAccessError));
    assert_eq!(p.read(Side::A, win, 3000), before);
    assert_eq!(p.a.qp.state(), QpState::Err);
}

#[test]
fn invalidation_happens_once_under_loss_duplication_and_reordering() {
    // Duplicated or retransmitted SEND_WITH_INV packets are acknowledged again, never executed
    // again: a second invalidation would fail the receive and both QPs.
    let (mut duplicates, mut retransmissions) = (0, 0);
    for seed in 1..=12 {
        let faults = FaultConfig {
            corrupt_per_mille: 0,
            ..FaultConfig::harsh()
        };
        let (p, _, _, _) = bind_use_and_invalidate(seed, faults);
        assert_eq!(p.a.qp.state(), QpState::Rts, "seed {seed}");
        assert_eq!(p.b.qp.state(), QpState::Rts, "seed {seed}");
        duplicates += p.a.qp.counters.duplicate_requests;
        retransmissions += p.b.qp.counters.retransmitted_packets;
    }
    assert!(duplicates > 0 && retransmissions > 0, "the faults happened");
}

#[test]
fn a_failed_bind_is_mw_bind_err_and_flushes_the_rest() {
    let mut p = SimPair::new_rc(3, FaultConfig::none(), Mtu::Mtu1024, &attrs());
    let (region, lkey, _) = p.register(
        Side::A,
        256,
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
    );
    let mw = p.a.mem.alloc_window(PD, MwType::Type2).unwrap();
    // One byte beyond the region.
    let beyond = bind(1, mw, lkey, region + 1, 256, AccessFlags::REMOTE_READ);
    p.post_send(Side::A, &[beyond, SendWr::send(2, vec![])])
        .unwrap();
    p.run(10_000);
    assert_eq!(
        wcs(&p, Side::A),
        [
            (1, WcStatus::MwBindErr, WcOpcode::BindMw),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert!(
        !p.trace
            .iter()
            .any(|e| matches!(e, TraceEvent::Sent { from: Side::A, .. })),
        "a local failure sends nothing"
    );
    // Nothing was bound: the region can go.
    p.a.mem.deregister(lkey).unwrap();
}

#[test]
fn local_inv_unbinds_once_then_fails() {
    let mut p = SimPair::new_rc(4, FaultConfig::none(), Mtu::Mtu1024, &attrs());
    let (region, lkey, _) = p.register(
        Side::A,
        256,
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
    );
    let mw = p.a.mem.alloc_window(PD, MwType::Type2).unwrap();
    let rkey = next_rkey(mw.1);
    let inv = |wr_id| SendWr {
        opcode: WrOpcode::LocalInv,
        invalidate_rkey: rkey,
        ..SendWr::send(wr_id, vec![])
    };
    p.post_send(
        Side::A,
        &[
            bind(1, mw, lkey, region, 256, AccessFlags::REMOTE_READ),
            inv(2),
        ],
    )
    .unwrap();
    p.run(10_000);
    // Bound and unbound: the region is free again (deregistration would fail while bound).
    assert_eq!(
        wcs(&p, Side::A),
        [
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::Success, WcOpcode::LocalInv)
        ]
    );
    p.post_send(Side::A, &[inv(3), SendWr::send(4, vec![])])
        .unwrap();
    p.run(10_000);
    assert_eq!(
        wcs(&p, Side::A)[2..],
        [
            (3, WcStatus::LocQpOpErr, WcOpcode::LocalInv),
            (4, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
    p.a.mem.deregister(lkey).unwrap();
}

#[test]
fn a_type2_window_serves_only_the_qp_it_was_bound_through() {
    let mut p = SimPair::new_rc(5, FaultConfig::none(), Mtu::Mtu1024, &attrs());
    let (region, lkey, _) =
        p.register(Side::A, 64, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = p.a.mem.alloc_window(PD, MwType::Type2).unwrap();
    // Bound through another QP of A (not the one B is connected to).
    let wr = BindMwWr {
        mw: mw.0,
        rkey: next_rkey(mw.1),
        bind_info: MwBindInfo {
            mr_lkey: lkey,
            addr: region,
            length: 64,
            mw_access_flags: AccessFlags::REMOTE_WRITE,
        },
    };
    let rkey = p.a.mem.bind_window(PD, p.a.qp.qpn + 7, &wr).unwrap();
    let (src, src_lkey, _) = p.register(Side::B, 8, AccessFlags::LOCAL_WRITE);
    p.write(Side::B, src, &[1; 8]);
    p.post_send(Side::B, &[write_wr(1, sge(src, 8, src_lkey), region, rkey)])
        .unwrap();
    p.run(10_000);
    assert_eq!(
        wcs(&p, Side::B),
        [(1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.read(Side::A, region, 64), vec![0; 64]);
}
