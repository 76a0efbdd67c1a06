//! The project's own rdma_cm C programs (tests/c/), compiled against Debian's rdma_cma.h
//! and rdma_verbs.h, linked with the drop-in (BIND_NOW) and run on it:
//! - rdmacm_seed.c: the seed man pages (rdma_post_recvv over several SGEs, rdma_post_send
//!   with and without an MR, rdma_post_write into a buffer advertised in private data),
//!   server and client in two processes, every byte and completion checked;
//! - rdmacm_bad_input.c: calls on destroyed ids, events acknowledged twice, unreachable
//!   addresses, closed ports, private data too long, malformed multicast joins and
//!   leaves, a join's MULTICAST_JOIN parameters; each errno or event checked;
//! - rpma_seed.c: Debian's librpma 1.2, unmodified, on both drop-ins: rpma_srq_recv's
//!   unordered set of buffers shared by three connections from three processes, and
//!   rpma_write / rpma_read / rpma_flush / rpma_atomic_write checked in the remote memory.

mod common;

use std::time::Duration;

const LIBS: [&str; 2] = ["librdmacm.so.1", "libibverbs.so.1"];

#[test]
fn seed_man_pages_run_between_two_processes() {
    let Some(exe) = common::compile_c("rdmacm_seed", &LIBS) else {
        return;
    };
    let port = common::free_port().to_string();
    let (server, client) = common::run_pair(
        &exe,
        47,
        &["server".into(), "127.22.47.1".into(), port.clone()],
        &[
            "client".into(),
            "127.22.47.1".into(),
            port,
            "127.22.47.2".into(),
        ],
        Duration::from_secs(60),
    );
    assert!(server.contains("server checks passed"), "{server}");
    assert!(client.contains("client checks passed"), "{client}");
}

#[test]
fn bad_input_to_rdma_cm_gets_errors_not_crashes() {
    let Some(exe) = common::compile_c("rdmacm_bad_input", &LIBS) else {
        return;
    };
    let port = common::free_port().to_string();
    let child = common::on_dropin(&exe, 48)
        .args(["127.22.48.1", "127.22.48.2", "127.22.48.9", &port])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (out, in_time) = common::wait(child, Duration::from_secs(60));
    let t = common::text(&out);
    assert!(in_time && out.status.success(), "{t}");
    assert!(t.contains("rdmacm bad input: 74 checks passed"), "{t}");
}

#[test]
fn librpma_runs_on_the_drop_ins_with_a_shared_rq_and_three_clients() {
    if !std::path::Path::new("/usr/include/librpma.h").exists() {
        eprintln!("SKIPPED: /usr/include/librpma.h is absent (apt-get install librpma-dev)");
        return;
    }
    let Some(exe) = common::compile_c("rpma_seed", &["librpma.so", LIBS[0], LIBS[1]]) else {
        return;
    };
    let port = common::free_port().to_string();
    let spawn = |args: &[&str]| {
        common::on_dropin(&exe, 49)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let limit = Duration::from_secs(60);
    let server = spawn(&["server", "127.22.49.1", &port, "3"]);
    let server = std::thread::spawn(move || common::wait(server, limit));
    // The clients retry while the server does not listen yet.
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let child = spawn(&["client", "127.22.49.1", &port, &i.to_string()]);
            std::thread::spawn(move || common::wait(child, limit))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (out, in_time) = c.join().unwrap();
        let t = common::text(&out);
        assert!(in_time && out.status.success(), "client {i}:\n{t}");
        assert!(t.contains(&format!("client {i} checks passed")), "{t}");
    }
    let (out, in_time) = server.join().unwrap();
    let t = common::text(&out);
    assert!(in_time && out.status.success(), "server:\n{t}");
    assert!(t.contains("server checks passed"), "{t}");
}
