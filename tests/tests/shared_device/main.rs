//! Many OS processes on one emulated device (issue 29): each test process here opens a
//! device of its own address (127.30.N.1, port 4791) and runs this test binary again as the
//! other processes (`child`). They share the device's port: each gets its own slot and QP
//! numbers, and packets reach the process owning their QP.

mod child;
mod cm;
mod rc;
mod roles;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use softverbs::{SendWr, WcStatus};
use softverbs_emu::net::shared_port::registry::Registry;

use child::{num, Child, Dev};
use rc::{short_retry, slot_of, Server};

/// The member of the device's registry with process id `pid`: (slot, QPs it published).
fn member(dev: &Dev, pid: u32) -> Option<(u8, u32)> {
    Registry::for_device(dev.ip, 4791)
        .unwrap()
        .members()
        .unwrap()
        .into_iter()
        .find_map(|(slot, info)| info.filter(|i| i.pid == pid).map(|i| (slot, i.qps)))
}

#[test]
#[ignore = "a child process of the tests of this file, run by them"]
fn member_role() {
    let Ok(role) = std::env::var(child::ROLE_ENV) else {
        return;
    };
    let words: Vec<&str> = role.split_whitespace().collect();
    match words[0] {
        "rc" => rc::client_role(&words[1..]),
        "ud" => roles::ud_role(),
        "ring" => roles::ring_role(),
        "plain" => roles::plain_role(),
        "exit" => roles::exit_role(),
        "cm" => cm::client_role(&words[1..]),
        "cm_listen" => cm::listen_role(),
        "fork" => roles::fork_role(),
        "sidr" => cm::sidr_role(&words[1..]),
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn a_server_and_four_client_processes_on_one_device_send_write_read_and_add() {
    let dev = Dev::new(1);
    let mut server = Server::new(dev.open());
    let server_slot = slot_of(&server.ctx);
    let mut clients: Vec<Child> = (0..4)
        .map(|k| Child::spawn(&format!("rc {k} full"), &dev))
        .collect();
    let mut slots = HashSet::from([server_slot]);
    for (k, c) in clients.iter_mut().enumerate() {
        let line = c.expect("ep");
        let slot = num(&line, "slot") as u8;
        assert!(slots.insert(slot), "slot {slot} given twice");
        assert_eq!(num(&line, "qpn") >> 16, u64::from(slot), "{line}");
        let reply = server.accept(k, &line, &Default::default());
        c.send(&reply);
    }
    for (_, qp) in &server.conns {
        assert_eq!(qp.qp_num() >> 16, u32::from(server_slot));
    }
    let qpns: HashSet<u32> = server.conns.iter().map(|(_, q)| q.qp_num()).collect();
    assert_eq!(qpns.len(), 4);
    for c in &clients {
        c.expect("ok");
    }
    for k in 0..4 {
        server.check_full_client(k, k);
    }
    // Client k added k + 1, ADDS times.
    assert_eq!(
        server.counter(),
        (1..=4).map(|a| a * rc::ADDS as u64).sum::<u64>()
    );
    // The registry says who shares the device (what `softverbs devices -v` shows).
    assert_eq!(member(&dev, std::process::id()), Some((server_slot, 4)));
    for c in &clients {
        let (slot, qps) = member(&dev, c.pid()).expect("each client is a member");
        assert!(slots.contains(&slot));
        assert_eq!(qps, 1);
    }
    for c in clients {
        c.finish();
    }
    assert_eq!(
        server
            .ctx
            .emulator()
            .unwrap()
            .counters()
            .unknown_qp
            .load(Ordering::Relaxed),
        0
    );
}

#[test]
fn ud_between_two_processes_on_one_device() {
    let dev = Dev::new(2);
    let ctx = dev.open();
    let mut peer = Child::spawn("ud", &dev);
    let line = peer.expect("ud");
    let ud = roles::UdEnd::new(&ctx);
    assert_ne!(num(&line, "slot") as u8, slot_of(&ctx));
    peer.send(&format!("qpn={}", ud.qp.qp_num()));
    let peer_qpn = num(&line, "qpn") as u32;
    for i in 0..roles::UD_SIZES.len() {
        ud.post_recv(i as u64, i);
    }
    for (i, &len) in roles::UD_SIZES.iter().enumerate() {
        ud.send(
            i as u64,
            peer_qpn,
            &softverbs_conformance::pattern(i as u64, len),
        );
    }
    // Each message comes back transformed by the peer, which checked it first.
    for (i, &len) in roles::UD_SIZES.iter().enumerate() {
        ud.expect_recv(
            i as u64,
            i,
            peer_qpn,
            &softverbs_conformance::pattern(100 + i as u64, len),
            dev.ip,
        );
    }
    peer.expect("ok");
    peer.finish();
}

#[test]
fn a_process_killed_mid_transfer_leaves_the_others_to_complete() {
    let dev = Dev::new(3);
    let mut server = Server::new(dev.open());
    const WRITES: u64 = 160;
    let roles = [
        format!("rc 0 stream {WRITES}"),
        format!("rc 1 stream {WRITES}"),
        "rc 2 victim".to_string(),
    ];
    let mut clients: Vec<Child> = roles.iter().map(|r| Child::spawn(r, &dev)).collect();
    for (k, c) in clients.iter_mut().enumerate() {
        let line = c.expect("ep");
        let opts = if k == 2 {
            short_retry()
        } else {
            Default::default()
        };
        let reply = server.accept(k, &line, &opts);
        c.send(&reply);
    }
    clients[2].expect("started");
    clients[0].expect("streaming");
    clients[1].expect("streaming");
    clients[2].kill();
    for (k, c) in clients[..2].iter().enumerate() {
        let last = num(&c.expect("ok"), "last");
        assert_eq!(last, WRITES - 1);
        assert_eq!(
            server.bytes(k * rc::REGION, rc::REGION),
            softverbs_conformance::pattern(k as u64 * 1000 + last, rc::REGION),
            "client {k}'s last WRITE"
        );
    }
    // Sending to the killed process's QP: nobody answers, and the retries end in
    // RETRY_EXC_ERR; every packet to its QP reached a live member that counted it as
    // for an unknown QP.
    let (cq, qp) = &server.conns[2];
    server.recv_mr.write(0, b"anyone?").unwrap();
    qp.post_send(&[SendWr::send(7, vec![server.recv_mr.sge(0, 7).unwrap()])])
        .unwrap();
    let wc = cq.poll_wait(1, Duration::from_secs(20)).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::RetryExcErr));
    // Counted where they landed, which may be a moment after the retries ended: a datagram
    // can wait in a member's socket until its engine's nap ends. Asked again until then.
    let asked_until = std::time::Instant::now() + Duration::from_secs(5);
    let unknown = loop {
        let mut unknown = server
            .ctx
            .emulator()
            .unwrap()
            .counters()
            .unknown_qp
            .load(Ordering::Relaxed);
        for c in clients[..2].iter_mut() {
            c.send("report");
            unknown += num(&c.expect("report"), "unknown_qp");
        }
        if unknown >= 3 || std::time::Instant::now() > asked_until {
            break unknown;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        unknown >= 3,
        "the first try and two retries were counted: {unknown}"
    );
    let mut clients = clients.into_iter();
    clients.next().unwrap().finish();
    clients.next().unwrap().finish();
}

#[test]
fn the_device_outlives_its_first_opener_and_later_opens_work() {
    let dev = Dev::new(4);
    let first = Child::spawn("plain", &dev);
    let first_slot = num(&first.expect("open"), "slot") as u8;
    let mut server = Server::new(dev.open());
    assert_ne!(slot_of(&server.ctx), first_slot);
    first.finish();
    // A process opening the device now takes the slot the first opener left, and talks
    // to the server.
    let mut later = Child::spawn("rc 0 full", &dev);
    let line = later.expect("ep");
    assert_eq!(
        num(&line, "slot") as u8,
        first_slot,
        "the free slot is reused"
    );
    let reply = server.accept(0, &line, &Default::default());
    later.send(&reply);
    later.expect("ok");
    server.check_full_client(0, 0);
    later.finish();
}

#[test]
fn thirty_two_processes_with_sixteen_qps_each_on_one_device() {
    let dev = Dev::new(5);
    const N: usize = 32;
    let wait = Duration::from_secs(120);
    let mut ring: Vec<Child> = (0..N).map(|_| Child::spawn("ring", &dev)).collect();
    let members: Vec<(u64, Vec<u32>)> = ring
        .iter()
        .map(|c| {
            let line = c.expect_within("eps", wait);
            let qpns = child::field(&line, "qpns")
                .split(',')
                .map(|q| u32::from_str_radix(q.trim_start_matches("0x"), 16).unwrap())
                .collect();
            (num(&line, "slot"), qpns)
        })
        .collect();
    let mut all = HashSet::new();
    for (slot, qpns) in &members {
        assert_eq!(qpns.len(), roles::RING_QPS);
        for &q in qpns {
            assert_eq!(u64::from(q >> 16), *slot, "QPN {q:#x} of slot {slot}");
            assert!(all.insert(q), "QPN {q:#x} given twice");
        }
    }
    for (i, c) in ring.iter_mut().enumerate() {
        let next = &members[(i + 1) % N];
        let prev = &members[(i + N - 1) % N];
        let list = |q: &[u32]| {
            q.iter()
                .map(|q| format!("{q:#x}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        c.send(&format!(
            "next={} prev={} prev_slot={}",
            list(&next.1[8..]),
            list(&prev.1[..8]),
            prev.0
        ));
    }
    for c in &ring {
        c.expect_within("ok", wait);
    }
    for c in &ring {
        assert_eq!(member(&dev, c.pid()).map(|m| m.1), Some(16));
    }
    for c in ring {
        c.finish();
    }
}

#[test]
fn cm_clients_in_other_processes_reach_a_listener_on_the_same_device() {
    let dev = Dev::new(6);
    let ctx = dev.open();
    let listener = cm::listen(&dev);
    let mut clients: Vec<Child> = (0..2)
        .map(|k| Child::spawn(&format!("cm {k}"), &dev))
        .collect();
    let mut served: Vec<(softverbs::cm::CmId, u64)> =
        (0..2).map(|_| cm::serve_one(&listener)).collect();
    served.sort_by_key(|(_, k)| *k);
    assert_eq!(served.iter().map(|(_, k)| *k).collect::<Vec<_>>(), [0, 1]);
    for c in &clients {
        c.expect("ok");
    }
    // A third process cannot listen where this one does.
    let other = Child::spawn("cm_listen", &dev);
    assert_eq!(
        num(&other.expect("refused"), "errno"),
        libc::EADDRINUSE as u64
    );
    other.finish();
    // The clients disconnect: their DREQs reach this process, the DREPs them.
    let mut forwarded = cm::forwarded(&ctx);
    for c in clients.iter_mut() {
        c.send("disconnect");
    }
    for (id, _) in &served {
        id.expect(
            softverbs::cm::EventType::Disconnected,
            Duration::from_secs(10),
        )
        .unwrap();
    }
    for c in &clients {
        forwarded += num(&c.expect("done"), "forwarded");
    }
    // All QP1 datagrams of one address pair hash to one member: the others' MADs reach
    // their owners through it.
    assert!(forwarded > 0, "MADs were passed on between the processes");
    for c in clients {
        c.finish();
    }
}

#[test]
fn a_forked_child_gets_eperm_on_inherited_objects_and_opens_the_device_anew() {
    let dev = Dev::new(7);
    let forker = Child::spawn("fork", &dev);
    let child = forker.expect("child");
    let parent = forker.expect("parent");
    let eperm = libc::EPERM as u64;
    assert_eq!(
        (
            num(&child, "post"),
            num(&child, "poll"),
            num(&child, "create"),
            num(&child, "by_number")
        ),
        (eperm, eperm, eperm, eperm),
        "{child}"
    );
    let (child_slot, parent_slot) = (num(&child, "slot"), num(&parent, "slot"));
    assert_ne!(child_slot, parent_slot, "the child is a member of its own");
    assert_eq!(num(&child, "qpn") >> 16, child_slot);
    // The child came and went without touching the parent's share: still its slot, its
    // two QPs published.
    assert_eq!(member(&dev, forker.pid()), Some((parent_slot as u8, 2)));
    forker.finish();
}

#[test]
fn sidr_from_another_process_on_the_same_device_resolves_and_delivers() {
    use softverbs::cm::{create_ep, getaddrinfo, ConnParam, PortSpace, QpOptions};
    let dev = Dev::new(8);
    let _ctx = dev.open();
    let info = getaddrinfo(&dev.ip.to_string(), cm::UD_PORT, None, true, PortSpace::Udp).unwrap();
    let listener = create_ep(&info, None, None).unwrap();
    listener.listen(4).unwrap();
    let client = Child::spawn("sidr 3", &dev);
    let (id, req) = listener.get_request(Duration::from_secs(10)).unwrap();
    assert_eq!(&req.private_data[..4], b"ud 3");
    id.create_qp(None, &QpOptions::default()).unwrap();
    let landing = id
        .reg_msgs(softverbs::RdmaBuffer::new(40 + 64).unwrap())
        .unwrap();
    id.post_recv(3, &landing, 0, 40 + 64).unwrap();
    id.accept(&ConnParam::with_private_data(b"ud!")).unwrap();
    let sent = client.expect("sent");
    assert_eq!(num(&sent, "qpn") as u32, id.qp().unwrap().qp_num());
    let wc = id.get_recv_comp_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (3, WcStatus::Success, 40 + 10)
    );
    assert_eq!(&landing.to_vec()[40..50], b"datagram 3");
    client.finish();
}

/// A process that exits with its device open (as every C program on the drop-in does)
/// hands its share of the port over first (`engine::exit_hook`): its exit runs a probe
/// round, which this process answers while the leaver still holds its slot; then this
/// process notices it gone and runs a round of its own. Without the hook only the latter
/// happens, and whatever the kernel put in the closing socket meanwhile was lost.
#[test]
fn a_process_that_exits_with_its_device_open_hands_its_share_over_first() {
    let dev = Dev::new(9);
    let ctx = dev.open();
    let counters = || {
        let emu = ctx.emulator().expect("emulated");
        let c = emu.shared_counters().expect("shared");
        (
            c.probes_answered.load(Ordering::Relaxed),
            c.probe_rounds.load(Ordering::Relaxed),
        )
    };
    let leaver = Child::spawn("exit", &dev);
    leaver.expect("open");
    // The leaver's join round is over once it says so.
    let (answered, rounds) = counters();
    leaver.finish();
    let started = std::time::Instant::now();
    while counters().1 == rounds {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "this process never noticed the leaver gone"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        counters(),
        (answered + 2, rounds + 1),
        "a probe of the leaver's hand-over, then one of our own round"
    );
}
