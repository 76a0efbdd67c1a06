//! `softverbs`: the command line of the softverbs project.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;

/// softverbs: a pure-Rust RDMA verbs stack with a user-space soft-RoCE engine.
#[derive(Parser)]
#[command(name = "softverbs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode the RoCEv2 packets of a pcap file, one line each.
    Decode(decode::DecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
    }
}
