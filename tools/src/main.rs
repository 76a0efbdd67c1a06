//! `softverbs`: the command line of the softverbs project.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod broken_pipe;
mod decode;
mod decode_cm;
mod demo;
mod devices;
mod ibv_oob;
mod ibv_pingpong;
mod json;
mod perf;
mod perftest_oob;
mod pingpong;
mod rc_pair;
mod rping;
mod run;
mod run_report;
mod rxe_lab;
mod sim;
mod tcp_accept;

/// softverbs: a pure-Rust RDMA verbs stack with a user-space soft-RoCE engine.
#[derive(Parser)]
#[command(name = "softverbs", version, about)]
struct Cli {
    /// Write every datagram this process's devices send and receive to FILE (pcap,
    /// Ethernet/IP/UDP frames Wireshark decodes as RoCEv2); the same as SOFTVERBS_PCAP=FILE.
    #[arg(long, global = true, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices of both backends (emulated: SOFTVERBS_DEVICES, or the default two on
    /// loopback; hardware: rdma-core's, with feature `hw`) and the one SOFTVERBS_PROVIDER
    /// selects; `-v` as `ibv_devinfo -v`, `--json` for a machine.
    Devices(devices::DevicesArgs),
    /// Two emulated devices on loopback exchange RC SENDs; every byte is checked.
    Demo(demo::DemoArgs),
    /// RC SEND ping-pong between two processes (TCP side channel, like ibv_rc_pingpong).
    Pingpong(pingpong::PingpongArgs),
    /// perftest's benchmarks on the emulator (write/read/send/atomic x bw/lat) and the raw
    /// UDP baseline they are measured against.
    Perf(perf::PerfArgs),
    /// Decode the RoCEv2 packets of a pcap file, one line each (CM MADs named).
    Decode(decode::DecodeArgs),
    /// librdmacm's rping over the CM: `-s -a 127.0.0.1` and `-c -a 127.0.0.1 -I 127.0.0.2`
    /// (SEND / RDMA READ / RDMA WRITE per iteration, data checked).
    Rping(rping::RpingArgs),
    /// Run seeds of the deterministic RC simulation under faults (a failure prints its seed).
    Sim(sim::SimArgs),
    /// The interop lab against kernel rxe in a qemu VM: build, up, run, down.
    RxeLab(rxe_lab::RxeLabArgs),
    /// Run an unmodified C verbs or rdma_cm program on the emulator: `softverbs run --
    /// ibv_devinfo`, `softverbs run -- rping -s` (puts the drop-in libibverbs.so.1 and
    /// librdmacm.so.1 of crate softverbs-ibverbs on its library path).
    Run(run::RunArgs),
    /// Internal: one CPU-bound competitor of `perf --contend`, spinning until process
    /// PARENT exits.
    #[command(hide = true)]
    Contender {
        /// The process whose exit ends the spin.
        parent: u32,
    },
}

fn main() -> ExitCode {
    broken_pipe::exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    if let Some(file) = &cli.pcap {
        // Before any device (and any thread) exists: the devices read it when they open.
        std::env::set_var(softverbs_emu::net::pcap::tap::PCAP_ENV, file);
    }
    match cli.command {
        Command::Devices(args) => devices::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Rping(args) => rping::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::RxeLab(args) => rxe_lab::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Contender { parent } => {
            perf::contend::spin_until_parent_exits(parent);
            ExitCode::SUCCESS
        }
    }
}
