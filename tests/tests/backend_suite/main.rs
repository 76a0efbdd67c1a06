//! The backend-generic suite (issue 6): the same test bodies ([`cases`]) run against the
//! emulator always, and against an rdma-core device (the hardware backend) whenever the
//! `hw` feature is built in and a device exists; then the differential check ([`diff`])
//! runs one scripted program on both and compares completions and memory.
//!
//! A custom runner (`harness = false`), so that a backend that cannot run is reported as
//! skipped with its reason, never counted as passed:
//!
//! ```text
//! backend_suite [--backend emu|hw|all] [NAME-SUBSTRING ...]
//! ```
//!
//! Environment: `SOFTVERBS_HW_DEVICE` names the rdma-core device (default: the first one
//! listed); `SOFTVERBS_HW_REQUIRED=1` makes a skipped hardware run a failure. Exit status 1
//! if any case failed.

mod bench;
mod cases;
mod diff;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

use bench::Bench;

/// The rdma-core device to test, or why there is none.
fn hw_device() -> Result<String, String> {
    #[cfg(feature = "hw")]
    {
        if let Ok(name) = std::env::var("SOFTVERBS_HW_DEVICE") {
            return Ok(name);
        }
        match softverbs::hw::devices() {
            Ok(list) => list
                .into_iter()
                .next()
                .map(|d| d.name)
                .ok_or_else(|| "no rdma-core device".to_string()),
            Err(e) => Err(format!("listing rdma-core devices failed: {e}")),
        }
    }
    #[cfg(not(feature = "hw"))]
    {
        Err("built without the `hw` feature".to_string())
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Runs `f`, printing its outcome; true if it passed.
fn run_one(label: &str, f: impl FnOnce()) -> bool {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(f));
    let secs = started.elapsed().as_secs_f64();
    match result {
        Ok(()) => {
            println!("{label} ... ok ({secs:.2} s)");
            true
        }
        Err(p) => {
            println!("{label} ... FAILED ({secs:.2} s): {}", panic_message(&*p));
            false
        }
    }
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    /// Behaviours the cases found to differ from the emulator's (hardware only).
    divergences: usize,
}

fn main() -> ExitCode {
    let mut backend = "all".to_string();
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => backend = args.next().unwrap_or_default(),
            // libtest options cargo may pass through (--nocapture, --test-threads ...).
            a if a.starts_with("--") => {}
            a => filters.push(a.to_string()),
        }
    }
    if !["emu", "hw", "all"].contains(&backend.as_str()) {
        eprintln!("--backend must be emu, hw or all");
        return ExitCode::FAILURE;
    }
    let selected =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));

    let mut benches = Vec::new();
    if backend != "hw" {
        benches.push(Bench::emu());
    }
    let mut hw_skip = None;
    if backend != "emu" {
        match hw_device() {
            Ok(name) => benches.push(Bench::hw(&name)),
            Err(why) => {
                println!("hw backend: skipped: {why}");
                hw_skip = Some(why);
            }
        }
    }

    let started = Instant::now();
    let mut tallies: Vec<(&'static str, Tally)> = Vec::new();
    let mut outcomes = Vec::new();
    for bench in &benches {
        let mut tally = Tally::default();
        cases::DIVERGENCES.store(0, std::sync::atomic::Ordering::Relaxed);
        println!("== backend {} ({})", bench.backend, bench.device);
        for (name, case) in cases::CASES {
            if !selected(name) {
                continue;
            }
            let ok = run_one(&format!("[{}] {name}", bench.backend), || case(bench));
            if ok {
                tally.passed += 1
            } else {
                tally.failed += 1
            }
        }
        if selected("scripted_program") {
            let mut outcome = None;
            let ok = run_one(&format!("[{}] scripted_program", bench.backend), || {
                // Kept even when the self-check fails, so that the comparison shows how.
                let o = outcome.insert(diff::run_script(bench));
                diff::check_self(o);
            });
            if ok {
                tally.passed += 1
            } else {
                tally.failed += 1
            }
            outcomes.push((bench.backend, outcome));
        }
        tally.divergences = cases::DIVERGENCES.load(std::sync::atomic::Ordering::Relaxed);
        tallies.push((bench.backend, tally));
    }

    // The differential check: emulator vs hardware, when both ran the script.
    let mut diff_line = "differential emu vs hw: skipped: no hardware run".to_string();
    let mut diff_failed = false;
    if let [(_, Some(emu)), (_, Some(hw))] = outcomes.as_slice() {
        let c = diff::compare(emu, hw);
        let strict = std::env::var("SOFTVERBS_DIFF_STRICT").as_deref() == Ok("1");
        for (k, detail) in &c.known {
            println!(
                "differential: known divergence [{}]: {detail}",
                diff::KNOWN_DIVERGENCES[*k]
            );
        }
        for d in &c.unexplained {
            println!("differential: UNEXPLAINED: {d}");
        }
        let bytes: usize = emu.images.iter().map(|(_, i)| i.len()).sum();
        let identical = emu.trace.len() - c.known.len() - c.unexplained.len().min(emu.trace.len());
        diff_failed = !c.unexplained.is_empty() || (strict && !c.known.is_empty());
        diff_line = format!(
            "differential emu vs hw: {} ({} completions: {identical} identical, {} known divergences, {} unexplained; memory: {bytes} bytes in {} MRs {})",
            if diff_failed { "FAILED" } else { "ok" },
            emu.trace.len(),
            c.known.len(),
            c.unexplained.len(),
            emu.images.len(),
            if c.unexplained.iter().any(|d| d.starts_with("memory")) { "differ" } else { "identical" },
        );
    } else if outcomes.len() == 2 && backend == "all" {
        diff_failed = true;
        diff_line = "differential emu vs hw: FAILED (a scripted run failed)".to_string();
    }

    println!("== summary ({:.1} s)", started.elapsed().as_secs_f64());
    let mut failed = diff_failed;
    for (name, t) in &tallies {
        println!(
            "backend {name}: {} passed, {} failed, {} divergences from the emulator noted",
            t.passed, t.failed, t.divergences
        );
        failed |= t.failed > 0;
    }
    if let Some(why) = &hw_skip {
        println!("backend hw: skipped: {why}");
        if std::env::var("SOFTVERBS_HW_REQUIRED").as_deref() == Ok("1") {
            println!("SOFTVERBS_HW_REQUIRED=1: a skipped hardware run is a failure");
            failed = true;
        }
    }
    if backend == "all" {
        println!("{diff_line}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
