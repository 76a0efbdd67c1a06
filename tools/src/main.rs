//! `softverbs`: the command line of the softverbs project.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use softverbs::select::Provider;

mod decode;
mod demo;
mod ibv_oob;
mod ibv_pingpong;
mod perf;
mod perftest_oob;
mod pingpong;
mod rc_pair;
mod run;
mod rxe_lab;
mod sim;
mod tcp_accept;

/// softverbs: a pure-Rust RDMA verbs stack with a user-space soft-RoCE engine.
#[derive(Parser)]
#[command(name = "softverbs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices of both backends (emulated: SOFTVERBS_DEVICES, or the default two on
    /// loopback; hardware: rdma-core's, with feature `hw`) and the one SOFTVERBS_PROVIDER selects.
    Devices,
    /// Two emulated devices on loopback exchange RC SENDs; every byte is checked.
    Demo(demo::DemoArgs),
    /// RC SEND ping-pong between two processes (TCP side channel, like ibv_rc_pingpong).
    Pingpong(pingpong::PingpongArgs),
    /// perftest's benchmarks on the emulator (write/read/send/atomic x bw/lat) and the raw
    /// UDP baseline they are measured against.
    Perf(perf::PerfArgs),
    /// Decode the RoCEv2 packets of a pcap file, one line each.
    Decode(decode::DecodeArgs),
    /// Run seeds of the deterministic RC simulation under faults (a failure prints its seed).
    Sim(sim::SimArgs),
    /// The interop lab against kernel rxe in a qemu VM: build, up, run, down.
    RxeLab(rxe_lab::RxeLabArgs),
    /// Run an unmodified C verbs program on the emulator: `softverbs run -- ibv_devinfo`
    /// (puts the drop-in libibverbs.so.1 of crate softverbs-ibverbs on its library path).
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Devices => list_devices(),
        Command::Demo(args) => demo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::RxeLab(args) => rxe_lab::run(&args),
        Command::Run(args) => run::run(&args),
    }
}

/// Every device of both backends, one line each: name, backend, and where it is (the
/// emulated device's address, the rdma-core device's node GUID); then which backend
/// `SOFTVERBS_PROVIDER` selects.
fn list_devices() -> ExitCode {
    let list = match softverbs::all_devices() {
        Ok(list) => list,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let emulated = softverbs_emu::engine::device_list().unwrap_or_default();
    for d in &list {
        let place = match emulated
            .iter()
            .find(|c| d.backend == "emu" && c.name == d.name)
        {
            Some(c) => format!("{} udp/{}", c.ip, c.udp_port),
            None => format!("guid {:016x}", d.guid),
        };
        println!("{:<12} {:<4} {place}", d.name, d.backend);
    }
    if list.is_empty() {
        println!("(no devices)");
    }
    let chosen = softverbs::select::Provider::from_env();
    match chosen.clone().and_then(|p| p.resolve()) {
        Ok(p) => {
            // Why auto chose the emulator, in words (the library says it through tracing).
            let why = match (chosen, p) {
                (Ok(Provider::Auto), Provider::Emu) => match softverbs::devices_for(Provider::Hw) {
                    Ok(_) => " (auto: no rdma-core device)".to_string(),
                    Err(e) => format!(" (auto: {e})"),
                },
                _ => String::new(),
            };
            println!("selected backend: {}{why}", p.backend_name());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
