//! `softverbs decode` (being written).

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `softverbs decode`.
#[derive(clap::Args)]
pub struct DecodeArgs {
    /// The pcap file (Ethernet or Linux cooked capture).
    pub file: PathBuf,
    /// Exit non-zero unless every RoCEv2 packet round-trips byte-exact with a good ICRC.
    #[arg(long)]
    pub verify: bool,
}

/// Runs the subcommand.
pub fn run(_args: &DecodeArgs) -> ExitCode {
    ExitCode::FAILURE
}
