//! `softverbs demo`: two emulated devices on loopback, one RC QP pair, SEND_WITH_IMM of
//! several sizes with every byte and completion field checked.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use softverbs::{
    devices, Mtu, RcConnectOptions, RecvWr, SendWr, Sge, VerbsResult, WcFlags, WcOpcode, WcStatus,
};

use crate::rc_pair::{pattern, split, RcSide};

/// Arguments of `softverbs demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Message sizes in bytes (default: 0 B to 1 MiB).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024)]
    pub mtu: u32,
}

const DEFAULT_SIZES: [usize; 9] = [0, 1, 64, 1023, 1024, 1025, 4096, 65_536, 1 << 20];
const WAIT: Duration = Duration::from_secs(10);

/// Runs the demo; exit code 0 only if every message was verified.
pub fn run(args: &DemoArgs) -> ExitCode {
    match demo(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn demo(args: &DemoArgs) -> VerbsResult<bool> {
    let sizes = args.sizes.clone().unwrap_or_else(|| DEFAULT_SIZES.to_vec());
    let path_mtu = Mtu::from_bytes(args.mtu).ok_or_else(|| {
        softverbs::VerbsError::inval(format!("--mtu {} is not an IB MTU", args.mtu))
    })?;
    let list = devices()?;
    if list.len() < 2 {
        return Err(softverbs::VerbsError::inval(
            "the demo needs two devices (SOFTVERBS_DEVICES)",
        ));
    }
    let max = sizes.iter().copied().max().unwrap_or(0).max(1);
    let a = RcSide::new(&list[0].name, max, 16)?;
    let b = RcSide::new(&list[1].name, max, 16)?;
    println!(
        "devices: {} ({}) -> {} ({}), path MTU {}",
        a.ctx.name(),
        a.ctx.query_gid(1, 1)?.gid,
        b.ctx.name(),
        b.ctx.query_gid(1, 1)?.gid,
        path_mtu.bytes()
    );
    let opts = RcConnectOptions {
        path_mtu,
        ..RcConnectOptions::default()
    };
    let (psn_a, psn_b) = (0x1000, 0xff_fff0); // b's PSNs wrap around 2^24 during the run
    a.qp.connect_rc(psn_a, &b.qp.endpoint(psn_b, 1)?, &opts)?;
    b.qp.connect_rc(psn_b, &a.qp.endpoint(psn_a, 1)?, &opts)?;
    println!(
        "RC QPs connected: {:#x} <-> {:#x}",
        a.qp.qp_num(),
        b.qp.qp_num()
    );
    println!("    bytes   SGEs         imm      time  result");

    let mut all_ok = true;
    let mut total_bytes = 0usize;
    for (seq, &size) in sizes.iter().enumerate() {
        let seq = seq as u64;
        let data = pattern(seq, size);
        a.send_mr.write(0, &data)?;
        b.recv_mr.fill(0xEE)?;
        let sges = |side: &RcSide, recv: bool| -> VerbsResult<Vec<Sge>> {
            let mr = if recv { &side.recv_mr } else { &side.send_mr };
            split(size, if recv { 3 } else { 2 })
                .into_iter()
                .map(|(off, len)| mr.sge(off, len))
                .collect()
        };
        let imm = 0xC0DE_0000 | seq as u32;
        let (recv_sges, send_sges) = (sges(&b, true)?, sges(&a, false)?);
        let sge_counts = (send_sges.len(), recv_sges.len());
        let started = Instant::now();
        b.qp.post_recv(&[RecvWr {
            wr_id: 100 + seq,
            sg_list: recv_sges,
        }])
        .map_err(|e| e.error)?;
        a.qp.post_send(&[SendWr::send_with_imm(seq, send_sges, imm)])
            .map_err(|e| e.error)?;
        let recv = b.cq.poll_one(WAIT)?;
        let send = a.cq.poll_one(WAIT)?;
        let elapsed = started.elapsed();
        let mut got = vec![0u8; size];
        b.recv_mr.read(0, &mut got)?;
        let mut problems = Vec::new();
        if recv.status != WcStatus::Success || send.status != WcStatus::Success {
            problems.push(format!(
                "status send={:?} recv={:?}",
                send.status, recv.status
            ));
        }
        if recv.wr_id != 100 + seq || send.wr_id != seq {
            problems.push("wr_id".to_string());
        }
        if recv.opcode != WcOpcode::Recv || send.opcode != WcOpcode::Send {
            problems.push("opcode".to_string());
        }
        if recv.byte_len as usize != size {
            problems.push(format!("byte_len {}", recv.byte_len));
        }
        if !recv.wc_flags.contains(WcFlags::WITH_IMM) || recv.imm_data != imm {
            problems.push("imm_data".to_string());
        }
        if recv.qp_num != b.qp.qp_num() || recv.src_qp != a.qp.qp_num() {
            problems.push("qp numbers".to_string());
        }
        if got != data {
            let first = got.iter().zip(&data).position(|(x, y)| x != y).unwrap_or(0);
            problems.push(format!("data differs from byte {first}"));
        }
        let result = if problems.is_empty() {
            total_bytes += size;
            "verified".to_string()
        } else {
            all_ok = false;
            format!("FAILED: {}", problems.join(", "))
        };
        println!(
            "{:>9}  {:>2}->{:<2}  {:#010x}  {:>6.2}ms  {}",
            size,
            sge_counts.0,
            sge_counts.1,
            imm,
            elapsed.as_secs_f64() * 1e3,
            result
        );
    }
    println!(
        "{} messages, {} bytes sent, {} bytes received and verified: {}",
        sizes.len(),
        sizes.iter().sum::<usize>(),
        total_bytes,
        if all_ok { "ALL VERIFIED" } else { "FAILURES" }
    );
    if let Some(line) = crate::run_report::faults_line(&[&list[0].name, &list[1].name]) {
        println!("{line}");
    }
    let retries = crate::run_report::Retries::of(&a.ctx, [a.qp.qp_num()])
        .plus(crate::run_report::Retries::of(&b.ctx, [b.qp.qp_num()]));
    println!("{}", retries.line());
    Ok(all_ok)
}
