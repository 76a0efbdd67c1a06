//! Unmodified Debian rdma_cm programs (rdmacm-utils, perftest -R) on the drop-in
//! librdmacm.so.1, server and client in two processes, on two devices and on one shared
//! device. Each program checks its own data (rping -v prints every ping it verified;
//! ucmatose, udaddy and rdma_server/client fail on a lost or wrong message, mckey's
//! receiver waits for every multicast message); the tests
//! check the exit codes and what the programs print.

mod common;

use std::time::Duration;

use common::{devices, installed, run_pair, run_pair_on};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

const LIMIT: Duration = Duration::from_secs(90);

#[test]
fn rping_runs_verified_on_two_devices_and_on_one() {
    let Some(rping) = installed("rping", "rdmacm-utils") else {
        return;
    };
    for (count, size) in [(1, 64), (10, 1000), (3, 65535)] {
        let port = common::free_port().to_string();
        let (c, sz) = (count.to_string(), size.to_string());
        let server = s(&[
            "-s",
            "-a",
            "127.22.50.1",
            "-p",
            &port,
            "-C",
            &c,
            "-S",
            &sz,
            "-v",
        ]);
        let client = s(&[
            "-c",
            "-a",
            "127.22.50.1",
            "-I",
            "127.22.50.2",
            "-p",
            &port,
            "-C",
            &c,
            "-S",
            &sz,
            "-v",
        ]);
        let (server_out, client_out) = run_pair(&rping, 50, &server, &client, LIMIT);
        let last = format!("ping data: rdma-ping-{}: ", count - 1);
        for (who, out) in [("server", &server_out), ("client", &client_out)] {
            assert!(
                out.contains(&last),
                "{who} -C {count} -S {size}:\n{}",
                common::tail(out, 3000)
            );
            assert_eq!(out.matches("ping data: rdma-ping-").count(), count, "{who}");
        }
    }
    // Both sides moving their own QPs (-q: rdma_init_qp_attr, CONNECT_RESPONSE,
    // rdma_establish).
    let port = common::free_port().to_string();
    let server = s(&[
        "-s",
        "-q",
        "-a",
        "127.22.50.1",
        "-p",
        &port,
        "-C",
        "3",
        "-v",
    ]);
    let client = s(&[
        "-c",
        "-q",
        "-a",
        "127.22.50.1",
        "-I",
        "127.22.50.2",
        "-p",
        &port,
        "-C",
        "3",
        "-v",
    ]);
    let (_, client_out) = run_pair(&rping, 50, &server, &client, LIMIT);
    assert!(
        client_out.contains("ping data: rdma-ping-2: "),
        "{client_out}"
    );
    // Both ends on one device (the client's source is the server's address).
    let port = common::free_port().to_string();
    let server = s(&["-s", "-a", "127.22.41.1", "-p", &port, "-C", "5", "-v"]);
    let client = s(&["-c", "-a", "127.22.41.1", "-p", &port, "-C", "5", "-v"]);
    let (_, client_out) = run_pair_on(&rping, "127.22.41.1", &server, &client, LIMIT);
    assert!(
        client_out.contains("ping data: rdma-ping-4: "),
        "{client_out}"
    );
}

#[test]
fn ucmatose_runs_several_connections() {
    let Some(ucmatose) = installed("ucmatose", "rdmacm-utils") else {
        return;
    };
    let port = common::free_port().to_string();
    let server = s(&["-b", "127.22.42.1", "-p", &port, "-c", "4", "-C", "20"]);
    let client = s(&[
        "-s",
        "127.22.42.1",
        "-b",
        "127.22.42.2",
        "-p",
        &port,
        "-c",
        "4",
        "-C",
        "20",
    ]);
    run_exchange(&ucmatose, 42, &server, &client);
}

/// ucmatose and udaddy (one family of rdmacm-utils): server and client must each report
/// their transfers complete and return status 0.
fn run_exchange(program: &std::path::Path, slot: u8, server: &[String], client: &[String]) {
    let (server_out, client_out) = run_pair(program, slot, server, client, LIMIT);
    for out in [&server_out, &client_out] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
}

#[test]
fn udaddy_resolves_through_sidr_and_exchanges_datagrams() {
    let Some(udaddy) = installed("udaddy", "rdmacm-utils") else {
        return;
    };
    let server = s(&["-b", "127.22.43.1", "-c", "2", "-C", "10"]);
    let client = s(&[
        "-s",
        "127.22.43.1",
        "-b",
        "127.22.43.2",
        "-c",
        "2",
        "-C",
        "10",
    ]);
    run_exchange(&udaddy, 43, &server, &client);
}

#[test]
fn mckey_sends_to_a_multicast_group_on_two_devices_and_on_one() {
    let Some(mckey) = installed("mckey", "rdmacm-utils") else {
        return;
    };
    // The receiver joins, posts its receives and waits for every message; the sender
    // joins (send-only with -o), waits 3 s (mckey's own pause) and sends. A lost
    // message leaves the receiver waiting: the run fails on the time limit.
    for (sender_bind, sender_flags) in [("127.22.53.2", &[][..]), ("127.22.53.1", &["-o"][..])] {
        let receiver = s(&[
            "-m",
            "239.22.53.1",
            "-b",
            "127.22.53.1",
            "-C",
            "20",
            "-S",
            "1000",
        ]);
        let mut sender = s(&[
            "-m",
            "239.22.53.1",
            "-b",
            sender_bind,
            "-s",
            "-C",
            "20",
            "-S",
            "1000",
        ]);
        sender.extend(s(sender_flags));
        let (r, c) = run_pair(&mckey, 53, &receiver, &sender, LIMIT);
        for (who, out) in [("receiver", &r), ("sender", &c)] {
            assert!(
                out.contains("joined dgid: ::ffff:239.22.53.1"),
                "{who}: {out}"
            );
            assert!(out.contains("data transfers complete"), "{who}: {out}");
            assert!(out.contains("return status 0"), "{who}: {out}");
        }
        assert!(r.contains("receiving data transfers"), "{r}");
    }
}

#[test]
fn rdma_server_and_client_use_the_synchronous_endpoint_api() {
    let (Some(server), Some(client)) = (
        installed("rdma_server", "rdmacm-utils"),
        installed("rdma_client", "rdmacm-utils"),
    ) else {
        return;
    };
    // Two programs: run_pair takes one, so start the server by hand.
    let port = common::free_port().to_string();
    let server = common::on_dropin(&server, 44)
        .args(["-s", "127.22.44.1", "-p", &port])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut client_out = String::new();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        let c = common::on_dropin(&client, 44)
            .args(["-s", "127.22.44.1", "-p", &port])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (out, in_time) = common::wait(c, LIMIT);
        client_out = common::text(&out);
        assert!(in_time, "rdma_client timed out:\n{client_out}");
        if out.status.success() {
            break;
        }
    }
    let (out, in_time) = common::wait(server, LIMIT);
    let server_out = common::text(&out);
    assert!(in_time && out.status.success(), "{server_out}");
    assert!(server_out.contains("rdma_server: end 0"), "{server_out}");
    assert!(client_out.contains("rdma_client: end 0"), "{client_out}");
}

#[test]
fn perftest_with_rdma_cm_runs() {
    for (program, extra) in [
        ("ib_send_bw", &["-n", "200"][..]),
        ("ib_write_bw", &["-n", "200"][..]),
        ("ib_read_lat", &["-n", "200"][..]),
    ] {
        let Some(exe) = installed(program, "perftest") else {
            return;
        };
        let port = common::free_port().to_string();
        let mut server = s(&["-R", "-p", &port]);
        server.extend(s(extra));
        let mut client = server.clone();
        // Server and client each on a device of its own (without --source_ip the server
        // binds the wildcard, every device, and the client takes the server's device);
        // the one-device case follows.
        server.extend(s(&["--source_ip", "127.22.46.1"]));
        client.extend(s(&["--source_ip", "127.22.46.2", "127.22.46.1"]));
        let (server_out, client_out) = run_pair_on(&exe, &devices(46), &server, &client, LIMIT);
        for out in [&server_out, &client_out] {
            assert!(
                out.contains("Data ex. method : rdma_cm"),
                "{program}:\n{out}"
            );
            assert!(out.contains("remote address"), "{program}:\n{out}");
        }
        let results = if program.ends_with("_lat") {
            "t_typical"
        } else {
            "BW average"
        };
        assert!(client_out.contains(results), "{program}:\n{client_out}");
    }
    // Both ends on one device (two processes sharing it): the client's REQs reach the
    // device's port, where the kernel may hand them to the client's own process; they wait
    // there until the server's listen is in the device's listen table (docs/shared-devices.md).
    if let Some(exe) = installed("ib_send_bw", "perftest") {
        let port = common::free_port().to_string();
        let server = s(&["-R", "-p", &port, "-n", "200", "--source_ip", "127.22.46.1"]);
        let mut client = server.clone();
        client.push("127.22.46.1".into());
        let (server_out, client_out) = run_pair_on(&exe, &devices(46), &server, &client, LIMIT);
        assert!(server_out.contains("remote address"), "{server_out}");
        assert!(client_out.contains("BW average"), "{client_out}");
    }
}
