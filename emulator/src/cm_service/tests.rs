//! The CM service on two devices of an in-process network: a connection made by MADs on
//! QP1, the QPs moved by the service, data over the connected QPs, teardown with nothing
//! left; and QP1 input that is not for the CM, counted and dropped.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use softverbs_api::{
    AccessFlags, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge,
    VerbsContext, WcStatus, WorkCompletion,
};

use super::{CmEventSink, CmService};
use crate::cm::{AcceptParams, CmEvent, CmEventKind, ConnectParams};
use crate::engine::config::DeviceConfig;
use crate::engine::device::Device;
use crate::engine::engine_thread::DeviceRuntime;
use crate::engine::EmuContext;
use crate::memory::RdmaBuffer;
use crate::net::channel::{ChannelLink, ChannelNetwork};
use crate::net::Link;
use crate::wire::cm::{rej_reason, PortSpace};

struct ToChannel(Sender<CmEvent>);

impl CmEventSink for ToChannel {
    fn deliver(&self, event: CmEvent) {
        let _ = self.0.send(event);
    }
}

fn sink() -> (Arc<dyn CmEventSink>, Receiver<CmEvent>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (Arc::new(ToChannel(tx)), rx)
}

fn device(net: &ChannelNetwork, name: &str, ip: IpAddr) -> EmuContext {
    let link = net.attach(SocketAddr::new(ip, 4791)).unwrap();
    let device = Device::new(DeviceConfig::new(name, ip), Box::new(link));
    let runtime = DeviceRuntime::start(Arc::new(device)).unwrap();
    EmuContext::new(Arc::new(runtime)).unwrap()
}

fn next(rx: &Receiver<CmEvent>) -> CmEventKind {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a CM event")
        .kind
}

/// A PD, a CQ and an RC QP in INIT, as rdma_create_qp leaves it.
fn rc_qp(ctx: &EmuContext) -> (u32, u32, u32) {
    let pd = ctx.alloc_pd().unwrap();
    let (cq, _) = ctx.create_cq(16, None).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
        sq_sig_all: false,
    };
    let (qpn, _) = ctx.create_qp(pd, &init).unwrap();
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    ctx.modify_qp(qpn, &attr, mask).unwrap();
    (pd, cq, qpn)
}

fn poll_one(ctx: &EmuContext, cq: u32) -> WorkCompletion {
    let start = Instant::now();
    let mut wc = [WorkCompletion::default()];
    loop {
        if ctx.poll_cq(cq, &mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// rdma_cm's defaults for connecting QP `qpn` from `src_port` to `peer`, port 7471.
fn connect_params(peer: IpAddr, src_port: u16, qpn: u32) -> ConnectParams {
    ConnectParams {
        peer,
        port_space: PortSpace::Tcp,
        dst_port: 7471,
        src_port,
        qpn,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        private_data: Vec::new(),
        qp_ack_timeout: None,
        manual_qp: false,
    }
}

/// Binds TCP port 7471 of `cm` and listens on it; returns the listener's events.
fn listen_7471(cm: &CmService) -> Receiver<CmEvent> {
    let (listen_sink, listen_rx) = sink();
    cm.bind_port(PortSpace::Tcp, 7471).unwrap();
    cm.listen(PortSpace::Tcp, 7471, listen_sink).unwrap();
    listen_rx
}

/// A sink for a client's id, its events and an ephemeral TCP port bound on `cm`.
fn client_port(cm: &CmService) -> (Arc<dyn CmEventSink>, Receiver<CmEvent>, u16) {
    let (c_sink, c_rx) = sink();
    (c_sink, c_rx, cm.bind_port(PortSpace::Tcp, 0).unwrap())
}

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 78, 0, 1));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 78, 0, 2));

#[test]
fn two_devices_connect_through_qp1_send_data_and_tear_down_leaving_nothing() {
    let net = ChannelNetwork::new();
    let server = device(&net, "cm-svc-server", SERVER);
    let client = device(&net, "cm-svc-client", CLIENT);
    let s_cm = CmService::for_context(&server).unwrap();
    let c_cm = CmService::for_context(&client).unwrap();
    assert!(Arc::ptr_eq(
        &s_cm,
        &CmService::for_context(&server).unwrap()
    ));

    let listen_rx = listen_7471(&s_cm);
    let (c_qp_pd, c_cq, c_qpn) = rc_qp(&client);
    let (c_sink, c_rx, src_port) = client_port(&c_cm);
    let params = ConnectParams {
        private_data: b"hello".to_vec(),
        qp_ack_timeout: None,
        manual_qp: false,
        ..connect_params(SERVER, src_port, c_qpn)
    };
    let c_id = c_cm.connect(&params, c_sink).unwrap();

    let request = listen_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let CmEventKind::ConnectRequest {
        cma, private_data, ..
    } = &request.kind
    else {
        panic!("expected a CONNECT_REQUEST, got {request:?}");
    };
    assert_eq!((cma.src_addr, cma.src_port), (CLIENT, src_port));
    assert_eq!(&private_data[..5], b"hello");

    let (s_pd, s_cq, s_qpn) = rc_qp(&server);
    let buf = RdmaBuffer::new(64).unwrap();
    let keys = server
        .reg_mr(s_pd, buf.addr(), 64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    server
        .post_recv(
            s_qpn,
            &[RecvWr {
                wr_id: 5,
                sg_list: vec![Sge {
                    addr: buf.addr(),
                    length: 64,
                    lkey: keys.lkey,
                }],
            }],
        )
        .unwrap();
    let accept = AcceptParams {
        private_data: b"welcome".to_vec(),
        qp_ack_timeout: None,
        manual_qp: false,
        ..accept_params(s_qpn)
    };
    s_cm.accept(request.id, &accept).unwrap();

    let CmEventKind::Established { private_data, .. } = next(&c_rx) else {
        panic!("client not established");
    };
    assert_eq!(&private_data[..7], b"welcome");
    assert!(matches!(next(&listen_rx), CmEventKind::Established { .. }));
    assert_eq!(client.query_qp(c_qpn).unwrap().0.qp_state, QpState::Rts);
    assert_eq!(server.query_qp(s_qpn).unwrap().0.qp_state, QpState::Rts);

    // Data over the QPs the service connected.
    let src = RdmaBuffer::new(13).unwrap();
    src.write(0, b"over the wire").unwrap();
    let src_keys = client
        .reg_mr(c_qp_pd, src.addr(), 13, AccessFlags::empty())
        .unwrap();
    let wr = SendWr::send(
        9,
        vec![Sge {
            addr: src.addr(),
            length: 13,
            lkey: src_keys.lkey,
        }],
    );
    client.post_send(c_qpn, &[wr]).unwrap();
    let wc = poll_one(&server, s_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (5, WcStatus::Success, 13)
    );
    let mut got = [0u8; 13];
    buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"over the wire");
    assert_eq!(poll_one(&client, c_cq).status, WcStatus::Success);

    let conn = c_cm.info(c_id).unwrap();
    assert_eq!((conn.local_qpn, conn.remote_qpn), (c_qpn, s_qpn));
    c_cm.disconnect(c_id).unwrap();
    assert_eq!(next(&c_rx), CmEventKind::Disconnected);
    assert_eq!(next(&listen_rx), CmEventKind::Disconnected);
    assert_eq!(next(&c_rx), CmEventKind::TimewaitExit);
    assert_eq!(next(&listen_rx), CmEventKind::TimewaitExit);
    for cm in [&s_cm, &c_cm] {
        let c = cm.counters();
        assert_eq!((c.live_connections, c.cm.malformed), (0, 0));
        assert_eq!(c.cm.connections_created, c.cm.connections_freed);
        assert!(c.mads_sent >= 2 && c.gsi_packets >= 2, "{c:?}");
    }
    assert_eq!(server.query_qp(s_qpn).unwrap().0.qp_state, QpState::Err);
}

#[test]
fn qp1_input_that_is_not_a_cm_mad_is_counted_and_dropped() {
    let net = ChannelNetwork::new();
    let ctx = device(
        &net,
        "cm-svc-hostile",
        IpAddr::V4(Ipv4Addr::new(10, 78, 1, 1)),
    );
    let peer_ip = IpAddr::V4(Ipv4Addr::new(10, 78, 1, 2));
    let peer: ChannelLink = net.attach(SocketAddr::new(peer_ip, 4791)).unwrap();
    let cm = CmService::for_context(&ctx).unwrap();
    let send = |payload: &[u8], qkey: u32| {
        let mut repr = super::gsi_packet(payload, 0);
        repr.deth.as_mut().unwrap().qkey = qkey;
        let path = crate::net::PathInfo {
            dst_ip: ctx.local_addr().ip(),
            udp_dst_port: 4791,
            udp_src_port: 0xd872,
        };
        let mut packet = crate::net::OutPacket::build(&path, &repr).unwrap();
        peer.send(&mut packet).unwrap();
    };
    let mut sa_mad = [0u8; 256];
    sa_mad[0] = 1;
    sa_mad[1] = 0x03; // subnet administration
    send(&sa_mad, 0x8001_0000);
    let mut cm_mad = sa_mad;
    cm_mad[1] = 0x07;
    send(&cm_mad[..100], 0x8001_0000); // truncated
    send(&cm_mad, 0x1234); // wrong Q_Key
    cm_mad[2] = 9; // class version 9: malformed
    send(&cm_mad, 0x8001_0000);
    let start = Instant::now();
    let want = |c: &super::ServiceCounters| {
        c.other_class_dropped == 1 && c.bad_qkey_dropped == 1 && c.malformed == 2
    };
    while !want(&cm.counters()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            cm.counters()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let c = cm.counters();
    assert_eq!((c.gsi_packets, c.cm.malformed, c.mads_sent), (4, 2, 0));
    assert_eq!(c.live_connections, 0);
}

/// A server and a client device on a channel network of their own, each with its CM,
/// the server listening on port 7471 (its requests to `listen_rx`).
struct ErrPair {
    _net: ChannelNetwork,
    server: EmuContext,
    server_ip: IpAddr,
    s_cm: Arc<CmService>,
    c_cm: Arc<CmService>,
    listen_rx: Receiver<CmEvent>,
}

fn err_pair(tag: &str, subnet: u8) -> ErrPair {
    let net = ChannelNetwork::new();
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 78, subnet, 1));
    let client_ip = IpAddr::V4(Ipv4Addr::new(10, 78, subnet, 2));
    let server = device(&net, &format!("cm-svc-{tag}-server"), server_ip);
    let client = device(&net, &format!("cm-svc-{tag}-client"), client_ip);
    let s_cm = CmService::for_context(&server).unwrap();
    let c_cm = CmService::for_context(&client).unwrap();
    let (listen_sink, listen_rx) = sink();
    s_cm.listen(PortSpace::Tcp, 7471, listen_sink).unwrap();
    ErrPair {
        _net: net,
        server,
        server_ip,
        s_cm,
        c_cm,
        listen_rx,
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        qpn,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
        qp_ack_timeout: None,
        manual_qp: false,
    }
}

#[test]
fn a_qp_move_that_fails_is_a_connect_error_here_and_a_reject_there() {
    let p = err_pair("err", 2);
    let (_, _, c_qpn) = rc_qp(p.c_cm.context());
    let (c_sink, c_rx) = sink();
    p.c_cm
        .connect(&connect_params(p.server_ip, 40000, c_qpn), c_sink)
        .unwrap();
    let request = p.listen_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // A QP number the server does not have: RTR cannot be applied.
    p.s_cm
        .accept(request.id, &accept_params(0x00ab_cdef))
        .unwrap();
    assert_eq!(next(&p.listen_rx), CmEventKind::ConnectError);
    assert!(matches!(next(&c_rx), CmEventKind::Rejected(_)));
    assert_eq!(p.s_cm.counters().qp_modify_failed, 1);
    assert!(
        p.listen_rx
            .recv_timeout(Duration::from_millis(100))
            .is_err(),
        "one event only"
    );
}

#[test]
fn a_qp_move_that_fails_after_the_rep_rejects_the_rep_as_the_kernel_does() {
    let p = err_pair("rep-err", 3);
    // A QP number the client does not have: the REQ goes out, the REP's RTR fails.
    let (c_sink, c_rx) = sink();
    p.c_cm
        .connect(&connect_params(p.server_ip, 40001, 0x00ab_cdef), c_sink)
        .unwrap();
    let request = p.listen_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let (_, _, s_qpn) = rc_qp(&p.server);
    p.s_cm.accept(request.id, &accept_params(s_qpn)).unwrap();
    assert_eq!(next(&c_rx), CmEventKind::ConnectError);
    // The kernel's cma_rep_recv: REJ "consumer defined" (28) for the REP, no RTU, no DREQ.
    match next(&p.listen_rx) {
        CmEventKind::Rejected(r) => assert_eq!(r.reason, rej_reason::CONSUMER_REJECT),
        other => panic!("server got {other:?}, expected REJECTED 28"),
    }
    assert_eq!(p.c_cm.counters().qp_modify_failed, 1);
    assert_eq!(p.c_cm.counters().cm.rejects_sent, 1);
    assert_eq!(p.c_cm.counters().live_connections, 0, "freed at once");
    assert_eq!(p.s_cm.counters().live_connections, 0);
    for rx in [&c_rx, &p.listen_rx] {
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "one event per side"
        );
    }
}

/// The server's QP1 handler with every RTU lost on the way in.
struct LoseRtus {
    inner: super::inlet::GsiInlet,
    lost: std::sync::atomic::AtomicU32,
}

impl crate::engine::GsiHandler for LoseRtus {
    fn on_gsi_packet(&self, packet: &crate::wire::RoceRepr<'_>, from: SocketAddr) {
        use crate::wire::cm::{CmMad, CmMessage};
        if let Ok(CmMad {
            message: CmMessage::Rtu(_),
            ..
        }) = CmMad::parse(packet.payload)
        {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.inner.on_gsi_packet(packet, from);
    }
}

/// The RTU never reaches the passive side: the client's first SEND establishes the server's
/// connection (the engine's COMM_EST hook, as the kernel's `cm_establish`), with exactly
/// one ESTABLISHED, and the connection then tears down as usual.
#[test]
fn a_lost_rtu_is_made_up_for_by_the_first_request_on_the_passive_qp() {
    let net = ChannelNetwork::new();
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 78, 2, 1));
    let server = device(&net, "cm-svc-rtu-server", server_ip);
    let client = device(
        &net,
        "cm-svc-rtu-client",
        IpAddr::V4(Ipv4Addr::new(10, 78, 2, 2)),
    );
    let s_cm = CmService::for_context(&server).unwrap();
    let c_cm = CmService::for_context(&client).unwrap();
    let lossy = Arc::new(LoseRtus {
        inner: super::inlet::GsiInlet {
            service: Arc::downgrade(&s_cm),
        },
        lost: Default::default(),
    });
    server.set_gsi_handler(Some(lossy.clone()));

    let listen_rx = listen_7471(&s_cm);
    let (c_pd, c_cq, c_qpn) = rc_qp(&client);
    let (c_sink, c_rx, src_port) = client_port(&c_cm);
    let c_id = c_cm
        .connect(&connect_params(server_ip, src_port, c_qpn), c_sink)
        .unwrap();
    let request = listen_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(request.kind, CmEventKind::ConnectRequest { .. }));

    let (s_pd, s_cq, s_qpn) = rc_qp(&server);
    let buf = RdmaBuffer::new(16).unwrap();
    let keys = server
        .reg_mr(s_pd, buf.addr(), 16, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let recv = softverbs_testkit::recv_one(5, buf.addr(), 16, keys.lkey);
    server.post_recv(s_qpn, &[recv]).unwrap();
    let accept = accept_params(s_qpn);
    s_cm.accept(request.id, &accept).unwrap();
    assert!(matches!(next(&c_rx), CmEventKind::Established { .. }));
    let start = Instant::now();
    while lossy.lost.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no RTU lost");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Without the RTU (and with no data yet) the server's connection is not established.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        listen_rx.try_recv().is_err(),
        "established without RTU or data"
    );

    let src = RdmaBuffer::from_slice(b"first data").unwrap();
    let src_keys = client
        .reg_mr(c_pd, src.addr(), 10, AccessFlags::empty())
        .unwrap();
    let wr = SendWr::send(
        9,
        vec![softverbs_testkit::sge(src.addr(), 10, src_keys.lkey)],
    );
    client.post_send(c_qpn, &[wr]).unwrap();
    assert_eq!(poll_one(&server, s_cq).status, WcStatus::Success);
    assert!(matches!(next(&listen_rx), CmEventKind::Established { .. }));
    assert_eq!(poll_one(&client, c_cq).status, WcStatus::Success);
    assert_eq!(s_cm.counters().comm_est_seen, 1);

    // Exactly one ESTABLISHED: the next events are the teardown's.
    c_cm.disconnect(c_id).unwrap();
    assert_eq!(next(&c_rx), CmEventKind::Disconnected);
    assert_eq!(next(&listen_rx), CmEventKind::Disconnected);
    assert_eq!(next(&c_rx), CmEventKind::TimewaitExit);
    assert_eq!(next(&listen_rx), CmEventKind::TimewaitExit);
    assert_eq!(s_cm.counters().live_connections, 0);
}
