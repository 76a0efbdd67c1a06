//! Every input under `fuzz/regressions/<target>/` (a crash or finding the fuzzers made,
//! kept once fixed) replays clean through its target's harness, on the stable toolchain;
//! and every harness runs clean on seeds made from the captures, so a harness that rots
//! fails here rather than in the nightly-only fuzz run.

use std::path::{Path, PathBuf};

use softverbs_fuzz::captures::captured_packets;
use softverbs_fuzz::replay::{input_files, run_file};
use softverbs_fuzz::{harness, TARGETS};

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

#[test]
fn saved_regressions_replay_clean() {
    let dir = regressions_dir();
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions exists") {
        let path = entry.expect("dir entry").path();
        if !path.is_dir() {
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let h = harness(name).unwrap_or_else(|| panic!("{}: no such target", path.display()));
        for file in input_files(std::slice::from_ref(&path)) {
            run_file(h, &file);
            count += 1;
        }
    }
    eprintln!("{count} regression inputs replayed");
}

#[test]
fn every_captured_packet_runs_through_the_packet_harnesses() {
    let packets = captured_packets();
    assert!(packets.len() >= 500, "captures missing: {}", packets.len());
    for p in packets {
        softverbs_fuzz::parse::run(&p.bytes);
        softverbs_fuzz::roundtrip::run(&p.bytes);
    }
}

#[test]
fn the_scripted_targets_run_on_bytes_of_every_kind() {
    for (name, h) in TARGETS {
        for input in [
            vec![],
            vec![0u8; 64],
            vec![0xffu8; 300],
            (0..=255u8).collect(),
        ] {
            eprintln!("{name}: {} bytes", input.len());
            h(&input);
        }
    }
}
