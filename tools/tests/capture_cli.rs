//! Capturing our own traffic: `--pcap FILE` on a command and `SOFTVERBS_PCAP=FILE` for any
//! program write every datagram as Ethernet/IP/UDP frames; `softverbs decode --verify`
//! (and tshark, where Debian's package is installed) read them as RoCEv2 with good ICRCs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// `name` in a folder of its own (the tests run in parallel and each removes its folder).
fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softverbs-capture-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// `softverbs decode --verify FILE`: passes, and the summary's RoCE packet count.
fn verified_roce_packets(file: &Path) -> usize {
    let o = Command::new(BIN)
        .args(["decode", "--verify"])
        .arg(file)
        .output()
        .expect("decode");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let summary = out
        .lines()
        .rfind(|l| l.contains(" roce, "))
        .expect("summary");
    assert!(
        summary.contains(" 0 icrc bad, 0 roundtrip errors"),
        "{summary}"
    );
    assert!(summary.ends_with(" 0 malformed"), "{summary}");
    summary
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("roce count")
}

/// tshark (Debian's package) reads the file as RoCEv2 ("RRoCE"): every packet decode
/// counted is an InfiniBand packet to it, none malformed. Skipped, saying so, without tshark.
fn tshark_agrees(file: &Path, roce: usize) {
    let count = |filter: &str| -> Option<usize> {
        let o = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(file)
            .args(["-Y", filter])
            .output()
            .ok()?;
        assert!(o.status.success(), "tshark: {}", text(&o));
        Some(String::from_utf8_lossy(&o.stdout).lines().count())
    };
    let Some(ib) = count("infiniband") else {
        println!("tshark check skipped: tshark is not installed (apt-get install tshark)");
        return;
    };
    assert_eq!(
        ib, roce,
        "tshark decodes {ib} InfiniBand packets, decode {roce}"
    );
    assert_eq!(
        count("_ws.malformed"),
        Some(0),
        "tshark found malformed packets"
    );
}

#[test]
fn the_demo_with_pcap_writes_a_capture_that_verifies() {
    let file = temp_file("demo.pcap");
    let o = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", "a=127.24.9.1,b=127.24.9.2")
        .args(["demo", "--sizes", "0,1,1025,65536", "--pcap"])
        .arg(&file)
        .output()
        .expect("demo");
    assert!(o.status.success(), "{}", text(&o));
    let roce = verified_roce_packets(&file);
    // 4 SENDs (1 + 1 + 2 + 64 packets at MTU 1024) and at least one ACK each, each
    // datagram once although both its sender and its receiver were tapped.
    assert!((72..=140).contains(&roce), "{roce} packets");
    tshark_agrees(&file, roce);
    let _ = std::fs::remove_dir_all(file.parent().expect("dir"));
}

/// The variable works for any program on softverbs: here `perf` between two processes,
/// each capturing its own side to its own file.
#[test]
fn softverbs_pcap_captures_both_processes_of_a_perf_run() {
    let (srv_file, cli_file) = (temp_file("srv.pcap"), temp_file("cli.pcap"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port()
        .to_string();
    let devices = "srv=127.24.9.3,cli=127.24.9.4";
    let server = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", devices)
        .env("SOFTVERBS_PCAP", &srv_file)
        .args([
            "perf", "write_bw", "-d", "srv", "-p", &port, "-n", "50", "-s", "3000",
        ])
        .spawn()
        .expect("server");
    let client = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", devices)
        .env("SOFTVERBS_PCAP", &cli_file)
        .args(["perf", "write_bw", "127.0.0.1", "-d", "cli", "-p", &port])
        .args(["-n", "50", "-s", "3000"])
        .output()
        .expect("client");
    let server = server.wait_with_output().expect("server output");
    assert!(client.status.success(), "{}", text(&client));
    assert!(server.status.success(), "{}", text(&server));
    // 50 WRITEs of 3000 bytes (one packet each at perf's MTU of 4096) and the ACKs.
    let (s, c) = (
        verified_roce_packets(&srv_file),
        verified_roce_packets(&cli_file),
    );
    assert_eq!(s, c, "both sides saw the same datagrams");
    assert!(s >= 50, "{s} packets");
    tshark_agrees(&cli_file, c);
    for f in [&srv_file, &cli_file] {
        let _ = std::fs::remove_dir_all(f.parent().expect("dir"));
    }
}

#[test]
fn an_unwritable_capture_file_is_an_error_naming_the_variable() {
    let o = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", "a=127.24.9.5,b=127.24.9.6")
        .env("SOFTVERBS_PCAP", "/nonexistent-dir/x.pcap")
        .args(["demo", "--sizes", "1"])
        .output()
        .expect("demo");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("SOFTVERBS_PCAP"), "{}", text(&o));
}
