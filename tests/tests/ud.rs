//! UD over UDP loopback: address handles, DETH with Q_Key and source QPN, one packet per
//! message, the 40-byte GRH area filled as rxe fills it for IPv4 peers, replies through
//! `create_ah_from_wc`, and the bad inputs (wrong Q_Key, message above the MTU, unknown or
//! unreachable address, opcodes UD does not have).

use softverbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, Gid, Mr, Pd, Qp, QpCap, RecvWr, SendWr, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};
use softverbs_conformance::*;

const FILE: u8 = 34;
const QKEY: u32 = 0x1111_2222;

struct UdSide {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

impl UdSide {
    fn new(ctx: &Context, qkey: u32) -> UdSide {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let cap = QpCap {
            max_inline_data: 64,
            ..softverbs_testkit::qp_cap(16, 2)
        };
        let qp = ud_qp(&pd, &cq, &cq, cap, qkey);
        let mr = pd
            .register(buffer(64 * 1024), AccessFlags::LOCAL_WRITE)
            .unwrap();
        UdSide {
            ctx: ctx.clone(),
            pd,
            cq,
            qp,
            mr,
        }
    }

    fn ah_to(&self, peer: &UdSide) -> Ah {
        let gid = peer.ctx.query_gid(1, 1).unwrap().gid;
        self.pd
            .create_ah(&AhAttr {
                dgid: gid,
                sgid_index: 1,
                port_num: 1,
                hop_limit: 64,
                ..AhAttr::default()
            })
            .unwrap()
    }

    fn post_recv(&self, wr_id: u64, offset: usize, len: u32) {
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: vec![self.mr.sge(offset, len).unwrap()],
            }])
            .unwrap();
    }

    fn send(&self, wr_id: u64, ah: &Ah, qpn: u32, qkey: u32, offset: usize, data: &[u8]) -> SendWr {
        self.mr.write(offset, data).unwrap();
        let mut wr = SendWr::send(wr_id, vec![self.mr.sge(offset, data.len() as u32).unwrap()]);
        wr.ud = Some(ah.dest(qpn, qkey));
        wr
    }
}

fn ud_pair(na: u8, nb: u8) -> (UdSide, UdSide) {
    let a = UdSide::new(&open_udp_device(FILE, na), QKEY);
    let ctx_b = open_udp_device(FILE, nb);
    burn_qpns(&ctx_b, 2);
    let b = UdSide::new(&ctx_b, QKEY);
    (a, b)
}

fn mr_bytes(mr: &Mr, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.read(offset, &mut v).unwrap();
    v
}

#[test]
fn send_lands_after_a_grh_like_rxe_and_the_reply_goes_back() {
    let (a, b) = ud_pair(1, 2);
    let msg = pattern(1, 1000);
    b.post_recv(7, 0, 2048);
    let ah = a.ah_to(&b);
    let wr = SendWr {
        opcode: WrOpcode::SendWithImm,
        imm_data: 0xfeed_beef,
        ..a.send(1, &ah, b.qp.qp_num(), QKEY, 0, &msg)
    };
    a.qp.post_send(&[wr]).unwrap();
    let swc = poll_1(&a.cq, "UD send");
    assert_eq!(
        (swc.wr_id, swc.status, swc.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(swc.byte_len, 1000);
    let wc = poll_1(&b.cq, "UD receive");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(wc.byte_len, 40 + 1000, "byte_len counts the GRH");
    assert_eq!(wc.src_qp, a.qp.qp_num());
    assert_eq!(wc.qp_num, b.qp.qp_num());
    assert!(
        wc.wc_flags.contains(WcFlags::GRH | WcFlags::WITH_IMM),
        "{wc:?}"
    );
    assert_eq!(wc.imm_data, 0xfeed_beef);
    assert_eq!(mr_bytes(&b.mr, 40, 1000), msg, "data starts at offset 40");
    // The GRH area: 20 zero bytes, then the IPv4 header the datagram came with.
    let grh = mr_bytes(&b.mr, 0, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    let ip = etherparse::Ipv4HeaderSlice::from_slice(&grh[20..]).expect("an IPv4 header");
    assert_eq!(ip.source(), [127, 10, FILE, 1]);
    assert_eq!(ip.destination(), [127, 10, FILE, 2]);
    assert_eq!(ip.protocol(), etherparse::IpNumber::UDP);
    assert!(ip.dont_fragment());
    assert_eq!(ip.identification(), 0, "softverbs senders use ID 0 (DF)");
    // BTH 12 + DETH 8 + ImmDt 4 + payload + ICRC 4, in UDP, in IP.
    assert_eq!(ip.total_len() as usize, 20 + 8 + 12 + 8 + 4 + 1000 + 4);
    assert_eq!(ip.header_checksum(), ip.to_header().calc_header_checksum());
    // Reply to the sender from the completion alone.
    let back = b.pd.create_ah_from_wc(&wc, &grh).unwrap();
    assert_eq!(back.attr().dgid, Gid::from_ip(test_ip(FILE, 1)));
    a.post_recv(9, 4096, 2048);
    let reply = pattern(2, 33);
    b.qp.post_send(&[b.send(2, &back, wc.src_qp, QKEY, 8192, &reply)])
        .unwrap();
    poll_1(&b.cq, "reply send");
    let rwc = poll_1(&a.cq, "reply receive");
    assert_eq!(
        (rwc.wr_id, rwc.byte_len, rwc.src_qp),
        (9, 40 + 33, b.qp.qp_num())
    );
    assert_eq!(mr_bytes(&a.mr, 4096 + 40, 33), reply);
}

#[test]
fn wrong_qkey_is_dropped_and_counted_and_high_bit_uses_the_qps_own() {
    let (a, b) = ud_pair(3, 4);
    b.post_recv(1, 0, 256);
    let ah = a.ah_to(&b);
    a.qp.post_send(&[a.send(1, &ah, b.qp.qp_num(), QKEY ^ 1, 0, b"wrong key")])
        .unwrap();
    poll_1(
        &a.cq,
        "send with the wrong Q_Key still completes at the sender",
    );
    let counters = || {
        b.ctx
            .emulator()
            .unwrap()
            .qp_counters(b.qp.qp_num())
            .unwrap()
    };
    wait_until("the Q_Key violation to be counted", || {
        counters().qkey_violations == 1
    });
    assert_cq_empty(&b.cq, "a wrong Q_Key delivers nothing");
    // High bit set: the sending QP's own Q_Key (QKEY, the same as b's) goes on the wire.
    a.qp.post_send(&[a.send(2, &ah, b.qp.qp_num(), 0x8000_0000, 0, b"own key")])
        .unwrap();
    poll_1(&a.cq, "send");
    let wc = poll_1(&b.cq, "receive with the QP's own Q_Key");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 40 + 7)
    );
    assert_eq!(mr_bytes(&b.mr, 40, 7), b"own key");
}

#[test]
fn bad_input_is_refused_at_post_time() {
    let (a, b) = ud_pair(5, 6);
    let ah = a.ah_to(&b);
    let mtu = a.ctx.query_port(1).unwrap().active_mtu.bytes() as usize;
    // Larger than the MTU.
    let big = a.send(1, &ah, b.qp.qp_num(), QKEY, 0, &pattern(3, mtu + 1));
    let e = a.qp.post_send(&[big]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, libc::EINVAL));
    // Exactly the MTU is fine.
    let exact = a.send(2, &ah, b.qp.qp_num(), QKEY, 0, &pattern(3, mtu));
    a.qp.post_send(&[exact]).unwrap();
    assert_eq!(poll_1(&a.cq, "MTU-sized send").status, WcStatus::Success);
    // No destination, an unknown AH, an AH of another PD.
    let mut no_dest = SendWr::send(3, vec![a.mr.sge(0, 8).unwrap()]);
    assert_eq!(
        a.qp.post_send(&[no_dest.clone()])
            .unwrap_err()
            .error
            .errno(),
        libc::EINVAL
    );
    no_dest.ud = Some(softverbs::UdDest {
        ah: 0xdead,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: QKEY,
    });
    assert_eq!(
        a.qp.post_send(&[no_dest]).unwrap_err().error.errno(),
        libc::EINVAL
    );
    let other_pd = a.ctx.alloc_pd().unwrap();
    let foreign = other_pd
        .create_ah(&AhAttr {
            dgid: Gid::from_ip(test_ip(FILE, 6)),
            sgid_index: 1,
            port_num: 1,
            ..AhAttr::default()
        })
        .unwrap();
    let e =
        a.qp.post_send(&[a.send(4, &foreign, b.qp.qp_num(), QKEY, 0, b"x")])
            .unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL);
    // Opcodes UD does not have; the failing WR's index is reported.
    for opcode in [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicFetchAndAdd,
    ] {
        let ok = a.send(5, &ah, b.qp.qp_num(), QKEY, 0, b"12345678");
        let bad = SendWr {
            opcode,
            ..ok.clone()
        };
        let e = a.qp.post_send(&[ok, bad]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (1, libc::EINVAL), "{opcode:?}");
        poll_1(&a.cq, "the WR before the bad one was posted");
    }
}

#[test]
fn address_handles_check_the_gid() {
    let ctx = open_udp_device(FILE, 7);
    let pd = ctx.alloc_pd().unwrap();
    let attr = |gid: Gid, sgid_index: u8| AhAttr {
        dgid: gid,
        sgid_index,
        port_num: 1,
        ..AhAttr::default()
    };
    // An IPv6 GID is unreachable from an IPv4 device; a zero GID is no address.
    let v6: Gid = Gid::from_ip("fd00::1".parse().unwrap());
    assert_eq!(
        pd.create_ah(&attr(v6, 1)).err().unwrap().errno(),
        libc::EINVAL
    );
    assert_eq!(
        pd.create_ah(&attr(Gid::default(), 1))
            .err()
            .unwrap()
            .errno(),
        libc::EINVAL
    );
    // A GID index beyond the table.
    let v4 = Gid::from_ip(test_ip(FILE, 8));
    assert_eq!(
        pd.create_ah(&attr(v4, 9)).err().unwrap().errno(),
        libc::EINVAL
    );
    let ah = pd.create_ah(&attr(v4, 1)).unwrap();
    assert_eq!(ah.attr().dgid, v4);
    // A PD with an AH cannot be deallocated through the backend; once the AH is gone it can.
    let backend = ctx.backend();
    assert_eq!(
        backend.dealloc_pd(pd.id()).unwrap_err().errno(),
        libc::EBUSY
    );
    assert_eq!(
        backend.destroy_ah(0xbeef).unwrap_err().errno(),
        libc::ENOENT
    );
}

#[test]
fn a_too_small_receive_buffer_drops_the_datagram_and_keeps_the_wqe() {
    let (a, b) = ud_pair(9, 10);
    b.post_recv(1, 0, 40 + 10);
    let ah = a.ah_to(&b);
    a.qp.post_send(&[a.send(1, &ah, b.qp.qp_num(), QKEY, 0, &pattern(4, 11))])
        .unwrap();
    poll_1(&a.cq, "send");
    let counters = || {
        b.ctx
            .emulator()
            .unwrap()
            .qp_counters(b.qp.qp_num())
            .unwrap()
    };
    wait_until("the drop to be counted", || counters().dropped_packets == 1);
    assert_cq_empty(&b.cq, "an oversized datagram completes nothing");
    let fits = pattern(5, 10);
    a.qp.post_send(&[a.send(2, &ah, b.qp.qp_num(), QKEY, 0, &fits)])
        .unwrap();
    let wc = poll_1(&b.cq, "the same WQE takes the next datagram");
    assert_eq!((wc.wr_id, wc.byte_len), (1, 50));
    assert_eq!(mr_bytes(&b.mr, 40, 10), fits);
}

#[test]
fn many_datagrams_from_two_senders_each_report_their_source() {
    let b = UdSide::new(&open_udp_device(FILE, 11), QKEY);
    let a1 = UdSide::new(&open_udp_device(FILE, 12), QKEY);
    burn_qpns(&a1.ctx, 0);
    let ctx3 = open_udp_device(FILE, 13);
    burn_qpns(&ctx3, 5);
    let a2 = UdSide::new(&ctx3, QKEY);
    const N: u64 = 8;
    for i in 0..2 * N {
        b.post_recv(i, (i as usize) * 1024, 1024);
    }
    for (k, s) in [&a1, &a2].into_iter().enumerate() {
        let ah = s.ah_to(&b);
        for i in 0..N {
            let msg = pattern(100 * k as u64 + i, 64);
            let mut wr = s.send(i, &ah, b.qp.qp_num(), QKEY, (i as usize) * 64, &msg);
            wr.imm_data = (k as u32) << 16 | i as u32;
            wr.opcode = WrOpcode::SendWithImm;
            s.qp.post_send(&[wr]).unwrap();
        }
        poll_n(&s.cq, N as usize, "sends");
    }
    let got = poll_n(&b.cq, 2 * N as usize, "receives");
    let mut seen = std::collections::HashSet::new();
    for wc in got {
        let (k, i) = ((wc.imm_data >> 16) as u64, (wc.imm_data & 0xffff) as u64);
        let sender = if k == 0 { &a1 } else { &a2 };
        assert_eq!(wc.src_qp, sender.qp.qp_num(), "{wc:?}");
        let data = mr_bytes(&b.mr, wc.wr_id as usize * 1024 + 40, 64);
        assert_eq!(data, pattern(100 * k + i, 64), "{wc:?}");
        assert!(seen.insert(wc.wr_id), "WQE {} used twice", wc.wr_id);
    }
}
