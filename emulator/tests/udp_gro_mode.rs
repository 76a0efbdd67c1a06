//! A UDP link turns GRO off while it receives single datagrams one at a time (a ping-pong),
//! receiving them with recvfrom, and on again at a burst (see `net::gro_mode`): every
//! datagram arrives whole and in order across the switches, a GSO run queued before GRO
//! went off included.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use softverbs_emu::net::batched_io::send_runs;
use softverbs_emu::net::gro_mode::PLAIN_RUN;
use softverbs_emu::net::udp::UdpLink;
use softverbs_emu::net::Link;
use softverbs_emu::wire::icrc::{write_icrc, IcrcContext, IpHeaderInfo, IPV4_FLAG_DF};

/// A link on its own loopback address and an OS-chosen port, and a plain sender.
fn link_and_sender() -> (UdpLink, UdpSocket, SocketAddr) {
    let link = UdpLink::bind(IpAddr::V4(Ipv4Addr::new(127, 0, 31, 7)), 0).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dst = link.local_addr();
    (link, tx, dst)
}

/// Receives `want` datagrams with receives of at most `max`, within five seconds.
fn receive(link: &UdpLink, want: usize, max: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let started = Instant::now();
    while got.len() < want && started.elapsed() < Duration::from_secs(5) {
        link.wait_readable(Duration::from_millis(100)).unwrap();
        link.recv_ready(max, &mut |d| got.push(d.payload.to_vec()))
            .unwrap();
    }
    got
}

/// A receive that finds nothing, as a polling application's between two messages.
fn nothing_there(link: &UdpLink) {
    assert_eq!(
        link.recv_ready(1, &mut |_| panic!("nothing was sent"))
            .unwrap(),
        0
    );
}

/// Sends `PLAIN_RUN - 1` single datagrams as a ping-pong's: each received alone, after a
/// receive that found nothing.
fn ping_pong_up_to_the_switch(link: &UdpLink, tx: &UdpSocket, dst: SocketAddr) {
    for i in 0..PLAIN_RUN - 1 {
        nothing_there(link);
        let datagram = [i as u8; 20];
        tx.send_to(&datagram, dst).unwrap();
        assert_eq!(receive(link, 1, 1), vec![datagram.to_vec()]);
    }
    nothing_there(link);
}

/// The last single datagram of the ping-pong, received: GRO goes off.
fn last_single(link: &UdpLink) {
    assert_eq!(receive(link, 1, 1), vec![b"last single".to_vec()]);
    assert!(
        !link.coalescing(),
        "{PLAIN_RUN} single datagrams turn GRO off"
    );
}

/// A link whose ping-pong of single datagrams turned GRO off, its sender and its address;
/// `None` where the kernel (or the user) has no GRO.
fn gro_switched_off() -> Option<(UdpLink, UdpSocket, SocketAddr)> {
    let (link, tx, dst) = link_and_sender();
    if !link.coalescing() {
        return None;
    }
    ping_pong_up_to_the_switch(&link, &tx, dst);
    tx.send_to(b"last single", dst).unwrap();
    last_single(&link);
    Some((link, tx, dst))
}

/// A GSO run of `count` datagrams of 700 bytes (distinct contents) to `dst`, or `None`
/// when this kernel cannot send one.
fn send_run(tx: &UdpSocket, dst: SocketAddr, count: u8) -> Option<Vec<Vec<u8>>> {
    let run: Vec<Vec<u8>> = (0..count).map(|i| vec![0x40 + i; 700]).collect();
    let list: Vec<(&[u8], SocketAddr)> = run.iter().map(|d| (d.as_slice(), dst)).collect();
    send_runs(tx, &list, &[count as usize]).ok()?;
    Some(run)
}

/// A whole RoCE packet from `from` to `to` (IPv4, DF, identification 0, as softverbs sends):
/// a BTH, `tag` as eight bytes of payload, its ICRC.
fn whole_packet(from: SocketAddr, to: SocketAddr, tag: u8) -> Vec<u8> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (from.ip(), to.ip()) else {
        unreachable!("IPv4 test addresses")
    };
    let mut packet = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, tag];
    packet.extend([tag; 8]);
    packet.extend([0; 4]);
    let ctx = IcrcContext {
        ip: IpHeaderInfo::V4 {
            src,
            dst,
            identification: 0,
            flags_fragment: IPV4_FLAG_DF,
        },
        udp_src_port: from.port(),
        udp_dst_port: to.port(),
    };
    write_icrc(&ctx, &mut packet);
    packet
}

#[test]
fn whole_packets_are_taken_while_checked_and_anything_else_turns_gro_on() {
    let Some((link, tx, dst)) = gro_switched_off() else {
        return; // no UDP GRO in this kernel (or SOFTVERBS_UDP_GSO=0): nothing switches
    };
    // The queue has not been found empty since: receives are checked. Whole packets (their
    // ICRC right) are taken as they are, and GRO stays off.
    for tag in 0..5u8 {
        let packet = whole_packet(tx.local_addr().unwrap(), dst, tag);
        tx.send_to(&packet, dst).unwrap();
        assert_eq!(receive(&link, 1, 1), vec![packet]);
        assert!(!link.coalescing());
    }
    // A datagram that is not one packet may be a run kept whole: GRO goes on before it is
    // received (and it arrives as it was sent).
    tx.send_to(b"no packet", dst).unwrap();
    assert_eq!(receive(&link, 1, 1), vec![b"no packet".to_vec()]);
    assert!(link.coalescing());
}

#[test]
fn a_run_queued_before_gro_went_off_is_still_split() {
    let (link, tx, dst) = link_and_sender();
    if !link.coalescing() {
        return; // no UDP GRO in this kernel (or SOFTVERBS_UDP_GSO=0): nothing switches
    }
    ping_pong_up_to_the_switch(&link, &tx, dst);
    assert!(link.coalescing());
    // The last single datagram, and behind it a run the kernel queues whole (GRO is on).
    tx.send_to(b"last single", dst).unwrap();
    let Some(run) = send_run(&tx, dst, 3) else {
        return; // no UDP GSO to send with
    };
    last_single(&link);
    // A recvfrom now would return the run as one 2100-byte datagram.
    assert_eq!(receive(&link, 3, 1), run);
}

#[test]
fn single_datagrams_turn_gro_off_and_a_burst_turns_it_on() {
    let Some((link, tx, dst)) = gro_switched_off() else {
        return; // no UDP GRO in this kernel (or SOFTVERBS_UDP_GSO=0): nothing switches
    };
    // Single datagrams go on arriving whole once the queue drained (recvfrom).
    std::thread::sleep(Duration::from_millis(2));
    for i in 0..10u8 {
        nothing_there(&link);
        tx.send_to(&[i; 33], dst).unwrap();
        assert_eq!(receive(&link, 1, 1), vec![vec![i; 33]]);
    }
    assert!(!link.coalescing());
    nothing_there(&link);
    // A run now arrives split by the kernel: one datagram, then a burst of the rest.
    let Some(run) = send_run(&tx, dst, 8) else {
        return;
    };
    let mut got = receive(&link, 1, 1);
    got.extend(receive(&link, 7, 64));
    assert_eq!(got, run);
    assert!(link.coalescing(), "a burst turns GRO back on");
    // And runs are whole again: one receive of one slot brings all of the next one.
    let run = send_run(&tx, dst, 4).unwrap();
    assert_eq!(receive(&link, 4, 1), run);
}
