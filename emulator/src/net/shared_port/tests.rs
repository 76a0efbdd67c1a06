//! The steering program on a real `SO_REUSEPORT` group of loopback sockets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::attach_reuseport_cbpf;
use super::steering::{self, probe_qpn};

/// This test's own address (tests keep to 127.x ranges of their own).
const GROUP_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 29, 0, 1));

fn member(port: u16) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&SocketAddr::new(GROUP_IP, port).into()).unwrap();
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

fn bth(dest_qpn: u32) -> [u8; 12] {
    let q = dest_qpn.to_be_bytes();
    [0x64, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0, 0, 0, 1]
}

/// The destination QPN of the next datagram `s` receives, if one comes.
fn next_qpn(s: &UdpSocket) -> Option<u32> {
    let mut buf = [0u8; 64];
    let n = s.recv(&mut buf).ok()?;
    (n >= 8).then(|| u32::from_be_bytes([0, buf[5], buf[6], buf[7]]))
}

/// Index of each member (by slot), learned with one probe per index.
fn probe(members: &[(u8, &UdpSocket)], tx: &UdpSocket, to: SocketAddr) -> Vec<(u8, u32)> {
    for i in 0..members.len() as u8 {
        tx.send_to(&bth(probe_qpn(i)), to).unwrap();
    }
    let mut found = Vec::new();
    for &(slot, s) in members {
        let qpn = next_qpn(s).expect("each member gets one probe");
        found.push((slot, qpn & 0xff));
    }
    found
}

#[test]
fn probes_find_each_members_index_and_steering_follows_a_departure() {
    let first = member(0);
    let port = first.local_addr().unwrap().port();
    let to = SocketAddr::new(GROUP_IP, port);
    let (second, third) = (member(port), member(port));
    let tx = UdpSocket::bind(SocketAddr::new(GROUP_IP, 0)).unwrap();
    // Before any map is known: the probe rule alone.
    attach_reuseport_cbpf(&first, &steering::program(&[]).unwrap()).unwrap();
    let members = [(3u8, &first), (7, &second), (9, &third)];
    let map = probe(&members, &tx, to);
    assert_eq!(map, [(3, 0), (7, 1), (9, 2)], "indices are the join order");
    attach_reuseport_cbpf(&second, &steering::program(&map).unwrap()).unwrap();
    for &(slot, s) in &members {
        tx.send_to(&bth(u32::from(slot) << 16 | 2), to).unwrap();
        assert_eq!(next_qpn(s), Some(u32::from(slot) << 16 | 2), "slot {slot}");
    }

    // The first member leaves: the last moves into its index; probing again finds that,
    // and the new program (attached by a member that did not attach the first) steers
    // right again.
    drop(first);
    let members = [(7u8, &second), (9, &third)];
    let map = probe(&members, &tx, to);
    assert_eq!(map, [(7, 1), (9, 0)]);
    attach_reuseport_cbpf(&third, &steering::program(&map).unwrap()).unwrap();
    for &(slot, s) in &members {
        tx.send_to(&bth(u32::from(slot) << 16 | 5), to).unwrap();
        assert_eq!(next_qpn(s), Some(u32::from(slot) << 16 | 5), "slot {slot}");
    }
}
