//! Unmodified Debian binaries (ibverbs-utils, perftest) on the drop-in libibverbs.so.1 with
//! server and client on ONE emulated device, as on a NIC (issue 29): two OS processes open
//! `softrxe0`, each joins the device as a member of its own (its QPNs in its own slot,
//! `slot << 16 | n`), and the programs' traffic goes from one to the other through the
//! device's one address. Each test has its own device on 127.35.<test>.1. The pingpongs
//! run with `-c`, so they verify every received buffer themselves. A test whose program is
//! not installed says SKIPPED and passes; .ci/run installs them.

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);
const ITERS: u64 = 50;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The one device of test `test`: softrxe0 on 127.35.<test>.1 (nothing else listed).
fn one_device(test: u8) -> String {
    format!("softrxe0=127.35.{test}.1")
}

/// The QPN a program printed on its line containing `which` ("local address" or
/// "remote address"): ibverbs-utils print `QPN 0x0217d8,`, perftest `QPN 0x2771c `.
fn qpn(out: &str, which: &str) -> u32 {
    let line = out
        .lines()
        .find(|l| l.contains(which))
        .unwrap_or_else(|| panic!("no {which:?} line in:\n{out}"));
    let hex = line
        .split("QPN 0x")
        .nth(1)
        .unwrap_or_else(|| panic!("no QPN on {line:?}"));
    let digits: String = hex.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    u32::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("bad QPN on {line:?}"))
}

/// Checks that server and client were two members of one device: each names the other's
/// QPN as its remote, and the QPNs are in two different, non-zero slots of the device.
fn assert_two_members(what: &str, server: &str, client: &str) {
    let (sq, cq) = (qpn(server, "local address"), qpn(client, "local address"));
    assert_eq!(
        qpn(client, "remote address"),
        sq,
        "{what}:\n{server}\n{client}"
    );
    assert_eq!(
        qpn(server, "remote address"),
        cq,
        "{what}:\n{server}\n{client}"
    );
    let (s_slot, c_slot) = (sq >> 16, cq >> 16);
    assert!(
        s_slot != 0 && c_slot != 0 && s_slot != c_slot,
        "{what}: QPNs {sq:#x} and {cq:#x} are not in two member slots of the device"
    );
}

/// Runs `program` (ibverbs-utils) with both ends on the one device of `test`, once per
/// variant: message size `size`, extra arguments `extra`.
fn pingpong(program: &str, test: u8, variants: &[(u64, &[&str])]) {
    let Some(bin) = installed(program, "ibverbs-utils") else {
        return;
    };
    let gid = format!("GID ::ffff:127.35.{test}.1");
    for (size, extra) in variants {
        let port = free_port().to_string();
        let (size_arg, iters_arg) = (size.to_string(), ITERS.to_string());
        let mut server = s(&["-d", "softrxe0", "-g", "1", "-c", "-p", &port]);
        server.extend(s(&["-s", &size_arg, "-n", &iters_arg]));
        server.extend(s(extra));
        let mut client = server.clone();
        client.push("127.0.0.1".into());
        let what = format!("{program} -s {size} {extra:?}");
        let (so, co) = run_pair_on(&bin, &one_device(test), &server, &client, LIMIT);
        // Each side counts what it sent and received: size x iterations, both ways.
        let bytes = format!("{} bytes in", 2 * size * ITERS);
        let iters = format!("{ITERS} iters in");
        for out in [&so, &co] {
            assert!(out.contains(&bytes), "{what}: no {bytes:?}:\n{out}");
            assert!(out.contains(&iters), "{what}: no {iters:?}:\n{out}");
            // Every QP's GID, local and remote, is the one device's address (srq_pingpong
            // prints a line per QP).
            let addresses: Vec<&str> = out.lines().filter(|l| l.contains(" address:")).collect();
            assert!(addresses.len() >= 2, "{what}:\n{out}");
            for line in addresses {
                assert!(line.ends_with(&gid), "{what}: not {gid}: {line:?}");
            }
        }
        assert_two_members(&what, &so, &co);
    }
}

#[test]
fn ibv_rc_pingpong_server_and_client_on_one_device() {
    pingpong(
        "ibv_rc_pingpong",
        1,
        &[(4096, &[]), (4096, &["-e"]), (1, &[]), (65536, &["-e"])],
    );
}

#[test]
fn ibv_ud_pingpong_server_and_client_on_one_device() {
    pingpong(
        "ibv_ud_pingpong",
        2,
        &[(1024, &[]), (1, &["-e"]), (4000, &[])],
    );
}

#[test]
fn ibv_srq_pingpong_server_and_client_on_one_device() {
    pingpong(
        "ibv_srq_pingpong",
        3,
        &[(4096, &[]), (64, &["-e"]), (20000, &["-q", "4"])],
    );
}

/// The first row of perftest's result table (the line after the one with `#bytes`),
/// split into its columns.
fn result_row(out: &str) -> Vec<String> {
    let mut lines = out.lines().skip_while(|l| !l.contains("#bytes"));
    lines.next();
    let row = lines
        .next()
        .unwrap_or_else(|| panic!("no result row in:\n{out}"));
    row.split_whitespace().map(str::to_string).collect()
}

/// The perftest programs whose server prints no result table.
const CLIENT_REPORTS_ONLY: [&str; 2] = ["ib_read_lat", "ib_atomic_lat"];

/// Runs perftest's `program` with both ends on the one device of `test` once per variant
/// of extra arguments (`-n` is always [`ITERS`]); checks each side's result row: the
/// message size `size`, [`ITERS`] iterations, and a positive figure in column `figure`.
fn perftest(program: &str, test: u8, size: u64, figure: usize, variants: &[&[&str]]) {
    let Some(bin) = installed(program, "perftest") else {
        return;
    };
    let gid = format!("255:255:127:35:{test:02}:01");
    for extra in variants {
        let port = free_port().to_string();
        let iters = ITERS.to_string();
        // -F: perftest measures the CPU clock; on a loaded machine that estimate can be too
        // noisy for it to report, which is not what is under test.
        let mut server = s(&["-d", "softrxe0", "-x", "1", "-F", "-p", &port, "-n", &iters]);
        server.extend(s(extra));
        let mut client = server.clone();
        client.push("127.0.0.1".into());
        let what = format!("{program} {extra:?}");
        let (so, co) = run_pair_on(&bin, &one_device(test), &server, &client, LIMIT);
        assert!(
            !so.contains("rror") && !co.contains("rror"),
            "{what}:\n{so}\n{co}"
        );
        // The passive side of the READ and atomic latency tests measures nothing and
        // prints no table.
        let reporting = if CLIENT_REPORTS_ONLY.contains(&program) {
            vec![&co]
        } else {
            vec![&so, &co]
        };
        for out in reporting {
            let row = result_row(out);
            assert_eq!(row.first(), Some(&size.to_string()), "{what}: {row:?}");
            assert_eq!(row.get(1), Some(&iters), "{what}: {row:?}");
            let value: f64 = row
                .get(figure)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what}: no figure in column {figure}: {row:?}"));
            assert!(value > 0.0, "{what}: {row:?}");
        }
        for out in [&so, &co] {
            assert_eq!(out.matches(&gid).count(), 2, "{what}: not {gid}:\n{out}");
        }
        assert_two_members(&what, &so, &co);
    }
}

#[test]
fn ib_write_bw_server_and_client_on_one_device() {
    // Column 3: BW average [MB/sec].
    perftest("ib_write_bw", 4, 65536, 3, &[&[], &["--use_old_post_send"]]);
}

#[test]
fn ib_send_lat_server_and_client_on_one_device() {
    // Column 4: t_typical [usec].
    perftest("ib_send_lat", 5, 2, 4, &[&[], &["--use_old_post_send"]]);
    perftest("ib_send_lat", 5, 8, 4, &[&["-s", "8"]]);
}

#[test]
fn ibv_uc_pingpong_server_and_client_on_one_device() {
    pingpong("ibv_uc_pingpong", 6, &[(4096, &[]), (30000, &["-e"])]);
}

#[test]
fn the_other_perftests_server_and_client_on_one_device() {
    // (program, device, default message size, column of the figure): bandwidth tests
    // report BW average in column 3, latency tests t_typical in column 4.
    for (program, test, size, figure) in [
        ("ib_read_bw", 7, 65536, 3),
        ("ib_send_bw", 8, 65536, 3),
        ("ib_atomic_bw", 9, 8, 3),
        ("ib_write_lat", 10, 2, 4),
        ("ib_read_lat", 11, 2, 4),
        ("ib_atomic_lat", 12, 8, 4),
    ] {
        perftest(program, test, size, figure, &[&[]]);
    }
}
