//! `softverbs pingpong`: RC SEND ping-pong between two processes, like ibv_rc_pingpong. The
//! QP numbers, PSNs and GIDs are exchanged over a TCP side channel; the data goes over RoCEv2.
//! With `--ibv` the side channel and message order are rdma-core's ibv_{rc,uc,ud,srq}_pingpong
//! own (`--kind`), so that the rdma-core program is the peer (see `ibv_pingpong.rs`).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softverbs::{
    Mtu, RcConnectOptions, RecvWr, SendWr, VerbsError, VerbsResult, WcOpcode, WcStatus,
};

use crate::ibv_pingpong::{self, IbvKind, IbvPingpongConfig, IbvRole};
use crate::rc_pair::{pattern, RcSide};

/// Arguments of `softverbs pingpong`.
#[derive(clap::Args)]
pub struct PingpongArgs {
    /// Device to use.
    #[arg(long, short = 'd')]
    pub device: String,
    /// Serve: wait for a peer on this TCP address (side channel).
    #[arg(long, conflicts_with = "connect")]
    pub listen: Option<SocketAddr>,
    /// Connect to a serving peer at this TCP address.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// Message size in bytes.
    #[arg(long, short = 's', default_value_t = 4096)]
    pub size: usize,
    /// Round trips.
    #[arg(long, short = 'n', default_value_t = 100)]
    pub iters: u64,
    /// Path MTU in bytes.
    #[arg(long, short = 'm', default_value_t = 1024)]
    pub mtu: u32,
    /// Seconds to wait for any one completion or for the peer.
    #[arg(long, default_value_t = 20)]
    pub timeout_secs: u64,
    /// Speak the side channel of rdma-core's ibv_*_pingpong (port 18515 by convention; its
    /// peer echoes each message, which is checked).
    #[arg(long)]
    pub ibv: bool,
    /// With --ibv: which program is the peer: rc, uc, ud or srq.
    #[arg(long, default_value = "rc", requires = "ibv")]
    pub kind: String,
    /// With --ibv --kind srq: QPs on the SRQ (ibv_srq_pingpong's -q; both ends must agree).
    #[arg(long, default_value_t = 16, requires = "ibv")]
    pub num_qp: usize,
    /// With --ibv: behave as ibv_rc_pingpong itself (echo what arrives, check nothing), to
    /// test the checking side without rdma-core.
    #[arg(long, requires = "ibv")]
    pub echo: bool,
    /// Local ACK timeout exponent of the QP (4.096 us * 2^N; 18 is about 1 s).
    #[arg(long, default_value_t = 14)]
    pub qp_timeout: u8,
}

/// Runs one side; exit 0 only if every message in both directions was verified.
pub fn run(args: &PingpongArgs) -> ExitCode {
    let result = if args.ibv {
        ibv_mode(args)
    } else {
        pingpong(args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ibv_mode(args: &PingpongArgs) -> VerbsResult<()> {
    let mtu = Mtu::from_bytes(args.mtu)
        .ok_or_else(|| VerbsError::inval(format!("--mtu {} is not an IB MTU", args.mtu)))?;
    let role = match (args.listen, args.connect) {
        (Some(addr), None) => {
            let listener = TcpListener::bind(addr).map_err(io_err)?;
            println!("listening on {}", listener.local_addr().map_err(io_err)?);
            IbvRole::Server(listener)
        }
        (None, Some(addr)) => IbvRole::Client(addr),
        _ => {
            return Err(VerbsError::inval(
                "give exactly one of --listen and --connect",
            ))
        }
    };
    let cfg = IbvPingpongConfig {
        kind: IbvKind::parse(&args.kind, args.num_qp)?,
        device: args.device.clone(),
        size: args.size,
        iters: args.iters,
        mtu,
        qp_timeout: args.qp_timeout,
        wait: Duration::from_secs(args.timeout_secs),
        echo: args.echo,
    };
    let report = ibv_pingpong::run(&cfg, role)?;
    println!(
        "{} side channel: local QP {:#x} ({}), remote QP {:#x} ({}): {} messages of {} bytes each way, {}, {:.1} ms",
        cfg.kind.program(),
        report.local.qpn,
        report.local.gid,
        report.remote.qpn,
        report.remote.gid,
        report.iters,
        args.size,
        if args.echo {
            "echoed"
        } else {
            "every echo verified"
        },
        report.elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}

fn io_err(e: std::io::Error) -> VerbsError {
    VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(EIO),
        message: format!("side channel: {e}"),
    }
}

/// errno EIO, for side-channel failures without an OS error.
const EIO: i32 = 5;

fn pingpong(args: &PingpongArgs) -> VerbsResult<()> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let path_mtu = Mtu::from_bytes(args.mtu)
        .ok_or_else(|| VerbsError::inval(format!("--mtu {} is not an IB MTU", args.mtu)))?;
    let side = RcSide::new(&args.device, args.size.max(1), 4)?;
    let is_server = args.listen.is_some();
    let stream = match (args.listen, args.connect) {
        (Some(addr), None) => {
            let listener = TcpListener::bind(addr).map_err(io_err)?;
            println!("listening on {}", listener.local_addr().map_err(io_err)?);
            listener.accept().map_err(io_err)?.0
        }
        (None, Some(addr)) => TcpStream::connect_timeout(&addr, timeout).map_err(io_err)?,
        _ => {
            return Err(VerbsError::inval(
                "give exactly one of --listen and --connect",
            ))
        }
    };
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(io_err)?);
    let mut writer = stream;

    let my_psn = if is_server { 0x00_aaaa } else { 0x00_5555 };
    let me = side.qp.endpoint(my_psn, 1)?;
    let peer = softverbs::exchange_endpoints(&mut writer, &me)?;
    let mut line = String::new();
    let opts = RcConnectOptions {
        path_mtu,
        ..RcConnectOptions::default()
    };
    side.qp.connect_rc(my_psn, &peer, &opts)?;
    println!(
        "{}: local QP {:#x} ({}), remote QP {:#x} ({})",
        side.ctx.name(),
        me.qpn,
        me.gid,
        peer.qpn,
        peer.gid
    );

    let size = args.size;
    let recv_wr = |i: u64| -> VerbsResult<RecvWr> {
        Ok(RecvWr {
            wr_id: i,
            sg_list: vec![side.recv_mr.sge(0, size as u32)?],
        })
    };
    // Each side has a receive posted before telling the other it is ready.
    side.qp.post_recv(&[recv_wr(0)?]).map_err(|e| e.error)?;
    writer.write_all(b"ready\n").map_err(io_err)?;
    line.clear();
    reader.read_line(&mut line).map_err(io_err)?;
    if line.trim() != "ready" {
        return Err(VerbsError::inval(format!(
            "peer said {line:?}, expected ready"
        )));
    }

    let started = Instant::now();
    // A side's receive may complete before its own send: the peer can answer before its ACK
    // of our message arrives (ACKs are coalesced). So each step waits for both, in either
    // order.
    let mut progress = crate::perf::progress::Progress::start_as(
        "pingpong",
        format!("{} round trips of {size} B", args.iters),
    );
    for i in 0..args.iters {
        let now = Instant::now();
        if progress.due(now) {
            let rate = i as f64 / (now - started).as_secs_f64().max(1e-9);
            progress.tick(
                now,
                i,
                Some(args.iters),
                None,
                &format!("{rate:.0} round trips/s"),
            );
        }
        let (out_seq, in_seq) = if is_server {
            (2 * i + 1, 2 * i)
        } else {
            (2 * i, 2 * i + 1)
        };
        if is_server {
            let previous_send = i.checked_sub(1).map(|p| 2 * p + 1);
            await_completions(&side, previous_send, Some(in_seq), size, timeout)?;
            side.qp.post_recv(&[recv_wr(i + 1)?]).map_err(|e| e.error)?;
            post_message(&side, out_seq, size)?;
        } else {
            post_message(&side, out_seq, size)?;
            await_completions(&side, Some(out_seq), Some(in_seq), size, timeout)?;
            side.qp.post_recv(&[recv_wr(i + 1)?]).map_err(|e| e.error)?;
        }
    }
    if is_server && args.iters > 0 {
        await_completions(&side, Some(2 * args.iters - 1), None, size, timeout)?;
    }
    let elapsed = started.elapsed();
    progress.finish();
    println!(
        "{} round trips of {} bytes, every byte verified; {:.1} us per round trip",
        args.iters,
        size,
        elapsed.as_secs_f64() * 1e6 / args.iters.max(1) as f64
    );
    if let Some(line) = crate::run_report::faults_line(&[&side.ctx.name()]) {
        println!("{line}");
    }
    println!(
        "{}",
        crate::run_report::Retries::of(&side.ctx, [side.qp.qp_num()]).line()
    );
    Ok(())
}

fn post_message(side: &RcSide, seq: u64, size: usize) -> VerbsResult<()> {
    side.send_mr.write(0, &pattern(seq, size))?;
    side.qp
        .post_send(&[SendWr::send(seq, vec![side.send_mr.sge(0, size as u32)?])])
        .map_err(|e| e.error)
}

/// Polls until the send of message `send` (if any) and the receive of message `recv` (if
/// any) have both completed, in whichever order; checks each completion and the received
/// bytes.
fn await_completions(
    side: &RcSide,
    mut send: Option<u64>,
    mut recv: Option<u64>,
    size: usize,
    timeout: Duration,
) -> VerbsResult<()> {
    while send.is_some() || recv.is_some() {
        let wc = side.cq.poll_one(timeout)?;
        match (wc.opcode, send, recv) {
            (WcOpcode::Send, Some(seq), _) if wc.status == WcStatus::Success && wc.wr_id == seq => {
                send = None;
            }
            (WcOpcode::Recv, _, Some(seq))
                if wc.status == WcStatus::Success && wc.byte_len as usize == size =>
            {
                let mut got = vec![0u8; size];
                side.recv_mr.read(0, &mut got)?;
                if got != pattern(seq, size) {
                    return Err(VerbsError::inval(format!("message {seq}: data mismatch")));
                }
                recv = None;
            }
            _ => {
                return Err(VerbsError::inval(format!(
                    "unexpected completion ({wc}) while waiting for {}",
                    waiting_for(send, recv)
                )))
            }
        }
    }
    Ok(())
}

/// What [`await_completions`] still waits for, in words.
fn waiting_for(send: Option<u64>, recv: Option<u64>) -> String {
    match (send, recv) {
        (Some(s), Some(r)) => format!("the send of message {s} and the receive of message {r}"),
        (Some(s), None) => format!("the send of message {s}"),
        (None, Some(r)) => format!("the receive of message {r}"),
        (None, None) => "nothing".into(),
    }
}
