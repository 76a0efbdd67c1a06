//! Shared qemu socket links in one process: members on one frames address, and a plain UDP
//! socket standing in for qemu (frames in, frames out), as `qemu_socket`'s own test does.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::qemu_link::SharedQemuLink;
use super::registry::Registry;
use super::steering::BpfInsn;
use super::tests::{scratch_registry, Pump};
use crate::net::{Link, OutPacket};
use crate::wire::{emit_ethernet_frame, write_icrc, IcrcContext, IpHeaderInfo, IPV4_FLAG_DF};

const OUR_MAC: [u8; 6] = [0x02, 0x00, 10, 77, 0, 1];
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x77, 0x00, 0x02];
const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// A member and the thread that receives for it.
struct Member {
    pump: Pump,
    link: Arc<SharedQemuLink>,
}

impl Member {
    fn join(reg: &Registry, frames_local: SocketAddr, qemu: SocketAddr) -> Member {
        let ip = IpAddr::V4(OUR_IP);
        let link =
            SharedQemuLink::join_registry(reg.clone(), frames_local, qemu, OUR_MAC, ip, 4791);
        let link = Arc::new(link.unwrap());
        let pump = {
            let link = link.clone();
            Pump::start(move |deliver| {
                if let Some(d) = link.recv(Duration::from_millis(5)).unwrap() {
                    assert_eq!(d.dst, SocketAddr::new(IpAddr::V4(OUR_IP), 4791));
                    deliver(&d.payload);
                }
            })
        };
        Member { pump, link }
    }

    fn next(&self) -> Option<u32> {
        self.pump.next()
    }

    fn forwarded_out(&self) -> u64 {
        let c = self.link.shared_port().unwrap().counters();
        c.forwarded_out.load(Ordering::Relaxed)
    }

    fn probe_rounds(&self) -> u64 {
        let c = self.link.shared_port().unwrap().counters();
        c.probe_rounds.load(Ordering::Relaxed)
    }

    fn slot(&self) -> u32 {
        u32::from(self.link.shared_port().unwrap().slot())
    }
}

/// A fake qemu on `ip` and the frames address of the members (free when chosen).
fn qemu_and_frames_address(ip: Ipv4Addr) -> (UdpSocket, SocketAddr) {
    let qemu = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0)).unwrap();
    qemu.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let frames_local = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0))
        .unwrap()
        .local_addr()
        .unwrap();
    (qemu, frames_local)
}

/// A frame from the guest to us carrying a UD SEND to `dest_qpn`, ICRC and all.
fn roce_frame(dest_qpn: u32) -> Vec<u8> {
    let q = dest_qpn.to_be_bytes();
    let mut payload = vec![0x64, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0, 0, 0, 1];
    payload.extend_from_slice(&[0u8; 8 + 16 + 4]); // DETH, data, ICRC
    let ctx = IcrcContext {
        ip: IpHeaderInfo::V4 {
            src: GUEST_IP,
            dst: OUR_IP,
            identification: 0x4242,
            flags_fragment: IPV4_FLAG_DF,
        },
        udp_src_port: 0xc001,
        udp_dst_port: 4791,
    };
    write_icrc(&ctx, &mut payload);
    emit_ethernet_frame(&ctx, GUEST_MAC, OUR_MAC, &payload)
}

/// The guest's ARP request for our address (broadcast).
fn arp_request() -> Vec<u8> {
    [
        &[0xff; 6][..],
        &GUEST_MAC,
        &[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1],
        &GUEST_MAC,
        &GUEST_IP.octets(),
        &[0; 6],
        &OUR_IP.octets(),
    ]
    .concat()
}

/// A RoCE packet from us to the guest.
fn packet_to_guest(psn: u8) -> OutPacket {
    OutPacket {
        dst_ip: IpAddr::V4(GUEST_IP),
        udp_dst_port: 4791,
        udp_src_port: 0xc002,
        bytes: vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, psn, 0, 0, 0, 0],
        payload: None,
    }
}

/// The Ethernet types of the frames qemu receives until none comes for `quiet`.
fn frames_at_qemu(qemu: &UdpSocket, quiet: Duration) -> Vec<u16> {
    qemu.set_read_timeout(Some(quiet)).unwrap();
    let mut buf = [0u8; 2048];
    let mut types = Vec::new();
    while let Ok(n) = qemu.recv(&mut buf) {
        assert!(n >= 14);
        types.push(u16::from_be_bytes([buf[12], buf[13]]));
    }
    types
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn frames_reach_the_member_owning_their_qpn_and_arp_reaches_every_station() {
    let (qemu, frames_local) = qemu_and_frames_address(Ipv4Addr::new(127, 29, 6, 1));
    let reg = scratch_registry("qemu-steer");
    let a = Member::join(&reg, frames_local, qemu.local_addr().unwrap());
    let b = Member::join(&reg, frames_local, qemu.local_addr().unwrap());
    assert_eq!((a.slot(), b.slot()), (1, 2));
    assert_eq!(b.link.qpn_range(), Some(0x2_0002..0x3_0000));
    // Two members share qemu's socket buffer: each paces at half the rate.
    let half = crate::net::qemu_socket::pace_rate() / 2;
    wait_until("a learnt of b", || a.link.pace_rate_bytes_per_s() == half);
    assert_eq!(b.link.pace_rate_bytes_per_s(), half);

    for (m, slot) in [(&a, 1u32), (&b, 2)] {
        for n in 2..6u32 {
            qemu.send_to(&roce_frame(slot << 16 | n), frames_local)
                .unwrap();
            assert_eq!(m.next(), Some(slot << 16 | n), "slot {slot}");
        }
    }
    assert_eq!(
        a.forwarded_out() + b.forwarded_out(),
        0,
        "steered, not forwarded"
    );
    // QP1 names no slot: one member gets it (the kernel's hash).
    qemu.send_to(&roce_frame(1), frames_local).unwrap();
    let qp1_seen = [&a, &b]
        .iter()
        .filter(|m| m.pump.got.recv_timeout(Duration::from_millis(300)) == Ok(1))
        .count();
    assert_eq!(qp1_seen, 1);

    // The same frame from anyone but qemu is dropped by whichever member it reaches.
    let stranger = UdpSocket::bind("127.29.6.1:0").unwrap();
    stranger
        .send_to(&roce_frame(1 << 16 | 7), frames_local)
        .unwrap();
    wait_until("the stranger's frame counted", || {
        let strangers = |m: &Member| {
            m.link
                .frames_counters()
                .from_strangers
                .load(Ordering::Relaxed)
        };
        strangers(&a) + strangers(&b) == 1
    });
    assert!(a.pump.got.recv_timeout(Duration::from_millis(100)).is_err());

    // ARP reaches one member through the port and the other through it: both stations
    // answer, and both learnt the guest's MAC (their packets go out at once, no request).
    qemu.send_to(&arp_request(), frames_local).unwrap();
    assert_eq!(
        frames_at_qemu(&qemu, Duration::from_millis(500)),
        [0x0806, 0x0806]
    );
    let passed = |m: &Member| {
        m.link
            .frames_counters()
            .passed_to_all
            .load(Ordering::Relaxed)
    };
    assert_eq!(passed(&a) + passed(&b), 1);
    a.link.send(&mut packet_to_guest(1)).unwrap();
    b.link.send(&mut packet_to_guest(2)).unwrap();
    assert_eq!(
        frames_at_qemu(&qemu, Duration::from_millis(300)),
        [0x0800, 0x0800]
    );
}

#[test]
fn a_frame_the_kernel_gives_the_wrong_member_is_forwarded_to_its_owner() {
    let (qemu, frames_local) = qemu_and_frames_address(Ipv4Addr::new(127, 29, 7, 1));
    let reg = scratch_registry("qemu-forward");
    let qemu_addr = qemu.local_addr().unwrap();
    let a = Member::join(&reg, frames_local, qemu_addr);
    let b = Member::join(&reg, frames_local, qemu_addr);
    // A program that steers everything to index 0 (a), as a stale one could. A member
    // still in its join may replace it: attach again until one frame went the wrong way.
    let everything_to_a = [BpfInsn {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    for _ in 0..5 {
        super::attach_reuseport_cbpf(a.link.socket_for_tests(), &everything_to_a).unwrap();
        let before = a.forwarded_out();
        qemu.send_to(&roce_frame(2 << 16 | 7), frames_local)
            .unwrap();
        assert_eq!(b.next(), Some(2 << 16 | 7), "b gets its frame");
        // a counts the forward just after b may have received it.
        let started = Instant::now();
        while a.forwarded_out() == before && started.elapsed() < Duration::from_millis(200) {
            std::thread::sleep(Duration::from_millis(2));
        }
        if a.forwarded_out() > before {
            break;
        }
    }
    assert_eq!(a.forwarded_out(), 1, "one frame reached b through a");
    let forwarded_in = b
        .link
        .shared_port()
        .unwrap()
        .counters()
        .forwarded_in
        .load(Ordering::Relaxed);
    assert_eq!(forwarded_in, 1);
    assert!(a.pump.got.try_recv().is_err(), "a kept nothing");
}

#[test]
fn a_member_leaving_resteers_and_the_others_pace_at_their_new_share() {
    let (qemu, frames_local) = qemu_and_frames_address(Ipv4Addr::new(127, 29, 8, 1));
    let reg = scratch_registry("qemu-leave");
    let qemu_addr = qemu.local_addr().unwrap();
    let a = Member::join(&reg, frames_local, qemu_addr);
    let b = Member::join(&reg, frames_local, qemu_addr);
    let c = Member::join(&reg, frames_local, qemu_addr);
    let third = crate::net::qemu_socket::pace_rate() / 3;
    wait_until("pacing shared by three", || {
        [&a, &b, &c]
            .iter()
            .all(|m| m.link.pace_rate_bytes_per_s() == third)
    });

    // b leaves: a or c notices, probes again and steers right, and both pace at half.
    let rounds = a.probe_rounds() + c.probe_rounds();
    drop(b);
    wait_until("nobody re-probed", || {
        a.probe_rounds() + c.probe_rounds() > rounds
    });
    let half = crate::net::qemu_socket::pace_rate() / 2;
    wait_until("pacing shared by two", || {
        a.link.pace_rate_bytes_per_s() == half && c.link.pace_rate_bytes_per_s() == half
    });
    let forwarded = a.forwarded_out() + c.forwarded_out();
    for (m, slot) in [(&a, 1u32), (&c, 3)] {
        for n in 2..5u32 {
            qemu.send_to(&roce_frame(slot << 16 | n), frames_local)
                .unwrap();
            assert_eq!(m.next(), Some(slot << 16 | n), "slot {slot} after b left");
        }
    }
    assert_eq!(
        a.forwarded_out() + c.forwarded_out(),
        forwarded,
        "steered again"
    );
}
