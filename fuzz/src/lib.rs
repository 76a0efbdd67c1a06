//! Fuzz harnesses of softverbs: each target of `fuzz_targets/` is one function here that
//! takes the fuzzer's bytes, so that the regression tests (`tests/regressions.rs`, stable
//! toolchain) replay saved inputs through exactly the code the fuzzer ran.
//!
//! Targets (see docs/fuzzing.md):
//! - [`parse`]: arbitrary bytes as a RoCE packet, a link-layer frame and a CM MAD;
//! - [`roundtrip`]: a packet that parses emits back to its bytes (but for the bits the
//!   parser ignores) and is a fixed point of parse → emit;
//! - [`device_rx`]: one emulated device fed arbitrary datagrams through its receive pipeline;
//! - [`rc_pair`]: the responder and completer of two connected RC QPs fed packets mutated
//!   from captured and live ones, their ICRC recomputed.
//!
//! [`captures`] reads the kernel-rxe captures the seeds and templates come from; [`replay`]
//! runs a harness over saved inputs.

pub mod captures;
pub mod device_rx;
pub mod parse;
pub mod rc_pair;
mod rc_pair_mutate;
pub mod replay;
pub mod roundtrip;

/// A harness: runs one fuzz input, panicking on a finding.
pub type Harness = fn(&[u8]);

/// Every target, by the name of its binary in `fuzz_targets/`.
pub const TARGETS: [(&str, Harness); 4] = [
    ("parse", parse::run),
    ("roundtrip", roundtrip::run),
    ("device_rx", device_rx::run),
    ("rc_pair", rc_pair::run),
];

/// The harness of target `name`.
pub fn harness(name: &str) -> Option<Harness> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
}
