//! Engine tests that need a whole device: the GSI slot of the receive pipeline and the
//! device-level timers, on a device of an in-process channel network.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::config::DeviceConfig;
use super::context::EmuContext;
use super::device::Device;
use super::engine_thread::DeviceRuntime;
use super::gsi::GsiHandler;
use crate::net::channel::{ChannelLink, ChannelNetwork};
use crate::net::Link;
use crate::transport::{OutPacket, PathInfo};
use crate::wire::{BthRepr, DethRepr, Opcode, Psn, RoceRepr};

const DEVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const PEER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));

/// A device on a fresh channel network, and a raw endpoint of that network to send from.
pub(super) fn device_and_peer() -> (EmuContext, ChannelLink) {
    let net = ChannelNetwork::new();
    let link = net.attach(SocketAddr::new(DEVICE_IP, 4791)).unwrap();
    let peer = net.attach(SocketAddr::new(PEER_IP, 4791)).unwrap();
    let device = Device::new(DeviceConfig::new("engine-test", DEVICE_IP), Box::new(link));
    let runtime = DeviceRuntime::start(Arc::new(device)).unwrap();
    (EmuContext::new(Arc::new(runtime)).unwrap(), peer)
}

/// Sends a UD SEND ONLY to QP `qpn` of the device, from the peer.
fn send_ud(peer: &ChannelLink, qpn: u32, payload: &[u8]) {
    send_ud_with(peer, qpn, payload, |_| {});
}

/// Like [`send_ud`], with the BTH as `edit` leaves it.
fn send_ud_with(peer: &ChannelLink, qpn: u32, payload: &[u8], edit: impl FnOnce(&mut BthRepr)) {
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, qpn, Psn::new(7));
    edit(&mut bth);
    let mut repr = RoceRepr::new(bth, payload);
    repr.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 1,
    });
    let path = PathInfo {
        dst_ip: DEVICE_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc001,
    };
    let mut packet = OutPacket::build(&path, &repr).unwrap();
    peer.send(&mut packet).unwrap();
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Records what reached QP1.
#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(u32, Vec<u8>, SocketAddr)>>,
}

impl GsiHandler for Recorder {
    fn on_gsi_packet(&self, packet: &RoceRepr<'_>, from: SocketAddr) {
        let src_qp = packet.deth.map_or(0, |d| d.src_qp);
        self.got
            .lock()
            .push((src_qp, packet.payload.to_vec(), from));
    }
}

#[test]
fn qp1_packets_are_counted_and_dropped_until_a_gsi_handler_takes_them() {
    let (ctx, peer) = device_and_peer();
    let counters = ctx.counters();
    send_ud(&peer, 1, b"cm mad 1");
    wait_until("the unhandled GSI packet", || {
        counters.gsi_unhandled.load(Ordering::Relaxed) == 1
    });
    assert_eq!(counters.unknown_qp.load(Ordering::Relaxed), 0);

    let recorder = Arc::new(Recorder::default());
    ctx.set_gsi_handler(Some(recorder.clone()));
    send_ud(&peer, 1, b"cm mad 2");
    wait_until("the handled GSI packet", || !recorder.got.lock().is_empty());
    let got = recorder.got.lock().clone();
    assert_eq!(
        got,
        [(1, b"cm mad 2".to_vec(), SocketAddr::new(PEER_IP, 0xc001))]
    );
    assert_eq!(counters.gsi_delivered.load(Ordering::Relaxed), 1);
    assert_eq!(counters.gsi_unhandled.load(Ordering::Relaxed), 1);

    // A QP number nobody has is still an unknown QP.
    send_ud(&peer, 0x4242, b"nobody");
    wait_until("the unknown QP", || {
        counters.unknown_qp.load(Ordering::Relaxed) == 1
    });
    ctx.set_gsi_handler(None);
    send_ud(&peer, 1, b"cm mad 3");
    wait_until("unhandled again", || {
        counters.gsi_unhandled.load(Ordering::Relaxed) == 2
    });
    assert_eq!(recorder.got.lock().len(), 1);
}

#[test]
fn device_timers_run_on_the_engine_thread_once_due_and_not_once_cancelled() {
    let (ctx, _peer) = device_and_peer();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let job = |tag: u32| -> super::TimerJob {
        let fired = fired.clone();
        Box::new(move |_now| {
            let thread = std::thread::current().name().map(str::to_string);
            fired.lock().push((tag, thread));
        })
    };
    let started = Instant::now();
    ctx.schedule_device_timer(Duration::from_millis(20), job(2))
        .unwrap();
    let cancelled = ctx
        .schedule_device_timer(Duration::from_millis(10), job(9))
        .unwrap();
    ctx.schedule_device_timer(Duration::from_millis(5), job(1))
        .unwrap();
    assert!(ctx.cancel_device_timer(cancelled));
    wait_until("both timers", || fired.lock().len() == 2);
    assert!(started.elapsed() >= Duration::from_millis(20));
    let engine = Some("softverbs-engine-test".to_string());
    assert_eq!(*fired.lock(), [(1, engine.clone()), (2, engine)]);
    assert!(!ctx.cancel_device_timer(cancelled));
}

#[test]
fn a_gsi_packet_sent_from_qp1_reaches_the_peer_whole_with_a_valid_icrc() {
    let (ctx, peer) = device_and_peer();
    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::UD_SEND_ONLY, 1, Psn::new(3)),
        b"a cm mad",
    );
    repr.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 1,
    });
    let path = PathInfo {
        dst_ip: PEER_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc0de,
    };
    ctx.send_gsi_packet(&path, &repr).unwrap();
    let got = peer
        .recv(Duration::from_secs(10))
        .unwrap()
        .expect("the GSI packet");
    assert_eq!(got.src, SocketAddr::new(DEVICE_IP, 0xc0de));
    assert!(crate::net::icrc_check::icrc_ok(&got), "a valid ICRC");
    let (parsed, _icrc) = RoceRepr::parse(&got.payload).unwrap();
    assert_eq!(parsed.bth.dest_qp, 1);
    assert_eq!(
        parsed.deth.map(|d| (d.qkey, d.src_qp)),
        Some((0x8001_0000, 1))
    );
    assert_eq!(parsed.payload, b"a cm mad");

    // A repr the opcode table refuses (a UD SEND without its DETH) is an error, not a packet.
    repr.deth = None;
    assert!(ctx.send_gsi_packet(&path, &repr).is_err());
}

/// A BTH of transport version other than 0, or a P_Key outside the port's partition, is
/// dropped by the pipeline before any QP (here QP1) sees it, and counted under its reason;
/// the limited member P_Key 0x7FFF goes through (issue 23, defect 3).
#[test]
fn bad_transport_versions_and_partitions_are_counted_and_dropped() {
    let (ctx, peer) = device_and_peer();
    let counters = ctx.counters();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    send_ud_with(&peer, 1, b"tver 15", |b| b.tver = 15);
    wait_until("the bad version", || load(&counters.bad_version) == 1);
    for pkey in [0x0000, 0x8000, 0x1234] {
        send_ud_with(&peer, 1, b"bad pkey", |b| b.pkey = pkey);
    }
    wait_until("the bad P_Keys", || load(&counters.bad_pkey) == 3);
    assert_eq!(load(&counters.gsi_unhandled), 0, "none reached QP1");
    send_ud_with(&peer, 1, b"limited member", |b| b.pkey = 0x7fff);
    wait_until("the limited member", || load(&counters.gsi_unhandled) == 1);
    assert_eq!(
        (load(&counters.bad_version), load(&counters.bad_pkey)),
        (1, 3)
    );
}

/// The race of a packet with `destroy_qp` (kernel rxe's `qp->valid`): the receive pipeline
/// looked the QP up before the destroy and takes its lock after it. The packet must not
/// take the SRQ's receive buffer (nor scatter into memory the application frees once
/// `destroy_qp` returned); the skipped call is counted.
#[test]
fn a_packet_looked_up_before_destroy_qp_does_nothing_after_it() {
    use softverbs_api::{
        AccessFlags, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType, SrqAttr, VerbsContext,
        WorkCompletion,
    };
    let (ctx, _peer) = device_and_peer();
    let pd = ctx.alloc_pd().unwrap();
    let (cq, _) = ctx.create_cq(8, None).unwrap();
    let srq_attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = ctx.create_srq(pd, &srq_attr).unwrap();
    let buf = crate::memory::RdmaBuffer::new(256).unwrap();
    let keys = ctx
        .reg_mr(pd, buf.addr(), 256, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let recv = softverbs_testkit::recv_one(9, buf.addr(), 256, keys.lkey);
    ctx.post_srq_recv(srq, &[recv]).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: softverbs_testkit::qp_cap(4, 1),
        sq_sig_all: false,
    };
    let (qpn, _) = ctx.create_qp(pd, &init).unwrap();
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: 0x8001_0000,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    ctx.modify_qp(qpn, &attr, mask).unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..attr
    };
    ctx.modify_qp(qpn, &rtr, QpAttrMask::STATE).unwrap();

    // What the receive pipeline does before it locks the QP.
    let dev = ctx.dev();
    let entry = dev.qps.read().get(&qpn).cloned().unwrap();
    ctx.destroy_qp(qpn).unwrap();

    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::UD_SEND_ONLY, qpn, Psn::new(7)),
        b"late",
    );
    repr.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 0x77,
    });
    let rx = crate::transport::NetHeader {
        src: PEER_IP,
        dst: DEVICE_IP,
        hop_limit: 64,
        traffic_class: 0,
        ipv4_identification: 0,
        flow_label: 0,
        udp_payload_len: 64,
    };
    let ran = dev.on_qp(&entry, Some(rx), |qp, env, out| {
        qp.on_packet(&repr, env, out);
    });
    assert_eq!(ran, None, "no transport call on a destroyed QP");
    assert_eq!(dev.counters.destroyed_qp_calls.load(Ordering::Relaxed), 1);
    let mut wc = [WorkCompletion::default()];
    assert_eq!(
        ctx.poll_cq(cq, &mut wc).unwrap(),
        0,
        "the SRQ buffer untouched"
    );
    assert_eq!(buf.to_vec()[40..44], [0; 4], "no byte scattered");
    // The timer path (a lazy ACK, a retransmission) is skipped the same way.
    assert_eq!(dev.on_qp(&entry, None, |_, _, _| ()), None);
    assert_eq!(dev.counters.destroyed_qp_calls.load(Ordering::Relaxed), 2);
}

/// The datagram the peer sends along `path` with `repr`, its ICRC included.
fn from_peer(path: &PathInfo, repr: &RoceRepr<'_>) -> Vec<u8> {
    let mut packet = OutPacket::build(path, repr).unwrap();
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (PEER_IP, DEVICE_IP) else {
        unreachable!("IPv4 test addresses")
    };
    let icrc = crate::wire::IcrcContext {
        ip: crate::wire::IpHeaderInfo::V4 {
            src,
            dst,
            identification: 0,
            flags_fragment: 0x4000,
        },
        udp_src_port: path.udp_src_port,
        udp_dst_port: path.udp_dst_port,
    };
    crate::wire::write_icrc(&icrc, &mut packet.bytes);
    packet.bytes
}

/// `datagram` (from [`from_peer`] along `path`) as the device's link hands it over.
fn view_from_peer<'a>(path: &PathInfo, datagram: &'a [u8]) -> crate::net::DatagramView<'a> {
    crate::net::DatagramView {
        src: SocketAddr::new(PEER_IP, path.udp_src_port),
        dst: SocketAddr::new(DEVICE_IP, path.udp_dst_port),
        payload: datagram,
        ipv4_identification: Some(0),
    }
}

/// The receiver's last QP: a datagram for it finds it without the table, one for a QP
/// destroyed since does not reach the old QP and lets its entry go, and a destroy lets go
/// of the entry the device's receiver kept.
#[test]
fn the_receivers_last_qp_is_used_while_it_lives_and_let_go_once_destroyed() {
    let (ctx, _peer) = device_and_peer();
    let (_, _, qpn) = rc_qp(&ctx);
    let dev = ctx.dev();
    let entry = dev.qps.read().get(&qpn).cloned().unwrap();
    let path = PathInfo {
        dst_ip: DEVICE_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc005,
    };
    let send = from_peer(
        &path,
        &RoceRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, qpn, Psn::new(0)), b"x"),
    );
    let delivered = || dev.counters.delivered.load(Ordering::Relaxed);
    let unknown = || dev.counters.unknown_qp.load(Ordering::Relaxed);

    let mut last = super::qp_entry::LastQp::default();
    dev.receive(view_from_peer(&path, &send), &mut last);
    dev.receive(view_from_peer(&path, &send), &mut last);
    assert_eq!((delivered(), unknown()), (2, 0), "both reached the QP");
    assert_eq!(
        Arc::strong_count(&entry),
        3,
        "the table, this test and the last QP"
    );

    // The device's own receiver keeps the same; a destroy lets go of it at once.
    dev.receive(view_from_peer(&path, &send), &mut dev.rx_lock.lock().qp);
    assert_eq!(Arc::strong_count(&entry), 4);
    softverbs_api::VerbsContext::destroy_qp(&ctx, qpn).unwrap();
    assert_eq!(Arc::strong_count(&entry), 2, "this test and `last`");

    dev.receive(view_from_peer(&path, &send), &mut last);
    assert_eq!((delivered(), unknown()), (3, 1), "not to the destroyed QP");
    assert_eq!(Arc::strong_count(&entry), 1, "let go at the lookup");
}

/// A PD, a CQ of 8 and an RC QP in RESET on it, of `ctx`: (PD, CQ, QP number).
pub(super) fn rc_qp(ctx: &EmuContext) -> (u32, u32, u32) {
    use softverbs_api::{QpInitAttr, QpType, VerbsContext};
    let pd = ctx.alloc_pd().unwrap();
    let (cq, _) = ctx.create_cq(8, None).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: softverbs_testkit::qp_cap(4, 1),
        sq_sig_all: false,
    };
    let (qpn, _) = ctx.create_qp(pd, &init).unwrap();
    (pd, cq, qpn)
}

/// ACKs an application thread deferred (to send them with its next post) leave before its
/// QP changes state, before the QP goes, and ahead of a CM message: a peer whose last SEND
/// before a disconnect still waited for its ACK when the DREQ came would complete it with a
/// flush error.
#[test]
fn deferred_acks_leave_before_a_state_change_a_destroy_and_a_cm_message() {
    use softverbs_api::{QpAttr, QpAttrMask, QpState, VerbsContext};
    let (ctx, peer) = device_and_peer();
    let (_, _, qpn) = rc_qp(&ctx);
    let dev = ctx.dev();
    let defer_ack = |psn: u32| dev.deferred_acks.defer(vec![ack_to_peer(0x11, psn)]);
    // The peer's next datagram, at once: what left before the call returned.
    let next_psn = || {
        let (opcode, _, psn) = next_at_peer(&peer);
        (opcode, psn)
    };

    defer_ack(5);
    let init_attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    ctx.modify_qp(qpn, &init_attr, mask).unwrap();
    assert_eq!(next_psn(), (0x11, 5), "sent by modify_qp");

    defer_ack(6);
    let mut mad = RoceRepr::new(BthRepr::new(Opcode::UD_SEND_ONLY, 1, Psn::new(9)), b"cm");
    mad.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 1,
    });
    let path = PathInfo {
        dst_ip: PEER_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc002,
    };
    ctx.send_gsi_packet(&path, &mad).unwrap();
    assert_eq!(next_psn(), (0x11, 6), "the ACK ahead of the CM message");
    assert_eq!(next_psn().0, Opcode::UD_SEND_ONLY.0);

    defer_ack(7);
    ctx.destroy_qp(qpn).unwrap();
    assert_eq!(next_psn(), (0x11, 7), "sent by destroy_qp");
    assert!(!dev.deferred_acks.pending());
}

/// An RC QP of `ctx` (from [`rc_qp`]) moved to RTS towards QP 0x77 of the peer, and a
/// registered 64-byte buffer: (CQ, QP number, buffer, its lkey).
fn rc_qp_to_peer(ctx: &EmuContext) -> (u32, u32, crate::memory::RdmaBuffer, u32) {
    use softverbs_api::{AccessFlags, Gid, VerbsContext};
    use softverbs_testkit::{ah_to, RcMoves};
    let (pd, cq, qpn) = rc_qp(ctx);
    let buf = crate::memory::RdmaBuffer::new(64).unwrap();
    let keys = ctx
        .reg_mr(pd, buf.addr(), 64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let moves = RcMoves {
        dest_qp_num: 0x77,
        ah_attr: ah_to(Gid::from_ip(PEER_IP)),
        ..RcMoves::default()
    };
    for (attr, mask) in moves.all() {
        ctx.modify_qp(qpn, &attr, mask).unwrap();
    }
    (cq, qpn, buf, keys.lkey)
}

/// An RC ACKNOWLEDGE of `psn` to QP `dest_qp` of the peer, as the device's responder
/// builds one.
fn ack_to_peer(dest_qp: u32, psn: u32) -> OutPacket {
    let path = PathInfo {
        dst_ip: PEER_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc002,
    };
    let mut repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, dest_qp, Psn::new(psn)),
        &[],
    );
    repr.aeth = Some(crate::wire::AethRepr::ack(psn));
    OutPacket::build(&path, &repr).unwrap()
}

/// The peer's next datagram, at once (what left before the last call returned): its BTH
/// opcode, destination QP and PSN.
fn next_at_peer(peer: &ChannelLink) -> (u8, u32, u32) {
    let d = peer.recv(Duration::ZERO).unwrap().expect("a datagram");
    let be =
        |at: usize| u32::from_be_bytes([0, d.payload[at], d.payload[at + 1], d.payload[at + 2]]);
    (d.payload[0], be(5), be(9))
}

/// A deferred ACK leaves ahead of the next request of its own connection, as kernel rxe's
/// (sent as the request it acknowledges arrives) would have. A peer that shares one CQ
/// between sends and receives then takes its SEND's completion before that of the answer
/// the application posted on receiving the SEND (librpma's clients rely on it). ACKs of
/// other connections leave behind the request, which is what its peer waits for.
#[test]
fn a_deferred_ack_leaves_ahead_of_its_connections_next_request_and_behind_others() {
    use softverbs_api::{SendWr, VerbsContext};
    let (ctx, peer) = device_and_peer();
    let (_, qpn, buf, lkey) = rc_qp_to_peer(&ctx);
    let dev = ctx.dev();
    dev.deferred_acks
        .defer(vec![ack_to_peer(0x78, 3), ack_to_peer(0x77, 5)]);
    let answer = SendWr::send(1, vec![softverbs_testkit::sge(buf.addr(), 8, lkey)]);
    ctx.post_send(qpn, &[answer]).unwrap();
    assert_eq!(
        next_at_peer(&peer),
        (0x11, 0x77, 5),
        "its connection's ACK first"
    );
    assert_eq!(
        next_at_peer(&peer),
        (Opcode::RC_SEND_ONLY.0, 0x77, 0),
        "the answer"
    );
    assert_eq!(
        next_at_peer(&peer),
        (0x11, 0x78, 3),
        "another connection's ACK behind"
    );
    assert!(!dev.deferred_acks.pending());
}

/// An ACK held by a receive batch leaves ahead of what another thread sends on its
/// connection once the batch's completion can be seen, though the batch goes on: an
/// application woken by the completion (through its channel, while the engine thread still
/// handles the rest of a batch) answers at once, and its answer must not overtake the ACK
/// of the request it took (kernel rxe's left on arrival).
#[test]
fn an_ack_held_by_a_batch_leaves_ahead_of_an_answer_posted_meanwhile_on_another_thread() {
    use softverbs_api::{SendWr, VerbsContext, WorkCompletion};
    let (ctx, peer) = device_and_peer();
    let (cq, qpn, buf, lkey) = rc_qp_to_peer(&ctx);
    let dev = ctx.dev();
    let recv = softverbs_testkit::recv_one(1, buf.addr(), 64, lkey);
    ctx.post_recv(qpn, &[recv]).unwrap();
    let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY, qpn, Psn::new(0));
    bth.ack_req = true;
    let path = PathInfo {
        dst_ip: DEVICE_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc004,
    };
    let request = from_peer(&path, &RoceRepr::new(bth, b"ping"));
    // This thread plays the engine thread's batch: it receives the request and goes on.
    super::ack_hold::begin();
    dev.receive(view_from_peer(&path, &request), &mut Default::default());
    let mut wc = [WorkCompletion::default()];
    assert_eq!(
        ctx.poll_cq(cq, &mut wc).unwrap(),
        1,
        "the request's completion"
    );
    assert!(
        peer.recv(Duration::ZERO).unwrap().is_none(),
        "nothing sent yet: the batch holds its ACK"
    );
    let answer = SendWr::send(2, vec![softverbs_testkit::sge(buf.addr(), 8, lkey)]);
    std::thread::scope(|s| {
        s.spawn(|| ctx.post_send(qpn, &[answer]).unwrap());
    });
    assert_eq!(next_at_peer(&peer), (0x11, 0x77, 0), "the ACK first");
    assert_eq!(
        next_at_peer(&peer),
        (Opcode::RC_SEND_ONLY.0, 0x77, 0),
        "the answer"
    );
    assert!(super::ack_hold::end().is_empty(), "nothing left to send");
    assert!(!dev.deferred_acks.pending());
}

/// An ACK nobody asked for (a requester that coalesces ACKs leaves its unsignaled SENDs
/// without a request) is owed by the responder until the traffic pauses; while an
/// application polls, the engine thread that sends it naps. A state change (a disconnect's
/// move to the error state) must send it first, as kernel rxe would have sent it already.
#[test]
fn an_owed_ack_nobody_asked_for_leaves_before_a_state_change() {
    use softverbs_api::{QpAttr, QpAttrMask, QpState};
    use softverbs_api::{VerbsContext, WorkCompletion};
    let (ctx, peer) = device_and_peer();
    let (cq, qpn, buf, lkey) = rc_qp_to_peer(&ctx);
    let recv = softverbs_testkit::recv_one(1, buf.addr(), 64, lkey);
    ctx.post_recv(qpn, &[recv]).unwrap();
    let mut wc = [WorkCompletion::default()];
    // Polling for a while: the engine thread leaves the link to this thread and naps.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(20) {
        assert_eq!(ctx.poll_cq(cq, &mut wc).unwrap(), 0);
    }
    // A SEND ONLY without an ACK request, as an unsignaled SEND of a coalescing requester.
    let path = PathInfo {
        dst_ip: DEVICE_IP,
        udp_dst_port: 4791,
        udp_src_port: 0xc003,
    };
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_SEND_ONLY, qpn, Psn::new(0)),
        b"last",
    );
    peer.send(&mut OutPacket::build(&path, &repr).unwrap())
        .unwrap();
    wait_until("the SEND received", || {
        ctx.poll_cq(cq, &mut wc).unwrap() == 1
    });
    assert_eq!(wc[0].byte_len, 4);
    let error = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    ctx.modify_qp(qpn, &error, QpAttrMask::STATE).unwrap();
    let dev = ctx.dev();
    assert!(!dev.lazy_acks.pending(), "owed after modify_qp returned");
    // Sent by modify_qp, or (had the engine thread received the SEND) by the engine.
    let d = peer.recv(Duration::from_secs(5)).unwrap().expect("the ACK");
    assert_eq!(d.payload[0], Opcode::RC_ACKNOWLEDGE.0);
    assert_eq!(&d.payload[5..8], &[0, 0, 0x77], "to the peer's QP");
    assert_eq!(&d.payload[9..12], &[0, 0, 0], "acknowledging PSN 0");
}
