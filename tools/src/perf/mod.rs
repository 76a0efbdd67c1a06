//! `softverbs perf`: perftest's tests (write / read / send / atomic × bandwidth / latency)
//! on the emulator, between two processes (TCP side channel as perftest's) or in one
//! (`--loopback`, over UDP or the in-process link), and the raw UDP baseline they are
//! measured against.

mod args;
mod backoff;
mod bw;
mod lat;
mod oob;
mod peak;
pub(crate) mod progress;
mod report;
mod run;
mod sequence;
mod setup;
mod udp_baseline;

pub use args::{PerfArgs, TestKind};
pub use sequence::Sequence;

use std::process::ExitCode;

/// Runs `softverbs perf`; exit code 0 only if every run completed and verified.
pub fn run(args: &PerfArgs) -> ExitCode {
    let settings = match args.settings() {
        Ok(s) => s,
        Err(message) => {
            eprintln!("softverbs perf: {message}");
            return ExitCode::from(2);
        }
    };
    match run::run(&settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softverbs perf: {e}");
            ExitCode::FAILURE
        }
    }
}
