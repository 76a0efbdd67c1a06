//! rdma_bind_addr to the wildcard address (0.0.0.0), as librdmacm allows: a listener on
//! every emulated device of the process, each request's new id on the device it came
//! through. Devices on 127.31.1.x (this file's range), over real UDP on loopback.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use softverbs::cm::{
    create_ep, getaddrinfo, CmId, ConnParam, EventChannel, EventType, Local, PortSpace, QpOptions,
};
use softverbs::{register_device, Context, DeviceConfig, RdmaBuffer, SendFlags, WcStatus};

const WAIT: Duration = Duration::from_secs(10);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 31, 1, n))
}

/// Registers and opens device `n` (127.31.1.n), so its CM runs.
fn device(n: u8) -> Context {
    let name = format!("cm-wild-{n}");
    register_device(DeviceConfig::new(&name, ip(n))).unwrap();
    Context::open(&name).unwrap()
}

fn wildcard(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
}

fn client(server: u8, port: u16, src: u8) -> CmId {
    let src = ip(src).to_string();
    let info = getaddrinfo(
        &ip(server).to_string(),
        port,
        Some(&src),
        false,
        PortSpace::Tcp,
    )
    .unwrap();
    create_ep(&info, None, Some(&QpOptions::default())).unwrap()
}

/// One test: the devices are process-wide, and a wildcard bind covers all of them.
#[test]
fn a_wildcard_listener_takes_requests_of_every_device_and_gives_its_port_back() {
    let _devices = (device(1), device(2), device(3));
    let channel = EventChannel::new().unwrap();
    let listener = CmId::new(&channel, PortSpace::Tcp).unwrap();
    listener.bind_addr(wildcard(7600)).unwrap();
    assert_eq!(listener.local_addr(), Some(wildcard(7600)));
    listener.listen(4).unwrap();

    // The port is held on every device: a specific bind on any of them is refused.
    let other = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let err = other
        .bind_addr(SocketAddr::new(ip(2), 7600))
        .expect_err("port held by the wildcard");
    assert_eq!(err.errno(), libc::EADDRINUSE);

    // Requests to .1 and .2 (from .3) both reach the one listener; each new id is on the
    // device connected to, and the connection carries data.
    for (server, word) in [(1u8, b"one"), (2u8, b"two")] {
        let cl = client(server, 7600, 3);
        cl.connect(&ConnParam::default()).unwrap();
        let (child, req) = listener.get_request(WAIT).unwrap();
        assert_eq!(
            req.listen_id.as_ref().map(|l| l.same(&listener)),
            Some(true)
        );
        assert_eq!(child.local_addr(), Some(SocketAddr::new(ip(server), 7600)));
        assert_eq!(child.peer_addr().map(|a| a.ip()), Some(ip(3)));
        child.create_qp(None, &QpOptions::default()).unwrap();
        let landing = child.reg_msgs(RdmaBuffer::new(16).unwrap()).unwrap();
        child.post_recv(9, &landing, 0, 16).unwrap();
        child.accept_sync(&ConnParam::default(), WAIT).unwrap();
        cl.expect(EventType::Established, WAIT).unwrap();
        let flags = SendFlags::SIGNALED | SendFlags::INLINE;
        cl.post_send(1, Local::Inline(word), flags).unwrap();
        assert_eq!(
            cl.get_send_comp_timeout(WAIT).unwrap().status,
            WcStatus::Success
        );
        let wc = child.get_recv_comp_timeout(WAIT).unwrap();
        assert_eq!((wc.wr_id, wc.byte_len), (9, 3));
        assert_eq!(&landing.to_vec()[..3], word);
        cl.disconnect().unwrap();
        child.expect(EventType::Disconnected, WAIT).unwrap();
    }

    // Destroyed, the wildcard gives the port back on every device.
    listener.destroy();
    for n in [1u8, 2, 3] {
        let id = CmId::new(&channel, PortSpace::Tcp).unwrap();
        id.bind_addr(SocketAddr::new(ip(n), 7600)).unwrap();
        id.destroy();
    }

    // An ephemeral wildcard port is the same on every device; a wildcard bind whose port
    // is taken on one device holds it on none.
    let eph = CmId::new(&channel, PortSpace::Tcp).unwrap();
    eph.bind_addr(wildcard(0)).unwrap();
    let port = eph.local_addr().unwrap().port();
    assert_ne!(port, 0);
    let taken = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let e = taken
        .bind_addr(SocketAddr::new(ip(3), port))
        .expect_err("port held");
    assert_eq!(e.errno(), libc::EADDRINUSE);
    eph.destroy();
    let single = CmId::new(&channel, PortSpace::Tcp).unwrap();
    single.bind_addr(SocketAddr::new(ip(3), 7601)).unwrap();
    let wide = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let e = wide.bind_addr(wildcard(7601)).expect_err("taken on .3");
    assert_eq!(e.errno(), libc::EADDRINUSE);
    let on_one = CmId::new(&channel, PortSpace::Tcp).unwrap();
    on_one.bind_addr(SocketAddr::new(ip(1), 7601)).unwrap();

    // IPv6 wildcard with no IPv6 device: EADDRNOTAVAIL.
    let v6 = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let e = v6
        .bind_addr("[::]:7602".parse().unwrap())
        .expect_err("no v6 device");
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);

    // A wildcard-bound id may still connect: the route picks the device, the port stays.
    let server = {
        let info = getaddrinfo(&ip(2).to_string(), 7603, None, true, PortSpace::Tcp).unwrap();
        let l = create_ep(&info, None, None).unwrap();
        l.listen(1).unwrap();
        l
    };
    let active = CmId::new(&channel, PortSpace::Tcp).unwrap();
    active.bind_addr(wildcard(7604)).unwrap();
    active
        .resolve_addr(None, SocketAddr::new(ip(2), 7603), WAIT)
        .unwrap();
    assert_eq!(
        active.next_event(WAIT).unwrap().event,
        EventType::AddrResolved
    );
    assert_eq!(active.local_addr(), Some(SocketAddr::new(ip(2), 7604)));
    active.resolve_route(WAIT).unwrap();
    assert_eq!(
        active.next_event(WAIT).unwrap().event,
        EventType::RouteResolved
    );
    active.create_qp(None, &QpOptions::default()).unwrap();
    active.connect(&ConnParam::default()).unwrap();
    let (child, _) = server.get_request(WAIT).unwrap();
    assert_eq!(child.peer_addr().map(|a| a.port()), Some(7604));
    child.create_qp(None, &QpOptions::default()).unwrap();
    child.accept_sync(&ConnParam::default(), WAIT).unwrap();
    assert_eq!(
        active.next_event(WAIT).unwrap().event,
        EventType::Established
    );
    // The ports of .1 and .3 that the wildcard held before resolving are free again.
    let again = CmId::new(&channel, PortSpace::Tcp).unwrap();
    again.bind_addr(SocketAddr::new(ip(1), 7604)).unwrap();
}
