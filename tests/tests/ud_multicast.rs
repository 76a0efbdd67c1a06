//! UD multicast over UDP loopback (`ibv_attach_mcast` / `ibv_detach_mcast`): a datagram to
//! a group (AH to the IPv4-mapped multicast GID, remote QPN 0xFFFFFF) reaches every UD QP
//! attached to it, on every device, each through the Q_Key check; a detached QP gets no
//! more; the bad inputs get the errno the kernel gives.

use std::net::Ipv4Addr;
use std::time::Duration;

use softverbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, Gid, Mr, Pd, Qp, QpType, RecvWr, SendWr, WcFlags,
    WcOpcode, WcStatus,
};
use softverbs_conformance::*;
use softverbs_testkit::qp_cap;

const FILE: u8 = 36;
const QKEY: u32 = 0x0123_4567;
const MULTICAST_QPN: u32 = 0xff_ffff;

/// This file's groups: 239.36.0.`n`, so that no other test (or a demo) shares them.
fn group(n: u8) -> Gid {
    Gid::from_ip(Ipv4Addr::new(239, FILE, 0, n).into())
}

struct Member {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

impl Member {
    fn new(ctx: &Context, qkey: u32) -> Member {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = ud_qp(&pd, &cq, &cq, qp_cap(16, 1), qkey);
        let mr = pd.register(buffer(8192), AccessFlags::LOCAL_WRITE).unwrap();
        Member { pd, cq, qp, mr }
    }

    fn post_recv(&self, wr_id: u64) {
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: vec![self.mr.sge(0, 4096).unwrap()],
            }])
            .unwrap();
    }

    fn ah_to_group(&self, gid: Gid) -> Ah {
        self.pd
            .create_ah(&AhAttr {
                dgid: gid,
                sgid_index: 1,
                port_num: 1,
                hop_limit: 1,
                ..AhAttr::default()
            })
            .unwrap()
    }

    fn send_to_group(&self, ah: &Ah, wr_id: u64, data: &[u8]) {
        self.mr.write(4096, data).unwrap();
        let mut wr = SendWr::send(wr_id, vec![self.mr.sge(4096, data.len() as u32).unwrap()]);
        wr.ud = Some(ah.dest(MULTICAST_QPN, QKEY));
        self.qp.post_send(&[wr]).unwrap();
        let wc = poll_1(&self.cq, "multicast send");
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
    }

    fn received(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(40, &mut v).unwrap();
        v
    }
}

/// Waits long enough for a datagram that is not coming (it would have arrived with the
/// one another member got), then asserts that `cq` is still empty.
fn assert_nothing_arrives(cq: &Cq, what: &str) {
    std::thread::sleep(Duration::from_millis(200));
    assert_cq_empty(cq, what);
}

#[test]
fn a_group_send_reaches_every_attached_qp_on_every_device_and_a_detached_one_no_more() {
    let ctx_a = open_udp_device(FILE, 1);
    let ctx_b = open_udp_device(FILE, 2);
    let attr = ctx_b.query_device().unwrap();
    assert_eq!(
        (attr.max_mcast_grp, attr.max_mcast_qp_attach),
        (32, 32),
        "a UDP device serves multicast"
    );
    assert_eq!(attr.max_total_mcast_qp_attach, 32 * 32);
    let gid = group(1);
    let sender = Member::new(&ctx_a, QKEY);
    // Two members on another device and one on the sender's own.
    let b1 = Member::new(&ctx_b, QKEY);
    let b2 = Member::new(&ctx_b, QKEY);
    let a1 = Member::new(&ctx_a, QKEY);
    for m in [&b1, &b2, &a1] {
        m.qp.attach_mcast(&gid).unwrap();
        m.post_recv(7);
        m.post_recv(8);
    }
    // Attaching twice is not an error (as rxe) and changes nothing.
    b1.qp.attach_mcast(&gid).unwrap();

    let ah = sender.ah_to_group(gid);
    let msg = pattern(1, 1000);
    sender.send_to_group(&ah, 1, &msg);
    for (m, what) in [(&b1, "b1"), (&b2, "b2"), (&a1, "a1")] {
        let wc = poll_1(&m.cq, what);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (7, WcStatus::Success, WcOpcode::Recv),
            "{what}: {wc:?}"
        );
        assert_eq!(wc.byte_len, 40 + 1000, "{what}");
        assert_eq!(wc.src_qp, sender.qp.qp_num(), "{what}");
        assert_eq!(wc.qp_num, m.qp.qp_num(), "{what}");
        assert!(wc.wc_flags.contains(WcFlags::GRH), "{what}");
        assert_eq!(m.received(1000), msg, "{what}: the data after the GRH");
        // The GRH area's IPv4 header: from the sender's device to the group.
        let mut grh = [0u8; 40];
        m.mr.read(0, &mut grh).unwrap();
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&grh[20..]).unwrap();
        assert_eq!(ip.source(), [127, 10, FILE, 1], "{what}");
        assert_eq!(ip.destination(), [239, FILE, 0, 1], "{what}");
        assert_cq_empty(&m.cq, what);
    }

    // b2 leaves: the next datagram reaches b1 and a1 only.
    b2.qp.detach_mcast(&gid).unwrap();
    let msg2 = pattern(2, 64);
    sender.send_to_group(&ah, 2, &msg2);
    for (m, what) in [(&b1, "b1"), (&a1, "a1")] {
        let wc = poll_1(&m.cq, what);
        assert_eq!((wc.wr_id, wc.status), (8, WcStatus::Success), "{what}");
        assert_eq!(m.received(64), msg2, "{what}");
    }
    assert_nothing_arrives(&b2.cq, "b2 after its detach");
    // Detaching what is not attached: EINVAL, as rxe.
    assert_eq!(b2.qp.detach_mcast(&gid).unwrap_err().errno(), 22);
}

#[test]
fn a_member_with_another_q_key_does_not_receive() {
    let ctx_a = open_udp_device(FILE, 3);
    let ctx_b = open_udp_device(FILE, 4);
    let gid = group(2);
    let sender = Member::new(&ctx_a, QKEY);
    let right = Member::new(&ctx_b, QKEY);
    let wrong = Member::new(&ctx_b, QKEY ^ 1);
    for m in [&right, &wrong] {
        m.qp.attach_mcast(&gid).unwrap();
        m.post_recv(1);
    }
    sender.send_to_group(&sender.ah_to_group(gid), 1, b"q_key");
    let wc = poll_1(&right.cq, "the member with the group's Q_Key");
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(right.received(5), b"q_key");
    assert_nothing_arrives(&wrong.cq, "the member with another Q_Key");
}

#[test]
fn bad_attaches_get_einval_and_the_group_limit_enomem() {
    let ctx = open_udp_device(FILE, 5);
    let m = Member::new(&ctx, QKEY);
    let errno = |r: softverbs::VerbsResult<()>| r.unwrap_err().errno();
    // A unicast GID, and a unicast IPv6 GID.
    assert_eq!(errno(m.qp.attach_mcast(&test_gid(5))), 22);
    assert_eq!(errno(m.qp.attach_mcast(&"fe80::1".parse().unwrap())), 22);
    // An IPv6 group on an IPv4 device.
    assert_eq!(errno(m.qp.attach_mcast(&"ff12::1".parse().unwrap())), 22);
    // Only UD QPs join groups.
    let rc =
        m.pd.qp_builder()
            .qp_type(QpType::Rc)
            .build(&m.cq, &m.cq)
            .unwrap();
    assert_eq!(errno(rc.attach_mcast(&group(3))), 22);
    // The device's groups are bounded.
    for n in 0..32 {
        m.qp.attach_mcast(&group(100 + n)).unwrap();
    }
    assert_eq!(errno(m.qp.attach_mcast(&group(200))), 12, "ENOMEM");
    // A group it left makes room again.
    m.qp.detach_mcast(&group(100)).unwrap();
    m.qp.attach_mcast(&group(200)).unwrap();
}

fn test_gid(n: u8) -> Gid {
    Gid::from_ip(test_ip(FILE, n))
}
