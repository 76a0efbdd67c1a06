//! Mixed RC traffic under the deterministic simulator (the workload and its oracle live in
//! `softverbs_emu::sim::workload`; `softverbs sim --seeds N` runs it from the command line).
//!
//! `SOFTVERBS_SIM_SEEDS=N` runs N seeds (default 256); a failure names its seed.

use softverbs_emu::sim::workload::run_mixed;
use softverbs_emu::sim::{FaultConfig, TraceEvent};

fn seeds() -> u64 {
    std::env::var("SOFTVERBS_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

#[test]
fn mixed_rc_traffic_clean_network() {
    for seed in 0..16 {
        let p = run_mixed(seed, FaultConfig::none()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.a.qp.counters.retransmitted_packets, 0, "seed {seed}");
    }
}

#[test]
fn mixed_rc_traffic_exactly_once_under_harsh_faults() {
    let (mut dropped, mut corrupted, mut dup_requests) = (0, 0, 0);
    for seed in 0..seeds() {
        let p = run_mixed(seed, FaultConfig::harsh()).unwrap_or_else(|e| panic!("{e}"));
        dropped += p
            .trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::Dropped { .. }))
            .count();
        corrupted += p
            .trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::IcrcRejected { .. }))
            .count();
        dup_requests += p.a.qp.counters.duplicate_requests + p.b.qp.counters.duplicate_requests;
    }
    assert!(
        dropped > 0 && corrupted > 0 && dup_requests > 0,
        "{dropped} {corrupted} {dup_requests}"
    );
}

/// The protocol-level trace: buffer addresses and rkeys come from the allocator and the
/// key generator, so they are left out; everything the transport decides stays in.
fn protocol_trace(trace: &[TraceEvent]) -> Vec<String> {
    use softverbs_emu::wire::RoceRepr;
    trace
        .iter()
        .map(|e| match e {
            TraceEvent::Sent {
                at_ns, from, bytes, ..
            } => {
                let r = RoceRepr::parse(bytes).expect("own packets parse").0;
                format!(
                    "{at_ns} {from:?} {} psn={} a={} len={} aeth={:?} imm={:?}",
                    r.bth.opcode.name(),
                    r.bth.psn.value(),
                    r.bth.ack_req,
                    r.payload.len(),
                    r.aeth,
                    r.immdt
                )
            }
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn mixed_rc_traffic_same_seed_same_trace() {
    let a = protocol_trace(&run_mixed(11, FaultConfig::harsh()).unwrap().trace);
    let b = protocol_trace(&run_mixed(11, FaultConfig::harsh()).unwrap().trace);
    let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        first_diff.is_none() && a.len() == b.len(),
        "traces differ at {first_diff:?} (lengths {} {})",
        a.len(),
        b.len()
    );
    let c = protocol_trace(&run_mixed(12, FaultConfig::harsh()).unwrap().trace);
    assert_ne!(a, c, "a different seed gives a different trace");
}
