//! The other links and address families: devices on an in-process ChannelNetwork, and
//! devices on IPv6 loopback with explicit UDP ports.
//!
//! File number 8: devices on 127.10.8.n, and [::1]:4791n.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};

use softverbs::{
    AccessFlags, ChannelNetwork, DeviceConfig, Gid, GidType, LinkConfig, Mtu, QpAttr, QpAttrMask,
    QpState, RcConnectOptions, SendWr,
};
use softverbs_api::qp::AhAttr;
use softverbs_conformance::{
    assert_bytes_eq, check_recv_wc, check_send_wc, connect_pair, device_name, pattern, poll_1,
    register_and_open, send_and_verify, side_pair, test_ip, SideConfig,
};
use softverbs_testkit::{init_attr, RC_RTR_MASK};

const FILE: u8 = 8;

#[test]
fn send_recv_over_a_channel_network() {
    let net = ChannelNetwork::new();
    let open = |n: u8| {
        register_and_open(DeviceConfig {
            link: LinkConfig::Channel(net.clone()),
            ..DeviceConfig::new(device_name(FILE, n), test_ip(FILE, n))
        })
    };
    let ctx_a = open(1);
    let ctx_b = open(2);
    assert_eq!(
        ctx_a.emulator().unwrap().local_addr(),
        SocketAddr::new(test_ip(FILE, 1), 4791)
    );
    // A channel device does not use the host's sockets: its address stays free.
    for n in [1, 2] {
        let addr = SocketAddr::new(test_ip(FILE, n), 4791);
        drop(
            UdpSocket::bind(addr)
                .unwrap_or_else(|e| panic!("{addr} taken by a channel device: {e}")),
        );
    }

    let cfg = SideConfig {
        buf_len: 1 << 20,
        ..SideConfig::default()
    };
    let (a, b) = side_pair(&ctx_a, &ctx_b, &cfg);
    let opts = RcConnectOptions {
        path_mtu: Mtu::Mtu4096,
        ..RcConnectOptions::default()
    };
    connect_pair(&a, &b, 0xff_fffe, 7, &opts);
    for (seed, len) in [
        (1u64, 0usize),
        (2, 1),
        (3, 4097),
        (4, 100_000),
        (5, 1 << 20),
    ] {
        send_and_verify(&a, &b, len, seed);
    }
    send_and_verify(&b, &a, 12_345, 6);

    // SEND_WITH_IMM through the channel too.
    let msg = pattern(7, 9000);
    a.send_mr.write(0, &msg).unwrap();
    b.post_recv(70, vec![b.recv_mr.sge(0, 9000).unwrap()]);
    a.post_send(SendWr::send_with_imm(
        71,
        vec![a.send_mr.sge(0, 9000).unwrap()],
        0xFEED_BEEF,
    ));
    check_recv_wc(
        &poll_1(&b.recv_cq, "recv"),
        70,
        9000,
        Some(0xFEED_BEEF),
        b.qpn(),
        a.qpn(),
    );
    check_send_wc(&poll_1(&a.send_cq, "send"), 71, 9000, a.qpn());
    assert_bytes_eq(&b.recv_mr.to_vec()[..9000], &msg, "imm message");
}

#[test]
fn send_recv_over_ipv6_loopback_with_explicit_ports() {
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let open = |n: u8, port: u16| {
        let mut cfg = DeviceConfig::new(format!("sv-f{FILE}-v6-{n}"), v6);
        cfg.udp_port = port;
        register_and_open(cfg)
    };
    let ctx_a = open(1, 47911);
    let ctx_b = open(2, 47912);
    assert_eq!(
        ctx_b.emulator().unwrap().local_addr(),
        SocketAddr::new(v6, 47912)
    );

    // GID index 1 is ::1 itself (not IPv4-mapped), RoCE v2; index 0 is link-local.
    let g1 = ctx_a.query_gid(1, 1).unwrap();
    assert_eq!(g1.gid, Gid(Ipv6Addr::LOCALHOST.octets()));
    assert_eq!(g1.gid_type, GidType::RoceV2);
    assert_eq!(g1.gid.to_ip(), v6);
    let g0 = ctx_a.query_gid(1, 0).unwrap();
    assert_eq!(&g0.gid.0[..2], &[0xfe, 0x80]);

    let (a, b) = side_pair(&ctx_a, &ctx_b, &SideConfig::default());
    let ep_a = a.qp.endpoint(0x42, 1).unwrap();
    let ep_b = b.qp.endpoint(0x99_0000, 1).unwrap();
    assert_eq!(ep_a.gid, g1.gid);
    assert_eq!(ep_a.udp_port, Some(47911));
    assert_eq!(ep_b.udp_port, Some(47912));
    assert_eq!(ep_a.qpn, a.qpn());

    // An IPv4-mapped destination is unreachable from an IPv6 device: EINVAL at RTR.
    let (init, init_mask) = init_attr(AccessFlags::empty());
    a.qp.modify(&init, init_mask).unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        dest_qp_num: b.qpn(),
        ah_attr: AhAttr {
            dgid: Gid::from_ip(test_ip(FILE, 9)),
            sgid_index: 1,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    assert_eq!(a.qp.modify(&rtr, RC_RTR_MASK).unwrap_err().errno(), 22);
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();

    let opts = RcConnectOptions {
        sgid_index: 1,
        ..RcConnectOptions::default()
    };
    a.qp.connect_rc(0x42, &ep_b, &opts).unwrap();
    b.qp.connect_rc(0x99_0000, &ep_a, &opts).unwrap();
    let q = a.qp.query().unwrap().0;
    assert_eq!(q.ah_attr.dgid, g1.gid);
    assert_eq!(q.ah_attr.udp_dport, Some(47912));

    send_and_verify(&a, &b, 5000, 1);
    send_and_verify(&b, &a, 5000, 2);
}

#[test]
fn a_peer_named_without_its_port_is_reached_on_the_port_its_device_is_configured_with() {
    // perftest's connection keys carry no UDP port: two devices of this process on other
    // ports than 4791 (beside a kernel rxe holding 4791) must still reach each other.
    let open = |n: u8, port: u16| {
        let mut cfg = DeviceConfig::new(device_name(FILE, n), test_ip(FILE, n));
        cfg.udp_port = port;
        register_and_open(cfg)
    };
    let ctx_a = open(21, 47931);
    let ctx_b = open(22, 47932);
    let (a, b) = side_pair(&ctx_a, &ctx_b, &SideConfig::default());
    let opts = RcConnectOptions {
        sgid_index: 1,
        ..RcConnectOptions::default()
    };
    let mut ep_a = a.qp.endpoint(0x42, 1).unwrap();
    let mut ep_b = b.qp.endpoint(0x77, 1).unwrap();
    assert_eq!((ep_a.udp_port, ep_b.udp_port), (Some(47931), Some(47932)));
    ep_a.udp_port = None;
    ep_b.udp_port = None;
    a.qp.connect_rc(0x42, &ep_b, &opts).unwrap();
    b.qp.connect_rc(0x77, &ep_a, &opts).unwrap();
    assert_eq!(a.qp.query().unwrap().0.ah_attr.udp_dport, Some(47932));
    assert_eq!(b.qp.query().unwrap().0.ah_attr.udp_dport, Some(47931));

    send_and_verify(&a, &b, 3000, 3);
    send_and_verify(&b, &a, 3000, 4);
}
