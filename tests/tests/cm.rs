//! softverbs::cm between two emulated devices of this process over real UDP on loopback
//! (127.28.1.x): connections made by CM MADs on QP1, the rdma_post_* helpers with their
//! man pages' semantics, rejects, bad input, UD through SIDR, teardown with nothing left.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softverbs::cm::{
    create_ep, getaddrinfo, rej_reason, CmEvent, CmId, ConnParam, EventChannel, EventType, Local,
    PortSpace, QpOptions,
};
use softverbs::{register_device, Context, DeviceConfig, RdmaBuffer, SendFlags, WcStatus};

const WAIT: Duration = Duration::from_secs(10);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(127, 28, 1, n))
}

/// Registers device `n` (127.28.1.n) and opens it, so its CM runs.
fn device(n: u8) -> Context {
    let name = format!("cm-t-{n}");
    register_device(DeviceConfig::new(&name, ip(n))).unwrap();
    Context::open(&name).unwrap()
}

fn buf(bytes: &[u8]) -> RdmaBuffer {
    let b = RdmaBuffer::new(bytes.len().max(1)).unwrap();
    b.write(0, bytes).unwrap();
    b
}

fn listener(n: u8, port: u16, ps: PortSpace) -> CmId {
    let info = getaddrinfo(&ip(n).to_string(), port, None, true, ps).unwrap();
    let id = create_ep(&info, None, None).unwrap();
    id.listen(8).unwrap();
    id
}

fn client(server: u8, port: u16, src: u8, ps: PortSpace) -> CmId {
    let src = ip(src).to_string();
    let info = getaddrinfo(&ip(server).to_string(), port, Some(&src), false, ps).unwrap();
    create_ep(&info, None, Some(&QpOptions::default())).unwrap()
}

#[test]
fn rc_connection_carries_the_seed_helpers_and_tears_down_leaving_nothing() {
    let (s_ctx, c_ctx) = (device(1), device(2));
    let server = listener(1, 7471, PortSpace::Tcp);
    let cl = client(1, 7471, 2, PortSpace::Tcp);
    assert_eq!(cl.local_addr().unwrap().ip(), ip(2), "-I picks the device");

    // rdma_post_recvv before connecting: three SGEs of one region receive one message.
    let recv = cl.reg_msgs(RdmaBuffer::new(64).unwrap()).unwrap();
    let sgl = [
        recv.sge(0, 4).unwrap(),
        recv.sge(16, 5).unwrap(),
        recv.sge(32, 7).unwrap(),
    ];
    cl.post_recvv(77, &sgl).unwrap();
    cl.connect(&ConnParam::with_private_data(b"client-hello"))
        .unwrap();

    let (child, req) = server.get_request(WAIT).unwrap();
    assert!(req.listen_id.as_ref().unwrap().same(&server));
    assert_eq!(&req.private_data[..12], b"client-hello");
    assert_eq!(child.peer_addr().unwrap().ip(), ip(2));
    child.create_qp(None, &QpOptions::default()).unwrap();
    let target = child.reg_write(RdmaBuffer::new(64).unwrap()).unwrap();
    let source = child.reg_read(buf(b"read me back, please")).unwrap();
    // The buffers' addresses and rkeys travel in the accept's private data.
    let mut pd = Vec::new();
    pd.extend_from_slice(&target.addr().to_le_bytes());
    pd.extend_from_slice(&target.rkey().to_le_bytes());
    pd.extend_from_slice(&source.addr().to_le_bytes());
    pd.extend_from_slice(&source.rkey().to_le_bytes());
    child.accept(&ConnParam::with_private_data(&pd)).unwrap();

    let est = cl.expect(EventType::Established, WAIT).unwrap();
    assert_eq!(est.conn.qp_num, child.qp().unwrap().qp_num());
    let word = |at: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&est.private_data[at..at + n]);
        u64::from_le_bytes(b)
    };
    let (w_addr, w_rkey, r_addr, r_rkey) = (
        word(0, 8),
        word(8, 4) as u32,
        word(12, 8),
        word(20, 4) as u32,
    );
    child.expect(EventType::Established, WAIT).unwrap();

    // rdma_post_write of inline bytes (no MR) into the buffer named in the private data.
    let signaled = SendFlags::SIGNALED;
    cl.post_write(
        5,
        Local::Inline(b"written by rdma"),
        signaled | SendFlags::INLINE,
        w_addr,
        w_rkey,
    )
    .unwrap();
    let wc = cl.get_send_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::Success));
    let mut got = [0u8; 15];
    target.read(0, &mut got).unwrap();
    assert_eq!(&got, b"written by rdma");

    // rdma_post_read into registered memory.
    let landing = cl.reg_msgs(RdmaBuffer::new(32).unwrap()).unwrap();
    cl.post_read(6, &landing, 0, 20, signaled, r_addr, r_rkey)
        .unwrap();
    let wc = cl.get_send_comp_timeout(WAIT).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (6, WcStatus::Success, 20)
    );
    assert_eq!(&landing.to_vec()[..20], b"read me back, please");

    // rdma_post_send with a registered MR fills the three SGEs in order.
    let msg = child.reg_msgs(buf(b"0123456789abcdef")).unwrap();
    child.post_send(9, Local::whole(&msg), signaled).unwrap();
    assert_eq!(child.get_send_comp_timeout(WAIT).unwrap().wr_id, 9);
    let wc = cl.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (77, WcStatus::Success, 16)
    );
    let r = recv.to_vec();
    assert_eq!(
        (&r[0..4], &r[16..21], &r[32..39]),
        (&b"0123"[..], &b"45678"[..], &b"9abcdef"[..])
    );

    // rdma_post_send without an MR: inline, and only inline.
    cl.post_recv(78, &recv, 0, 64).unwrap();
    let err = child
        .post_send(10, Local::Inline(b"x"), signaled)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    child
        .post_send(11, Local::Inline(b"inline!"), signaled | SendFlags::INLINE)
        .unwrap();
    assert_eq!(child.get_send_comp_timeout(WAIT).unwrap().wr_id, 11);
    let wc = cl.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (78, 7));
    assert_eq!(&recv.to_vec()[..7], b"inline!");

    cl.disconnect().unwrap();
    cl.expect(EventType::Disconnected, WAIT).unwrap();
    child.expect(EventType::Disconnected, WAIT).unwrap();
    cl.expect(EventType::TimewaitExit, WAIT).unwrap();
    child.expect(EventType::TimewaitExit, WAIT).unwrap();
    drop((child, cl, server, req, est));
    for ctx in [&s_ctx, &c_ctx] {
        let c = ctx.cm_service().unwrap().counters();
        assert_eq!(
            (c.live_connections, c.routes, c.ports_bound),
            (0, 0, 0),
            "{c:?}"
        );
        assert_eq!(c.cm.connections_created, c.cm.connections_freed);
        assert_eq!((c.malformed, c.events_unrouted), (0, 0));
    }
}

#[test]
fn bad_input_gets_the_kernel_answer_or_a_typed_error() {
    let _devices = (device(3), device(4));
    // Nobody listens on the port: REJECTED with "invalid service ID".
    let cl = client(3, 7000, 4, PortSpace::Tcp);
    cl.connect(&ConnParam::default()).unwrap();
    let e = cl.next_event(WAIT).unwrap();
    assert_eq!(
        (e.event, e.status),
        (
            EventType::Rejected,
            i32::from(rej_reason::INVALID_SERVICE_ID)
        )
    );

    // A loopback address no device is bound to: ADDR_ERROR, -EHOSTUNREACH.
    let channel = EventChannel::new().unwrap();
    let id = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let nowhere = SocketAddr::new(ip(99), 7471);
    id.resolve_addr(Some(SocketAddr::new(ip(4), 0)), nowhere, WAIT)
        .unwrap();
    let e = channel.get_event(Some(WAIT)).unwrap().unwrap();
    assert_eq!(
        (e.event, e.status),
        (EventType::AddrError, -libc::EHOSTUNREACH)
    );
    // A source address with no device: EADDRNOTAVAIL at once.
    let id = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let err = id.bind_addr(SocketAddr::new(ip(98), 0)).unwrap_err();
    assert_eq!(err.errno(), libc::EADDRNOTAVAIL);

    // Accept on an id that is not a request; private data over librdmacm's limit.
    let server = listener(3, 7001, PortSpace::Tcp);
    assert_eq!(
        server.accept(&ConnParam::default()).unwrap_err().errno(),
        libc::EINVAL
    );
    let cl = client(3, 7001, 4, PortSpace::Tcp);
    let long = ConnParam::with_private_data(&[1u8; 57]);
    assert_eq!(cl.connect(&long).unwrap_err().errno(), libc::EINVAL);
    // A port held twice.
    let again = CmId::new(&channel, PortSpace::Tcp).unwrap();
    assert_eq!(
        again
            .bind_addr(SocketAddr::new(ip(3), 7001))
            .unwrap_err()
            .errno(),
        libc::EADDRINUSE
    );

    // The application rejects, with private data.
    cl.connect(&ConnParam::with_private_data(b"let me in"))
        .unwrap();
    let (child, _) = server.get_request(WAIT).unwrap();
    assert_eq!(
        cl.accept(&ConnParam::default()).unwrap_err().errno(),
        libc::EINVAL
    );
    child.reject(b"no").unwrap();
    let e: CmEvent = cl.next_event(WAIT).unwrap();
    assert_eq!(
        (e.event, e.status),
        (EventType::Rejected, i32::from(rej_reason::CONSUMER_REJECT))
    );
    assert_eq!(&e.private_data[..2], b"no");
}

#[test]
fn ud_resolves_through_sidr_and_sends_with_the_rdma_cm_qkey() {
    let _devices = (device(5), device(6));
    let server = listener(5, 7002, PortSpace::Udp);
    let cl = client(5, 7002, 6, PortSpace::Udp);
    cl.connect(&ConnParam::with_private_data(b"ud?")).unwrap();
    let (child, req) = server.get_request(WAIT).unwrap();
    assert_eq!(&req.private_data[..3], b"ud?");
    child.create_qp(None, &QpOptions::default()).unwrap();
    let landing = child.reg_msgs(RdmaBuffer::new(40 + 64).unwrap()).unwrap();
    child.post_recv(3, &landing, 0, 40 + 64).unwrap();
    child.accept(&ConnParam::with_private_data(b"ud!")).unwrap();

    let est = cl.expect(EventType::Established, WAIT).unwrap();
    let ud = est.ud.clone().expect("UD parameters");
    assert_eq!(
        (ud.qp_num, ud.qkey),
        (child.qp().unwrap().qp_num(), softverbs::cm::RDMA_UDP_QKEY)
    );
    assert_eq!(&est.private_data[..3], b"ud!");
    let flags = SendFlags::SIGNALED | SendFlags::INLINE;
    cl.post_ud_send(4, Local::Inline(b"datagram"), flags, &ud.ah, ud.qp_num)
        .unwrap();
    assert_eq!(
        cl.get_send_comp_timeout(WAIT).unwrap().status,
        WcStatus::Success
    );
    let wc = child.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (3, 40 + 8));
    assert_eq!(&landing.to_vec()[40..48], b"datagram");
}

#[test]
fn the_event_channel_fd_is_readable_exactly_while_an_event_waits_and_migrate_moves_events() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let readable = |ch: &EventChannel| {
        let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(ch), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
    };
    let _device = device(7);
    let (one, two) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let id = CmId::new(&one, PortSpace::Tcp).unwrap();
    assert!(!readable(&one));
    id.resolve_addr(None, SocketAddr::new(ip(7), 7003), WAIT)
        .unwrap();
    assert!(readable(&one), "ADDR_RESOLVED waits");
    // The waiting event moves with the id.
    id.migrate(&two).unwrap();
    assert!(!readable(&one) && readable(&two));
    let e = two.get_event(Some(Duration::ZERO)).unwrap().unwrap();
    assert_eq!(e.event, EventType::AddrResolved);
    assert!(e.id.same(&id));
    assert!(!readable(&two));
    assert!(
        two.get_event(Some(Duration::ZERO)).unwrap().is_none(),
        "non-blocking: nothing"
    );
    // Wrong order: the route before the address is EINVAL.
    let other = CmId::new(&one, PortSpace::Tcp).unwrap();
    assert_eq!(other.resolve_route(WAIT).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn a_listener_destroyed_with_requests_waiting_rejects_them_and_leaves_nothing() {
    let (s_ctx, _c_ctx) = (device(8), device(9));
    let server = listener(8, 7004, PortSpace::Tcp);
    let cl = client(8, 7004, 9, PortSpace::Tcp);
    cl.connect(&ConnParam::default()).unwrap();
    let cm = s_ctx.cm_service().unwrap();
    let start = std::time::Instant::now();
    while cm.counters().live_connections == 0 {
        assert!(start.elapsed() < WAIT, "the request never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The CONNECT_REQUEST waits on the listener's channel, never taken.
    server.destroy();
    let e = cl.next_event(WAIT).unwrap();
    assert_eq!(e.event, EventType::Rejected, "{e:?}");
    let c = cm.counters();
    assert_eq!((c.live_connections, c.ports_bound), (0, 0), "{c:?}");
}

#[test]
fn the_passive_side_disconnects_first() {
    let _devices = (device(10), device(11));
    let server = listener(10, 7005, PortSpace::Tcp);
    let cl = client(10, 7005, 11, PortSpace::Tcp);
    cl.connect(&ConnParam::default()).unwrap();
    let (child, _) = server.get_request(WAIT).unwrap();
    child.create_qp(None, &QpOptions::default()).unwrap();
    child.accept_sync(&ConnParam::default(), WAIT).unwrap();
    cl.expect(EventType::Established, WAIT).unwrap();
    child.disconnect().unwrap();
    child.expect(EventType::Disconnected, WAIT).unwrap();
    cl.expect(EventType::Disconnected, WAIT).unwrap();
    // Posting on a disconnected id: the QP is in ERR, the WR flushes.
    cl.post_send(
        1,
        Local::Inline(b"late"),
        SendFlags::INLINE | SendFlags::SIGNALED,
    )
    .unwrap();
    let wc = cl.get_send_comp_timeout(WAIT).unwrap();
    assert_eq!(wc.status, WcStatus::WrFlushErr);
}

#[tokio::test]
async fn a_connection_made_with_tokio_waiting_on_the_event_channels() {
    let _devices = (device(12), device(13));
    let s_channel = EventChannel::new().unwrap();
    let server = CmId::new(&s_channel, PortSpace::Tcp).unwrap();
    server.bind_addr(SocketAddr::new(ip(12), 7006)).unwrap();
    server.listen(1).unwrap();
    let c_channel = EventChannel::new().unwrap();
    let cl = CmId::new(&c_channel, PortSpace::Tcp).unwrap();
    cl.resolve_addr(None, SocketAddr::new(ip(12), 7006), WAIT)
        .unwrap();
    let next = |ch: &EventChannel| {
        let ch = ch.clone();
        async move {
            tokio::time::timeout(WAIT, ch.next_async())
                .await
                .expect("an event in time")
                .unwrap()
        }
    };
    assert_eq!(next(&c_channel).await.event, EventType::AddrResolved);
    cl.resolve_route(WAIT).unwrap();
    assert_eq!(next(&c_channel).await.event, EventType::RouteResolved);
    cl.create_qp(None, &QpOptions::default()).unwrap();
    cl.connect(&ConnParam::default()).unwrap();
    let req = next(&s_channel).await;
    assert_eq!(req.event, EventType::ConnectRequest);
    req.id.create_qp(None, &QpOptions::default()).unwrap();
    req.id.accept(&ConnParam::default()).unwrap();
    assert_eq!(next(&c_channel).await.event, EventType::Established);
    assert_eq!(next(&s_channel).await.event, EventType::Established);
}
