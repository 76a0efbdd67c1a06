//! `softverbs perf`: perftest's tests (write / read / send / atomic × bandwidth / latency)
//! on the emulator, between two processes (TCP side channel as perftest's) or in one
//! (`--loopback`, over UDP or the in-process link), and the raw UDP baseline they are
//! measured against.

mod args;
mod backoff;
mod bw;
pub(crate) mod contend;
mod lat;
mod oob;
mod pairs;
mod peak;
mod print;
pub(crate) mod progress;
mod report;
mod results;
mod roce_floor;
mod run;
mod sequence;
mod setup;
mod shared;
mod udp_baseline;

pub use args::{PerfArgs, TestKind};
pub use sequence::Sequence;

use std::process::ExitCode;

/// Runs `softverbs perf`; exit code 0 only if every run completed and verified.
pub fn run(args: &PerfArgs) -> ExitCode {
    if args.shared {
        // Its own pair of runs per placement: the settings are checked by those.
        return match shared::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("softverbs perf --shared: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match args.settings() {
        Ok(s) => s,
        Err(message) => {
            eprintln!("softverbs perf: {message}");
            return ExitCode::from(2);
        }
    };
    contend::mark_start();
    // Held for the whole command: dropping it stops the competitors.
    let _contenders = match contend::Contenders::start(settings.contend) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softverbs perf: starting --contend competitors: {e}");
            return ExitCode::FAILURE;
        }
    };
    // --pairs is its own kind of one-process run (one pair alone, then all at once).
    let result = if settings.pairs > 1 {
        pairs::run(&settings)
    } else {
        run::run(&settings)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softverbs perf: {e}");
            ExitCode::FAILURE
        }
    }
}
