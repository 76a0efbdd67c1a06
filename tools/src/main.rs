//! `softverbs`: the command line of the softverbs project.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;
mod demo;
mod ibv_oob;
mod ibv_pingpong;
mod perf;
mod perftest_oob;
mod pingpong;
mod rc_pair;
mod rxe_lab;
mod sim;

/// softverbs: a pure-Rust RDMA verbs stack with a user-space soft-RoCE engine.
#[derive(Parser)]
#[command(name = "softverbs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices (SOFTVERBS_DEVICES, or the default two on loopback).
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
    }
}

fn list_devices() -> ExitCode {
    match softverbs::devices() {
        Ok(list) => {
            for d in softverbs_emu::engine::device_list().unwrap_or_default() {
                println!("{:<12} {:<24} udp/{}", d.name, d.ip, d.udp_port);
            }
            if list.is_empty() {
                println!("(no devices)");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
