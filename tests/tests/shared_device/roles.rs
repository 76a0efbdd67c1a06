//! The child roles besides RC clients: a UD peer, a ring member with 16 QPs, and a
//! process that only opens the device.

use std::net::IpAddr;

use softverbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, Mr, Qp, RcConnectOptions, RecvWr, SendWr, WcFlags,
    WcOpcode, WcStatus,
};
use softverbs_conformance::{pattern, poll_1, register_mr, ud_qp};
use softverbs_testkit::qp_cap;

use super::child::{field, hear, num, say, wait_for_parent, Dev};
use super::rc::{endpoint_of, qp_on, slot_of};

/// Message sizes of the UD test (up to the 4096-byte MTU of a loopback device).
pub const UD_SIZES: [usize; 5] = [1, 64, 1000, 2048, 4096];
const QKEY: u32 = 0x1111_2222;
/// Bytes of a UD receive slot: the 40-byte GRH area and the largest message.
const UD_SLOT: usize = 8192;

/// A UD QP, its CQ and MR, and an address handle to its own device (where the peer is).
pub struct UdEnd {
    pub qp: Qp,
    send_cq: Cq,
    recv_cq: Cq,
    mr: Mr,
    ah: Ah,
}

impl UdEnd {
    pub fn new(ctx: &Context) -> UdEnd {
        let pd = ctx.alloc_pd().unwrap();
        let send_cq = ctx.create_cq(64).unwrap();
        let recv_cq = ctx.create_cq(64).unwrap();
        let qp = ud_qp(&pd, &send_cq, &recv_cq, qp_cap(16, 1), QKEY);
        let mr = register_mr(&pd, 2 * UD_SIZES.len() * UD_SLOT, AccessFlags::LOCAL_WRITE);
        let ah = pd
            .create_ah(&AhAttr {
                dgid: ctx.query_gid(1, 1).unwrap().gid,
                sgid_index: 1,
                port_num: 1,
                hop_limit: 64,
                ..AhAttr::default()
            })
            .unwrap();
        UdEnd {
            qp,
            send_cq,
            recv_cq,
            mr,
            ah,
        }
    }

    /// Posts a receive into slot `slot`.
    pub fn post_recv(&self, wr_id: u64, slot: usize) {
        let sge = self.mr.sge(slot * UD_SLOT, UD_SLOT as u32).unwrap();
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: vec![sge],
            }])
            .unwrap();
    }

    /// Sends `data` to QP `qpn` of the device and waits for its completion.
    pub fn send(&self, wr_id: u64, qpn: u32, data: &[u8]) {
        // The send half of the MR, after the receive slots.
        let at = UD_SIZES.len() * UD_SLOT;
        self.mr.write(at, data).unwrap();
        let mut wr = SendWr::send(wr_id, vec![self.mr.sge(at, data.len() as u32).unwrap()]);
        wr.ud = Some(self.ah.dest(qpn, QKEY));
        self.qp.post_send(&[wr]).unwrap();
        let wc = poll_1(&self.send_cq, "UD send");
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
    }

    /// Waits for receive `wr_id` in slot `slot`: from QP `src_qp`, with a GRH naming `ip`
    /// as source and destination, carrying `want`.
    pub fn expect_recv(&self, wr_id: u64, slot: usize, src_qp: u32, want: &[u8], ip: IpAddr) {
        let wc = poll_1(&self.recv_cq, "UD receive");
        assert_eq!(
            (
                wc.wr_id,
                wc.status,
                wc.opcode,
                wc.byte_len as usize,
                wc.src_qp,
                wc.qp_num
            ),
            (
                wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                40 + want.len(),
                src_qp,
                self.qp.qp_num()
            )
        );
        assert!(wc.wc_flags.contains(WcFlags::GRH), "{wc:?}");
        let mut got = vec![0u8; 40 + want.len()];
        self.mr.read(slot * UD_SLOT, &mut got).unwrap();
        let IpAddr::V4(v4) = ip else {
            panic!("IPv4 devices")
        };
        // The IPv4 header in the GRH's last 20 bytes: source and destination.
        assert_eq!(&got[32..36], &v4.octets(), "GRH source");
        assert_eq!(&got[36..40], &v4.octets(), "GRH destination");
        assert_eq!(&got[40..], want, "UD message {wr_id}");
    }
}

/// Role `ud`: receives each message of [`UD_SIZES`], checks it, and answers with another.
pub fn ud_role() {
    let dev = Dev::from_env();
    let ctx = dev.open();
    let ud = UdEnd::new(&ctx);
    for i in 0..UD_SIZES.len() {
        ud.post_recv(i as u64, i);
    }
    say(&format!("ud qpn={} slot={}", ud.qp.qp_num(), slot_of(&ctx)));
    let line = hear().expect("the parent's QPN");
    let parent_qpn = num(&line, "qpn") as u32;
    for (i, &len) in UD_SIZES.iter().enumerate() {
        ud.expect_recv(i as u64, i, parent_qpn, &pattern(i as u64, len), dev.ip);
        ud.send(i as u64, parent_qpn, &pattern(100 + i as u64, len));
    }
    say("ok");
    wait_for_parent();
}

/// QPs of each ring member: the first half connect to the next member's second half.
pub const RING_QPS: usize = 16;
const RING_PSN: u32 = 0x10_0000;
const RING_MSG: usize = 2000;

/// Role `ring`: 16 RC QPs; QP j < 8 connects to QP 8 + j of the next member and SENDs to
/// it; QP 8 + j connects to QP j of the previous member and checks what it receives.
pub fn ring_role() {
    let ctx = Dev::from_env().open();
    let slot = slot_of(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qps: Vec<Qp> = (0..RING_QPS).map(|_| qp_on(&pd, &cq, 4)).collect();
    let mr = register_mr(&pd, RING_QPS * 4096, AccessFlags::LOCAL_WRITE);
    let gid = qps[0].endpoint(RING_PSN, 1).unwrap().gid;
    let list: Vec<String> = qps.iter().map(|q| format!("{:#x}", q.qp_num())).collect();
    say(&format!("eps slot={slot} qpns={}", list.join(",")));
    let line = hear().expect("the neighbours' QPNs");
    let peers =
        |key: &str| -> Vec<String> { field(&line, key).split(',').map(str::to_string).collect() };
    let (next, prev) = (peers("next"), peers("prev"));
    let prev_slot = num(&line, "prev_slot");
    let opts = RcConnectOptions::default();
    for j in 0..8 {
        for (qp, peer) in [(&qps[j], &next[j]), (&qps[8 + j], &prev[j])] {
            let ep = endpoint_of(&format!("qpn={peer} psn={RING_PSN:#x} gid={gid}"));
            qp.connect_rc(RING_PSN, &ep, &opts).unwrap();
        }
    }
    // A SEND that comes before its receive is posted gets an RNR NAK, and is retried.
    for (j, qp) in qps.iter().enumerate().skip(8) {
        qp.post_recv(&[RecvWr {
            wr_id: j as u64,
            sg_list: vec![mr.sge(j * 4096, 4096).unwrap()],
        }])
        .unwrap();
    }
    for (j, qp) in qps.iter().enumerate().take(8) {
        mr.write(
            j * 4096,
            &pattern(u64::from(slot) * 100 + j as u64, RING_MSG),
        )
        .unwrap();
        qp.post_send(&[SendWr::send(
            j as u64,
            vec![mr.sge(j * 4096, RING_MSG as u32).unwrap()],
        )])
        .unwrap();
    }
    let wcs = cq
        .poll_wait(RING_QPS, softverbs_conformance::WAIT * 6)
        .unwrap();
    assert_eq!(wcs.len(), RING_QPS, "8 sends and 8 receives: {wcs:?}");
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let j = wc.wr_id as usize;
        assert_eq!(wc.qp_num, qps[j].qp_num(), "{wc:?}");
        if wc.opcode == WcOpcode::Recv {
            assert!(j >= 8);
            assert_eq!(wc.byte_len as usize, RING_MSG);
            let mut got = vec![0u8; RING_MSG];
            mr.read(j * 4096, &mut got).unwrap();
            assert_eq!(got, pattern(prev_slot * 100 + (j - 8) as u64, RING_MSG));
        }
    }
    say("ok");
    wait_for_parent();
}

/// Role `plain`: opens the device, says its slot, and keeps it open until told to go.
pub fn plain_role() {
    let ctx = Dev::from_env().open();
    say(&format!("open slot={}", slot_of(&ctx)));
    wait_for_parent();
}

/// Role `exit`: opens the device, says its slot, and when told to go calls `exit` with the
/// device still open, as a C program on the drop-in libraries does.
pub fn exit_role() {
    let ctx = Dev::from_env().open();
    say(&format!("open slot={}", slot_of(&ctx)));
    wait_for_parent();
    std::process::exit(0);
}

/// Role `fork`: opens the device, makes a QP, then forks. The child finds every verbs call
/// on the inherited objects refused with EPERM, opens the device again as a member of its
/// own (another slot, its QPNs in it) and exits; then this process, whose slot the child
/// must not have disturbed, makes a second QP.
pub fn fork_role() {
    let dev = Dev::from_env();
    let ctx = dev.open();
    let slot = slot_of(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = qp_on(&pd, &cq, 4);
    // SAFETY: the child only makes verbs calls, prints, and leaves with _exit: no lock
    // another thread of this process could have held at the fork is taken (the engine
    // thread holds none it shares with these calls while idle; stdout is this thread's).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let errno = |r: Result<(), i32>| r.err().unwrap_or(0);
        let post = errno(
            qp.post_send(&[SendWr::send(1, Vec::new())])
                .map_err(|e| e.error.errno()),
        );
        let poll = errno(
            cq.poll(&mut [Default::default(); 1])
                .map(drop)
                .map_err(|e| e.errno()),
        );
        let create = errno(ctx.create_cq(4).map(drop).map_err(|e| e.errno()));
        // By number, to a QP that does not exist: refused as a child before any lookup.
        let by_number = errno(
            ctx.backend()
                .post_send(qp.qp_num() ^ 0xff, &[SendWr::send(2, Vec::new())])
                .map_err(|e| e.error.errno()),
        );
        let again = dev.open();
        let own_slot = slot_of(&again);
        let pd = again.alloc_pd().unwrap();
        let cq = again.create_cq(4).unwrap();
        let own = qp_on(&pd, &cq, 4);
        say(&format!(
            "child post={post} poll={poll} create={create} by_number={by_number} slot={own_slot} \
             qpn={:#x}",
            own.qp_num()
        ));
        // SAFETY: ends the child without running the parent's destructors or atexit hooks.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    let second = qp_on(&pd, &cq, 4);
    assert_eq!(second.qp_num() >> 16, u32::from(slot));
    say(&format!("parent slot={slot} qpn={:#x}", qp.qp_num()));
    wait_for_parent();
}
