//! Writes the seed corpus of every fuzz target from the kernel-rxe captures:
//! `fuzz-seeds OUT_DIR` makes `OUT_DIR/<target>/` (kept out of git: `fuzz/corpus/` is
//! ignored). `parse` and `roundtrip` get each distinct captured UDP payload; `device_rx`
//! gets each as one record aimed at the QP of its transport with its PSN, keys and ICRC
//! rewritten; `rc_pair` gets a few scripts (its input is a script, not a packet).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use softverbs_emu::wire::{RoceRepr, Transport};
use softverbs_fuzz::captures::captured_packets;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: fuzz-seeds OUT_DIR");
        return ExitCode::from(2);
    };
    let mut payloads = BTreeSet::new();
    for p in captured_packets() {
        payloads.insert(p.bytes.clone());
    }
    let write = |target: &str, name: String, data: &[u8]| {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        std::fs::write(dir.join(name), data).expect("write seed");
    };
    for (i, bytes) in payloads.iter().enumerate() {
        write("parse", format!("capture-{i:04}"), bytes);
        write("roundtrip", format!("capture-{i:04}"), bytes);
        if let Some(mode) = device_mode(bytes) {
            let mut record = vec![mode];
            record.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
            record.extend_from_slice(bytes);
            write("device_rx", format!("capture-{i:04}"), &record);
        }
    }
    for (i, script) in rc_pair_scripts().iter().enumerate() {
        write("rc_pair", format!("script-{i:02}"), script);
    }
    println!(
        "{} distinct captured packets -> {}",
        payloads.len(),
        out.display()
    );
    ExitCode::SUCCESS
}

/// The `device_rx` mode for a captured packet: to the QP of its transport (RC: the RC QP,
/// UD to QP1: the GSI, other UD: the UD QP), PSN and keys rewritten, ICRC written.
fn device_mode(bytes: &[u8]) -> Option<u8> {
    let (repr, _) = RoceRepr::parse(bytes).ok()?;
    let qp = match repr.bth.opcode.info()?.transport {
        Transport::Rc => 1,
        Transport::Ud if repr.bth.dest_qp == 1 => 3,
        Transport::Ud => 2,
        _ => return None,
    };
    Some(qp | 0x04 | 0x08 | 0x20)
}

/// Scripts for `rc_pair` (see its docs): bytes that decode to a few posts and injections;
/// the fuzzer takes it from there.
fn rc_pair_scripts() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for seed in 0u8..8 {
        let script: Vec<u8> = (0..160u16)
            .map(|i| {
                (i as u8)
                    .wrapping_mul(37)
                    .wrapping_add(seed.wrapping_mul(101))
            })
            .collect();
        out.push(script);
    }
    out
}
