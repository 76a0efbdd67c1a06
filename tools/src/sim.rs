//! `softverbs sim`: runs seeds of the deterministic RC simulation (mixed SEND / WRITE / READ /
//! atomic traffic both ways under seeded faults, checked by an oracle). A failure prints its
//! seed; `--start SEED --seeds 1` replays it exactly.

use std::process::ExitCode;
use std::time::Instant;

use softverbs_emu::sim::workload::run_mixed;
use softverbs_emu::sim::{FaultConfig, TraceEvent};

use crate::json::{json_num, json_str};
use crate::perf::progress::Progress;

/// Arguments of `softverbs sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 256)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Fault profile: `harsh` (20% loss with bursts, 20% duplication, 10% reordering, 2%
    /// corruption) or `none`.
    #[arg(long, default_value = "harsh")]
    pub faults: String,
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the seeds; exit code 0 only if every seed passed the oracle.
pub fn run(args: &SimArgs) -> ExitCode {
    let faults = match args.faults.as_str() {
        "harsh" => FaultConfig::harsh(),
        "none" => FaultConfig::none(),
        other => {
            eprintln!("--faults {other:?}: expected harsh or none");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (mut failed, mut packets, mut dropped, mut corrupted) = (0u64, 0usize, 0usize, 0usize);
    let mut failures: Vec<(u64, String)> = Vec::new();
    let mut progress = Progress::start_as("sim", format!("{} seeds", args.seeds));
    for (done, seed) in (args.start..args.start.saturating_add(args.seeds)).enumerate() {
        let now = Instant::now();
        if progress.due(now) {
            progress.tick(
                now,
                done as u64,
                Some(args.seeds),
                None,
                &format!("{failed} failed"),
            );
        }
        match run_mixed(seed, faults) {
            Ok(pair) => {
                for event in &pair.trace {
                    match event {
                        TraceEvent::Sent { .. } => packets += 1,
                        TraceEvent::Dropped { .. } => dropped += 1,
                        TraceEvent::IcrcRejected { .. } => corrupted += 1,
                        TraceEvent::Completed { .. } => {}
                    }
                }
            }
            Err(e) => {
                failed += 1;
                if !args.json {
                    println!("FAIL seed {seed}: {e}");
                    println!(
                        "  replay: softverbs sim --start {seed} --seeds 1 --faults {}",
                        args.faults
                    );
                }
                failures.push((seed, e.to_string()));
            }
        }
    }
    progress.finish();
    if args.json {
        let failures: Vec<String> = failures
            .iter()
            .map(|(seed, why)| {
                format!(
                    "{{\"seed\":{seed},\"error\":{},\"replay\":{}}}",
                    json_str(why),
                    json_str(&format!(
                        "softverbs sim --start {seed} --seeds 1 --faults {}",
                        args.faults
                    ))
                )
            })
            .collect();
        println!(
            "{{\"seeds\":{},\"start\":{},\"faults\":{},\"failed\":{failed},\"failures\":[{}],\
             \"packets_sent\":{packets},\"dropped\":{dropped},\"corrupted_rejected\":{corrupted},\"secs\":{}}}",
            args.seeds,
            args.start,
            json_str(&args.faults),
            failures.join(","),
            json_num(started.elapsed().as_secs_f64())
        );
    } else {
        print_summary(args, failed, packets, dropped, corrupted, started);
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_summary(
    args: &SimArgs,
    failed: u64,
    packets: usize,
    dropped: usize,
    corrupted: usize,
    started: Instant,
) {
    println!(
        "{} seeds ({}..{}), {} failed; {packets} packets sent, {dropped} dropped, {corrupted} corrupted and rejected; {:.1} s",
        args.seeds,
        args.start,
        args.start.saturating_add(args.seeds),
        failed,
        started.elapsed().as_secs_f64()
    );
}
