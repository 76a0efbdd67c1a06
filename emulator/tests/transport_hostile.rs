//! A hostile peer against the RC transport, under the deterministic simulator: packets forged
//! with valid ICRCs from the peer's address (what any process that can send from it can do,
//! RoCEv2 has no authentication) must not amplify traffic, grow memory, slip past the header
//! checks or complete work requests they do not belong to (issue 23).

use softverbs_api::{wr::RemoteAddr, AccessFlags, Mtu, QpAttr, SendWr, WcStatus, WrOpcode};
use softverbs_emu::engine::RxDrop;
use softverbs_emu::sim::{FaultConfig, Side, SimPair};
use softverbs_emu::transport::{Env, Outputs};
use softverbs_emu::wire::{AethKind, AethRepr, BthRepr, NakCode, Opcode, Psn, RethRepr, RoceRepr};
use softverbs_testkit::{recv_one, sge};

/// The most responses one transport call may make for a READ: the window a READ of any
/// length is streamed in (the responder's `READ_RESPONSE_BURST`), so memory per READ is
/// bounded by it.
const READ_WINDOW: usize = 256;

/// The simulator workload's attributes (short ACK timeout, infinite retries, 4 READ /
/// atomic resources each way), with PSNs that stay far from the wrap.
fn attrs() -> QpAttr {
    QpAttr {
        sq_psn: 100,
        rq_psn: 100,
        ..softverbs_emu::sim::workload::attrs()
    }
}

fn pair(mtu: Mtu) -> SimPair {
    SimPair::new_rc(1, FaultConfig::none(), mtu, &attrs())
}

fn opcodes(packets: &[Vec<u8>]) -> Vec<Opcode> {
    packets
        .iter()
        .map(|b| RoceRepr::parse(b).unwrap().0.bth.opcode)
        .collect()
}

/// A request to B's QP (0x12) at `psn`.
fn to_b(opcode: Opcode, psn: u32, payload: &[u8]) -> RoceRepr<'_> {
    let mut bth = BthRepr::new(opcode, 0x12, Psn::new(psn));
    bth.ack_req = true;
    RoceRepr::new(bth, payload)
}

fn read_request(psn: u32, va: u64, rkey: u32, len: u32) -> RoceRepr<'static> {
    let mut r = to_b(Opcode::RC_RDMA_READ_REQUEST, psn, &[]);
    r.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: len,
    });
    r
}

/// A region of `len` bytes on B that remote peers may read and write, filled with a pattern.
fn b_region(p: &mut SimPair, len: usize) -> (u64, u32) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let (addr, _, rkey) = p.register(Side::B, len, access);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
    p.write(Side::B, addr, &pattern);
    (addr, rkey)
}

fn read_responses(packets: &[Vec<u8>]) -> usize {
    opcodes(packets)
        .iter()
        .filter(|o| {
            matches!(
                **o,
                Opcode::RC_RDMA_READ_RESPONSE_FIRST
                    | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                    | Opcode::RC_RDMA_READ_RESPONSE_LAST
                    | Opcode::RC_RDMA_READ_RESPONSE_ONLY
            )
        })
        .count()
}

// ---- defect 1: a READ's responses are made in a bounded window ----

/// One transport call answers a 1 MiB READ (1,024 responses at MTU 1024) with at most a
/// window of responses; the rest come from the calls the driver makes while the responder
/// says it has more, in PSN order, and their number is the READ's. Duplicates of the READ
/// each take one window per call too: memory per READ is O(window), not O(length).
#[test]
fn a_large_read_is_answered_in_bounded_bursts_and_so_are_its_duplicates() {
    let mut p = pair(Mtu::Mtu1024);
    let len = 1 << 20;
    let (va, rkey) = b_region(&mut p, len);
    let mut all = Vec::new();
    for round in 0..4 {
        let req = read_request(100, va, rkey, len as u32);
        let env = Env::new(&p.b.mem, 0);
        let mut out = Outputs::default();
        p.b.qp.on_packet(&req, &env, &mut out);
        assert!(
            out.packets.len() <= READ_WINDOW,
            "round {round}: one call made {} responses",
            out.packets.len()
        );
        let mut packets = std::mem::take(&mut out.packets);
        let mut calls = 0;
        while p.b.qp.responses_pending() {
            p.b.qp.continue_responses(&env, &mut out);
            assert!(out.packets.len() <= READ_WINDOW);
            packets.append(&mut out.packets);
            calls += 1;
            assert!(calls <= len / 1024, "the responses never end");
        }
        let psns: Vec<u32> = packets
            .iter()
            .map(|b| RoceRepr::parse(&b.bytes).unwrap().0.bth.psn.value())
            .collect();
        assert_eq!(
            psns,
            (100..100 + 1024).collect::<Vec<u32>>(),
            "round {round}"
        );
        if round == 0 {
            all = packets.iter().map(|b| b.bytes.clone()).collect();
        }
    }
    let ops = opcodes(&all);
    assert_eq!(ops[0], Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    assert_eq!(ops[1023], Opcode::RC_RDMA_READ_RESPONSE_LAST);
    assert!(ops[1..1023]
        .iter()
        .all(|o| *o == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE));
}

// ---- defect 2: duplicates are answered only from the stored READ / atomic requests ----

/// A READ request at a past PSN that carried a SEND is not executed: it earns nothing (it
/// would have been 64 KiB of responses for a 60-byte datagram).
#[test]
fn a_read_at_a_past_psn_that_carried_no_read_is_not_executed() {
    let mut p = pair(Mtu::Mtu1024);
    let (va, rkey) = b_region(&mut p, 65536);
    // A real SEND at PSN 100 (B has a receive posted for it).
    let (buf, lkey) = {
        let (a, l, _) = p.register(Side::B, 64, AccessFlags::LOCAL_WRITE);
        (a, l)
    };
    p.post_recv(
        Side::B,
        &[softverbs_api::RecvWr {
            wr_id: 1,
            sg_list: vec![sge(buf, 64, lkey)],
        }],
    )
    .unwrap();
    let (src, slkey, _) = p.register(Side::A, 64, AccessFlags::LOCAL_WRITE);
    p.post_send(Side::A, &[SendWr::send(7, vec![sge(src, 64, slkey)])])
        .unwrap();
    p.run(10_000);
    assert_eq!(p.a.completions.len(), 1);
    let before = p.sent_by(Side::B).len();
    assert_eq!(
        p.inject(Side::B, 4791, &read_request(100, va, rkey, 65536)),
        Ok(())
    );
    // Far in the past too (half the PSN space counts as past).
    let far = Psn::new(100).add(Psn::MASK - 0x10_0000).value();
    assert_eq!(
        p.inject(Side::B, 4791, &read_request(far, va, rkey, 65536)),
        Ok(())
    );
    p.run(10_000);
    let after = p.sent_by(Side::B);
    assert_eq!(
        read_responses(&after[before..]),
        0,
        "{:?}",
        opcodes(&after[before..])
    );
}

/// A duplicate of a stored READ is answered, but only within the stored READ's range and
/// key: a larger range, another region or a PSN past its responses earn nothing.
#[test]
fn a_duplicate_read_is_replayed_only_within_the_stored_reads_range() {
    let mut p = pair(Mtu::Mtu1024);
    let (va, rkey) = b_region(&mut p, 65536);
    let (other_va, other_rkey) = b_region(&mut p, 65536);
    // The real READ, PSN 100..=103 (4 KiB), injected as if A had sent it.
    assert_eq!(
        p.inject(Side::B, 4791, &read_request(100, va, rkey, 4096)),
        Ok(())
    );
    p.run(10_000);
    let mut seen = p.sent_by(Side::B).len();
    assert_eq!(read_responses(&p.sent_by(Side::B)), 4);
    let mut responses_to = |p: &mut SimPair, req: RoceRepr<'_>| {
        assert_eq!(p.inject(Side::B, 4791, &req), Ok(()));
        p.run(10_000);
        let all = p.sent_by(Side::B);
        let n = read_responses(&all[seen..]);
        seen = all.len();
        n
    };
    // Larger than the original, or beyond its end.
    assert_eq!(responses_to(&mut p, read_request(100, va, rkey, 65536)), 0);
    assert_eq!(
        responses_to(&mut p, read_request(102, va + 2048, rkey, 4096)),
        0
    );
    // Another region (valid key, but not the READ stored at this PSN).
    assert_eq!(
        responses_to(&mut p, read_request(100, other_va, other_rkey, 4096)),
        0
    );
    // The whole READ again, and its second half from its third PSN: replayed.
    assert_eq!(responses_to(&mut p, read_request(100, va, rkey, 4096)), 4);
    assert_eq!(
        responses_to(&mut p, read_request(102, va + 2048, rkey, 2048)),
        2
    );
}

// ---- defect 3: TVer and P_Key ----

/// A BTH with transport version 15 and P_Keys outside the port's partition are dropped by
/// the receive pipeline with their own reasons; the limited member 0x7FFF is taken.
#[test]
fn bad_transport_versions_and_partitions_are_dropped_before_the_qp() {
    let mut p = pair(Mtu::Mtu1024);
    let (va, rkey) = b_region(&mut p, 4096);
    let write = |psn: u32, tver: u8, pkey: u16| {
        let mut r = to_b(Opcode::RC_RDMA_WRITE_ONLY, psn, &[0xee; 16]);
        r.bth.tver = tver;
        r.bth.pkey = pkey;
        r.reth = Some(RethRepr {
            va,
            rkey,
            dma_len: 16,
        });
        r
    };
    assert_eq!(
        p.inject(Side::B, 4791, &write(100, 15, 0xffff)),
        Err(RxDrop::BadVersion)
    );
    assert_eq!(
        p.inject(Side::B, 4791, &write(100, 1, 0xffff)),
        Err(RxDrop::BadVersion)
    );
    assert_eq!(
        p.inject(Side::B, 4791, &write(100, 0, 0x0000)),
        Err(RxDrop::BadPkey)
    );
    assert_eq!(
        p.inject(Side::B, 4791, &write(100, 0, 0x8000)),
        Err(RxDrop::BadPkey)
    );
    assert_eq!(
        p.inject(Side::B, 4791, &write(100, 0, 0x1234)),
        Err(RxDrop::BadPkey)
    );
    p.run(1000);
    assert!(
        p.sent_by(Side::B).is_empty(),
        "a dropped packet is not answered"
    );
    assert_eq!(p.read(Side::B, va, 16), b_pattern(16));
    assert_eq!(p.b.qp.counters.received_packets, 0);
    // The limited member of the default partition is one of ours.
    assert_eq!(p.inject(Side::B, 4791, &write(100, 0, 0x7fff)), Ok(()));
    p.run(1000);
    assert_eq!(p.read(Side::B, va, 16), [0xee; 16]);
}

fn b_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + 1) as u8).collect()
}

// ---- defect 4: path MTU of request payloads ----

/// The NAKs B sent, by code.
fn naks(p: &SimPair) -> Vec<NakCode> {
    p.sent_by(Side::B)
        .iter()
        .filter_map(
            |b| match RoceRepr::parse(b).unwrap().0.aeth.map(|a| a.kind()) {
                Some(AethKind::Nak(code)) => Some(code),
                _ => None,
            },
        )
        .collect()
}

/// On a QP with path MTU 1024, a WRITE ONLY of 4096 bytes (or 32 KiB in one datagram), a
/// FIRST or MIDDLE of other than 1024 bytes, or an empty LAST, is an invalid request: NAK,
/// and not one byte of memory written.
#[test]
fn request_payloads_must_fit_the_path_mtu() {
    type Case = (&'static str, Vec<(Opcode, usize, bool)>);
    let cases: Vec<Case> = vec![
        ("ONLY 4096", vec![(Opcode::RC_RDMA_WRITE_ONLY, 4096, true)]),
        (
            "ONLY 32 KiB",
            vec![(Opcode::RC_RDMA_WRITE_ONLY, 32768, true)],
        ),
        (
            "FIRST 1000",
            vec![(Opcode::RC_RDMA_WRITE_FIRST, 1000, true)],
        ),
        (
            "FIRST 2048",
            vec![(Opcode::RC_RDMA_WRITE_FIRST, 2048, true)],
        ),
        (
            "MIDDLE 512",
            vec![
                (Opcode::RC_RDMA_WRITE_FIRST, 1024, true),
                (Opcode::RC_RDMA_WRITE_MIDDLE, 512, false),
            ],
        ),
        (
            "LAST 2048",
            vec![
                (Opcode::RC_RDMA_WRITE_FIRST, 1024, true),
                (Opcode::RC_RDMA_WRITE_LAST, 2048, false),
            ],
        ),
    ];
    for (name, packets) in cases {
        let mut p = pair(Mtu::Mtu1024);
        let (va, rkey) = b_region(&mut p, 65536);
        let total: usize = packets.iter().map(|(_, len, _)| len).sum();
        let data = vec![0xaa; 65536];
        let mut offset = 0;
        for (psn, (opcode, len, reth)) in (100..).zip(packets.iter()) {
            let mut r = to_b(*opcode, psn, &data[offset..offset + len]);
            if *reth {
                r.reth = Some(RethRepr {
                    va,
                    rkey,
                    dma_len: total as u32,
                });
            }
            assert_eq!(p.inject(Side::B, 4791, &r), Ok(()), "{name}");
            offset += len;
        }
        p.run(1000);
        assert_eq!(naks(&p), [NakCode::InvalidRequest], "{name}");
        let untouched_to = if name.starts_with("MIDDLE") || name.starts_with("LAST") {
            // The FIRST was right and was written; what followed was not.
            1024
        } else {
            0
        };
        assert_eq!(
            p.read(Side::B, va + untouched_to, 65536 - untouched_to as usize),
            b_pattern(65536)[untouched_to as usize..],
            "{name}"
        );
    }
    // And the sizes that fit are taken.
    let mut p = pair(Mtu::Mtu1024);
    let (va, rkey) = b_region(&mut p, 4096);
    let data = [0x5a; 1024];
    let mut r = to_b(Opcode::RC_RDMA_WRITE_ONLY, 100, &data);
    r.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: 1024,
    });
    assert_eq!(p.inject(Side::B, 4791, &r), Ok(()));
    p.run(1000);
    assert!(naks(&p).is_empty());
    assert_eq!(p.read(Side::B, va, 1024), data);
}

// ---- defect 5: the completer checks the READ response opcode sequence ----

/// With a SEND and a 256-byte READ outstanding at MTU 1024 (both requests lost on the way),
/// a forged READ RESPONSE FIRST of 256 bytes at the READ's PSN completes nothing; the
/// retransmitted requests then get their real answers, and the READ lands the real bytes.
#[test]
fn a_read_response_of_the_wrong_opcode_completes_nothing() {
    for forged_op in [
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
    ] {
        let mut p = pair(Mtu::Mtu1024);
        let (src, rkey) = b_region(&mut p, 256);
        let (dst, lkey, _) = p.register(Side::A, 256, AccessFlags::LOCAL_WRITE);
        // B needs a receive for the SEND.
        let (rbuf, rlkey, _) = p.register(Side::B, 16, AccessFlags::LOCAL_WRITE);
        p.post_recv(Side::B, &[recv_one(5, rbuf, 16, rlkey)])
            .unwrap();
        p.lose.extend([(Side::A, 0), (Side::A, 1)]);
        let send = SendWr {
            send_flags: softverbs_api::SendFlags::SIGNALED,
            ..SendWr::send(1, vec![])
        };
        let read = SendWr {
            opcode: WrOpcode::RdmaRead,
            send_flags: softverbs_api::SendFlags::SIGNALED,
            remote: RemoteAddr {
                remote_addr: src,
                rkey,
            },
            ..SendWr::send(2, vec![sge(dst, 256, lkey)])
        };
        p.post_send(Side::A, &[send, read]).unwrap();
        let forged_bytes = [0x66; 256];
        let mut forged = RoceRepr::new(BthRepr::new(forged_op, 0x11, Psn::new(101)), &forged_bytes);
        if forged_op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            forged.aeth = Some(AethRepr::ack(1));
        }
        assert_eq!(p.inject(Side::A, 4791, &forged), Ok(()));
        assert!(
            p.a.completions.is_empty(),
            "{forged_op:?}: {:?}",
            p.a.completion_summary()
        );
        p.run(100_000);
        let got: Vec<(u64, WcStatus)> =
            p.a.completions
                .iter()
                .map(|c| (c.wc.wr_id, c.wc.status))
                .collect();
        assert_eq!(
            got,
            [(1, WcStatus::Success), (2, WcStatus::Success)],
            "{forged_op:?}"
        );
        assert_eq!(p.read(Side::A, dst, 256), b_pattern(256), "{forged_op:?}");
    }
}

/// A responder given no READ / atomic resources (`max_dest_rd_atomic` 0 at RTR) refuses
/// every READ, atomic and ATOMIC WRITE as kernel rxe's `check_resource` does: NAK invalid
/// request, the requester's WR completes in REM_INV_REQ_ERR, and the target memory is
/// neither read back nor changed.
#[test]
fn a_responder_without_rd_atomic_resources_refuses_reads_and_atomics() {
    let no_resources = QpAttr {
        max_dest_rd_atomic: 0,
        ..attrs()
    };
    for opcode in [
        WrOpcode::RdmaRead,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicWrite,
    ] {
        let mut p = SimPair::new_rc(1, FaultConfig::none(), Mtu::Mtu1024, &no_resources);
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_ATOMIC;
        let (target, _, rkey) = p.register(Side::B, 8, access);
        p.write(Side::B, target, &[5, 0, 0, 0, 0, 0, 0, 0]);
        let (dst, lkey, _) = p.register(Side::A, 8, AccessFlags::LOCAL_WRITE);
        let (inline, ilkey, _) = p.register(Side::A, 8, AccessFlags::LOCAL_WRITE);
        p.write(Side::A, inline, &[9; 8]);
        let sg = if opcode == WrOpcode::AtomicWrite {
            sge(inline, 8, ilkey)
        } else {
            sge(dst, 8, lkey)
        };
        let wr = SendWr {
            opcode,
            remote: RemoteAddr {
                remote_addr: target,
                rkey,
            },
            compare_add: 5,
            swap: 7,
            ..SendWr::send(3, vec![sg])
        };
        p.post_send(Side::A, &[wr]).unwrap();
        p.run(10_000);
        assert_eq!(naks(&p), [NakCode::InvalidRequest], "{opcode:?}");
        let statuses: Vec<WcStatus> = p.a.completions.iter().map(|c| c.wc.status).collect();
        assert_eq!(statuses, [WcStatus::RemInvReqErr], "{opcode:?}");
        assert_eq!(
            p.read(Side::B, target, 8),
            [5, 0, 0, 0, 0, 0, 0, 0],
            "{opcode:?}"
        );
        assert_eq!(p.read(Side::A, dst, 8), [0; 8], "{opcode:?}");
    }
}
