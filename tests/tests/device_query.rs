//! Device discovery and the query verbs: ibv_get_device_list, ibv_open_device,
//! ibv_query_device, ibv_query_port, ibv_query_gid.
//!
//! File number 1: devices on 127.10.1.n.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use softverbs::{
    devices, register_device, AccessFlags, Context, DeviceConfig, Gid, GidType, Mtu, PortState,
    QpAttr, QpState,
};
use softverbs_api::qp::AhAttr;
use softverbs_conformance::{
    device_name, open_udp_device, register_and_open, test_ip, Side, SideConfig,
};
use softverbs_testkit::{init_attr, RC_RTR_MASK};

const FILE: u8 = 1;

#[test]
fn registered_devices_are_listed_with_their_guid() {
    let ctx = open_udp_device(FILE, 1);
    let name = device_name(FILE, 1);
    let list = devices().expect("devices");
    let entry = list
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("{name} not in {list:?}"));
    assert_eq!(entry.backend, "emu");
    // The node GUID is derived from the device's address (02:00:127 ff:fe 10:1:1) and the
    // device list and query_device agree on it.
    assert_eq!(entry.guid, 0x0200_7fff_fe0a_0101);
    let attr = ctx.query_device().expect("query_device");
    assert_eq!(attr.node_guid, entry.guid);
    assert_eq!(ctx.name(), name);

    // Names are unique: registering the same name again is EINVAL, and the list keeps one.
    let dup = register_device(DeviceConfig::new(name.clone(), test_ip(FILE, 2)));
    assert_eq!(dup.unwrap_err().errno(), 22);
    let list = devices().expect("devices");
    assert_eq!(list.iter().filter(|d| d.name == name).count(), 1);
}

#[test]
fn opening_an_unknown_device_fails_with_enoent() {
    let err = Context::open("sv-f1-no-such-device")
        .err()
        .expect("must fail");
    assert_eq!(err.errno(), 2, "{err}");
}

#[test]
fn query_device_reports_nonzero_limits_and_one_port() {
    let ctx = open_udp_device(FILE, 3);
    let a = ctx.query_device().expect("query_device");
    assert_eq!(a.phys_port_cnt, 1);
    for (name, v) in [
        ("max_qp", a.max_qp),
        ("max_qp_wr", a.max_qp_wr),
        ("max_sge", a.max_sge),
        ("max_cq", a.max_cq),
        ("max_cqe", a.max_cqe),
        ("max_mr", a.max_mr),
        ("max_pd", a.max_pd),
        ("max_qp_rd_atom", a.max_qp_rd_atom),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom),
    ] {
        assert!(v > 0, "{name} is zero in {a:?}");
    }
    assert!(a.max_mr_size > 0);
    assert_eq!(a.sys_image_guid, a.node_guid);
    assert!(!a.fw_ver.is_empty());
}

#[test]
fn query_port_one_is_active_with_mtu_4096_on_loopback() {
    let ctx = open_udp_device(FILE, 4);
    let p = ctx.query_port(1).expect("query_port(1)");
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.active_mtu, Mtu::Mtu4096);
    assert_eq!(p.max_mtu, Mtu::Mtu4096);
    assert!(p.link_layer_ethernet);
    assert!(p.gid_tbl_len >= 2, "{p:?}");
    assert!(p.max_msg_sz >= 1 << 31, "{p:?}");

    for port in [0u8, 2, 255] {
        let err = ctx.query_port(port).expect_err("only port 1 exists");
        assert_eq!(err.errno(), 22, "query_port({port}): {err}");
    }
}

#[test]
fn active_mtu_follows_the_netdev_mtu() {
    // An Ethernet-sized interface MTU leaves room for 1024-byte IB packets only (as rxe).
    let mut cfg = DeviceConfig::new(device_name(FILE, 5), test_ip(FILE, 5));
    cfg.netdev_mtu = 1500;
    let ctx = register_and_open(cfg);
    let p = ctx.query_port(1).expect("query_port");
    assert_eq!(p.active_mtu, Mtu::Mtu1024);
    assert_eq!(p.max_mtu, Mtu::Mtu4096);

    // A QP on it cannot use a path MTU above the active MTU.
    let side = Side::new(&ctx, &SideConfig::default());
    let (init, init_mask) = init_attr(AccessFlags::empty());
    side.qp.modify(&init, init_mask).expect("RESET -> INIT");
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu2048,
        dest_qp_num: 0x99,
        ah_attr: AhAttr {
            dgid: ctx.query_gid(1, 1).unwrap().gid,
            sgid_index: 1,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let mask = RC_RTR_MASK;
    assert_eq!(side.qp.modify(&rtr, mask).unwrap_err().errno(), 22);
    assert_eq!(side.qp.state().unwrap(), QpState::Init);
    rtr.path_mtu = Mtu::Mtu1024;
    side.qp
        .modify(&rtr, mask)
        .expect("INIT -> RTR at the active MTU");
}

#[test]
fn gid_table_has_link_local_and_ipv4_mapped_entries() {
    let ctx = open_udp_device(FILE, 6);

    let g0 = ctx.query_gid(1, 0).expect("gid 0");
    assert_eq!(g0.gid_index, 0);
    assert_eq!(g0.port_num, 1);
    assert_eq!(g0.gid_type, GidType::RoceV2);
    let ll = Ipv6Addr::from(g0.gid.0);
    assert_eq!(
        &ll.segments()[..4],
        &[0xfe80, 0, 0, 0],
        "index 0 must be fe80::/64, is {ll}"
    );
    assert_ne!(
        &g0.gid.0[8..],
        &[0u8; 8],
        "link-local GID without interface id"
    );

    let g1 = ctx.query_gid(1, 1).expect("gid 1");
    assert_eq!(g1.gid_index, 1);
    assert_eq!(g1.port_num, 1);
    assert_eq!(g1.gid_type, GidType::RoceV2);
    let mapped: Ipv6Addr = "::ffff:127.10.1.6".parse().unwrap();
    assert_eq!(g1.gid, Gid(mapped.octets()));
    assert_eq!(g1.gid.to_ip(), IpAddr::V4(Ipv4Addr::new(127, 10, 1, 6)));

    // The table has room beyond the two addresses: an empty entry is ENODATA (as
    // ibv_query_gid_ex says), an index beyond the table EINVAL.
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    assert!(len > 2, "{len}");
    let err = ctx.query_gid(1, 2).expect_err("index 2 is empty");
    assert_eq!(err.errno(), libc::ENODATA, "{err}");
    let err = ctx
        .query_gid(1, len)
        .expect_err("an index beyond the table");
    assert_eq!(err.errno(), 22, "{err}");
    let err = ctx.query_gid(2, 0).expect_err("port 2 does not exist");
    assert_eq!(err.errno(), 22, "{err}");
}

#[test]
fn two_opens_share_one_device() {
    let a = open_udp_device(FILE, 7);
    // A second open of the same device must not try to bind the address again.
    let b = Context::open(&device_name(FILE, 7)).expect("second open");
    assert_eq!(
        a.query_gid(1, 1).unwrap().gid,
        b.query_gid(1, 1).unwrap().gid
    );
    assert_eq!(
        a.emulator().unwrap().local_addr(),
        b.emulator().unwrap().local_addr()
    );
    assert_eq!(
        a.emulator().unwrap().local_addr(),
        "127.10.1.7:4791".parse().unwrap()
    );
}
