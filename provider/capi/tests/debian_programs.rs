//! Unmodified Debian binaries (ibverbs-utils, perftest) on the drop-in libibverbs.so.1,
//! server and client in two processes on two emulated devices. The pingpongs run with
//! `-c`, so they verify every received buffer themselves. A test whose program is not
//! installed says SKIPPED and passes; .ci/run installs them.

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn ibv_devices_and_devinfo_show_the_emulated_devices() {
    let (Some(devices_bin), Some(devinfo)) = (
        installed("ibv_devices", "ibverbs-utils"),
        installed("ibv_devinfo", "ibverbs-utils"),
    ) else {
        return;
    };
    let out = on_dropin(&devices_bin, 1).output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("softrxe0") && t.contains("softrxe1"), "{t}");
    // The node GUID is the EUI-64 of the device's MAC 02:00:<IPv4>.
    assert!(t.contains("02007ffffe160101"), "{t}");

    let out = on_dropin(&devinfo, 1).arg("-v").output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in [
        "hca_id:\tsoftrxe0",
        "hca_id:\tsoftrxe1",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "::ffff:127.22.1.1, RoCE v2",
        "::ffff:127.22.1.2, RoCE v2",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(t.contains(want), "ibv_devinfo -v lacks {want:?}:\n{t}");
    }
}

/// Runs `program` between softrxe0 and softrxe1 once per variant (extra arguments).
fn pingpong(program: &str, slot: u8, variants: &[&[&str]]) {
    let Some(bin) = installed(program, "ibverbs-utils") else {
        return;
    };
    for extra in variants {
        let port = free_port().to_string();
        let mut server = s(&["-g", "1", "-c", "-n", "50", "-p", &port]);
        server.extend(s(extra));
        let mut client = server.clone();
        client.extend(s(&["-d", "softrxe1", "127.0.0.1"]));
        let (so, co) = run_pair(&bin, slot, &server, &client, LIMIT);
        for out in [&so, &co] {
            assert!(out.contains("50 iters in"), "{program} {extra:?}:\n{out}");
        }
    }
}

#[test]
fn ibv_rc_pingpong_runs_verified() {
    pingpong(
        "ibv_rc_pingpong",
        2,
        &[
            &[],
            &["-e"],
            &["-s", "1"],
            &["-s", "65536", "-e"],
            &["-N"],
            &["-m", "1024", "-s", "5000"],
        ],
    );
}

#[test]
fn ibv_uc_pingpong_runs_verified() {
    pingpong("ibv_uc_pingpong", 3, &[&[], &["-e"], &["-s", "30000"]]);
}

#[test]
fn ibv_ud_pingpong_runs_verified() {
    pingpong(
        "ibv_ud_pingpong",
        4,
        &[&[], &["-e"], &["-s", "1"], &["-s", "4000", "-e"]],
    );
}

#[test]
fn ibv_srq_pingpong_runs_verified() {
    pingpong(
        "ibv_srq_pingpong",
        5,
        &[
            &[],
            &["-e"],
            &["-s", "64"],
            &["-s", "20000", "-e", "-q", "4"],
        ],
    );
}

/// Runs perftest's `program` once per variant; both sides must print their result table.
fn perftest(program: &str, slot: u8, variants: &[&[&str]]) {
    let Some(bin) = installed(program, "perftest") else {
        return;
    };
    for extra in variants {
        let port = free_port().to_string();
        // -F: perftest measures the CPU clock; on a loaded machine that estimate can be too
        // noisy for it to report, which is not what is under test.
        let mut server = s(&["-d", "softrxe0", "-x", "1", "-F", "-p", &port]);
        server.extend(s(extra));
        let mut client = s(&["-d", "softrxe1", "-x", "1", "-F", "-p", &port]);
        client.extend(s(extra));
        client.push("127.0.0.1".into());
        let (so, co) = run_pair(&bin, slot, &server, &client, LIMIT);
        assert!(co.contains("#bytes"), "{program} {extra:?} client:\n{co}");
        assert!(
            !so.contains("rror") && !co.contains("rror"),
            "{program} {extra:?}:\n{so}\n{co}"
        );
    }
}

#[test]
fn perftest_bandwidth_tests_run() {
    for (slot, program) in [(6, "ib_write_bw"), (7, "ib_read_bw"), (8, "ib_send_bw")] {
        perftest(
            program,
            slot,
            &[
                &["-n", "50"],
                &["-n", "20", "--use_old_post_send"],
                &["-a", "-n", "5"],
            ],
        );
    }
    perftest(
        "ib_atomic_bw",
        9,
        &[&["-n", "50"], &["-n", "50", "--use_old_post_send"]],
    );
}

#[test]
fn perftest_latency_tests_run() {
    for (slot, program) in [
        (10, "ib_write_lat"),
        (11, "ib_send_lat"),
        (12, "ib_read_lat"),
        (13, "ib_atomic_lat"),
    ] {
        perftest(
            program,
            slot,
            &[
                &["-n", "50"],
                &["-n", "50", "--use_old_post_send"],
                &["-s", "8", "-n", "50"],
            ],
        );
    }
}
