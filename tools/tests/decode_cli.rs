//! `softverbs decode --verify` on the real rxe captures (exit 0) and on a corrupted copy
//! (non-zero), run as the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn conformance_dir() -> PathBuf {
    let dir = std::env::var_os("SOFTVERBS_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance")));
    assert!(
        dir.join("README.md").is_file(),
        "conformance captures missing at {}",
        dir.display()
    );
    dir
}

fn decode(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .arg("decode")
        .args(args)
        .output()
        .expect("run softverbs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn verify_passes_on_every_capture() {
    let dir = conformance_dir();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let o = decode(&[path.as_os_str(), "--verify".as_ref()]);
        let text = stdout(&o);
        assert!(
            o.status.success(),
            "{}: {:?}\n{text}",
            path.display(),
            o.status
        );
        let summary = text.lines().last().expect("summary");
        assert!(
            summary.contains(" 0 icrc bad, 0 roundtrip errors"),
            "{summary}"
        );
        assert!(!text.contains("BAD"), "{text}");
        files += 1;
    }
    assert!(files >= 17, "only {files} captures");
}

#[test]
fn lines_and_summary_for_one_capture() {
    let path = conformance_dir().join("ib_atomic_lat_cmp_swap_mtu1500.pcap");
    let o = decode(&[path.as_os_str()]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains(
            "   24 10.77.0.1 -> 10.77.0.2 RC_ATOMIC_ACKNOWLEDGE qp=0x000028 psn=10187374 aeth(ACK msn=1) \
             atomic_ack(orig=0x4bc42cbaa56198f1) len=0 icrc=ok"
        ),
        "{text}"
    );
    assert_eq!(
        text.lines().last(),
        Some("39 frames, 10 roce, 10 icrc ok, 0 icrc bad, 0 roundtrip errors, 29 non-roce skipped, 0 malformed")
    );
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softverbs-decode-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// Offset in the pcap file of the first byte of the UDP payload of the first RoCE frame
/// (classic pcap, Ethernet + IPv4: 24-byte file header, 16-byte record headers).
fn first_roce_payload_offset(pcap: &[u8]) -> usize {
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let incl = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        let frame = &pcap[at + 16..at + 16 + incl];
        if frame.len() > 42
            && frame[12..14] == [0x08, 0x00]
            && frame[23] == 17
            && frame[36..38] == [0x12, 0xb7]
        {
            return at + 16 + 42;
        }
        at += 16 + incl;
    }
    panic!("no RoCE frame");
}

#[test]
fn verify_fails_on_a_corrupted_copy() {
    let src = conformance_dir().join("rc_pingpong_mtu1500.pcap");
    let mut bytes = std::fs::read(&src).expect("read capture");
    // Flip a bit of the first RoCE packet's PSN: the packet still parses, the ICRC breaks.
    let at = first_roce_payload_offset(&bytes) + 11;
    bytes[at] ^= 0x01;
    let path = temp_path("corrupt.pcap");
    std::fs::write(&path, &bytes).expect("write copy");
    let o = decode(&[path.as_os_str(), "--verify".as_ref()]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("icrc=BAD(stored 0x"), "{text}");
    assert!(
        text.lines()
            .last()
            .expect("summary")
            .contains("19 icrc ok, 1 icrc bad"),
        "{text}"
    );
    // Without --verify the same file decodes with exit 0.
    assert!(decode(&[path.as_os_str()]).status.success());
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}

#[test]
fn unreadable_input_exits_2() {
    let o = decode(&[Path::new("/nonexistent/capture.pcap").as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/capture.pcap"));
    let path = temp_path("garbage.pcap");
    std::fs::write(&path, b"this is not a capture file").expect("write");
    let o = decode(&[path.as_os_str(), "--verify".as_ref()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!o.stderr.is_empty());
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}

/// A capture cut inside its last record decodes every whole record before the cut, then
/// says it was cut; `--verify` fails on it.
#[test]
fn a_truncated_capture_decodes_its_whole_records_then_reports_the_cut() {
    let src = conformance_dir().join("rc_pingpong_mtu1500.pcap");
    let bytes = std::fs::read(&src).expect("read capture");
    let path = temp_path("cut.pcap");
    std::fs::write(&path, &bytes[..bytes.len() - 7]).expect("write copy");
    let o = decode(&[path.as_os_str()]);
    let (text, err) = (stdout(&o), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "{text}{err}");
    let full = stdout(&decode(&[src.as_os_str()]));
    let frames = |summary: &str| -> usize {
        summary
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{summary}"))
    };
    let (got, all) = (
        frames(text.lines().last().expect("summary")),
        frames(full.lines().last().expect("summary")),
    );
    assert_eq!(got, all - 1, "{text}");
    assert!(err.contains("truncated after"), "{err}");
    let o = decode(&[path.as_os_str(), "--verify".as_ref()]);
    assert_eq!(o.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}
