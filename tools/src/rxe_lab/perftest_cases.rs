//! Unmodified perftest (ib_send_bw, ib_write_bw, ib_read_bw) in the guest against softverbs speaking
//! perftest's side channel (`crate::perftest_oob`), in both roles: softverbs as the client
//! posts the WRITEs / READs itself and checks every completion; softverbs as the server lends
//! its buffer to rxe's requests. Either way perftest must exit 0 with its report, and softverbs
//! must see the whole exchange through to "done".

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use softverbs::{
    AccessFlags, Context, Mtu, QpCap, RcConnectOptions, RcEndpoint, RdmaBuffer, RecvWr, RemoteAddr,
    SendWr, WcOpcode, WcStatus, WrOpcode,
};

use super::guest_pair::LAB_QP_TIMEOUT;
use super::lab_env::{free_local_port, LabEnv};
use super::scenario::Direction;
use super::watchdog::Watchdog;
use crate::ibv_oob::IBV_PINGPONG_PORT;
use crate::perftest_oob::{mtu_enum, PerftestComm, PerftestKeys};

/// The perftest programs covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerftestBw {
    /// ib_send_bw
    Send,
    /// ib_write_bw
    Write,
    /// ib_read_bw
    Read,
}

impl PerftestBw {
    /// Both.
    pub const ALL: [PerftestBw; 3] = [PerftestBw::Send, PerftestBw::Write, PerftestBw::Read];

    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            PerftestBw::Send => "ib_send_bw",
            PerftestBw::Write => "ib_write_bw",
            PerftestBw::Read => "ib_read_bw",
        }
    }
}

/// Message size and count of each run.
const SIZE: usize = 65536;
const ITERS: u64 = 100;
/// Work requests softverbs keeps in flight as the client.
const IN_FLIGHT: u64 = 16;
/// Outstanding READs softverbs accepts (its max_dest_rd_atomic).
const OUT_READS: u32 = 16;
/// Longest wait for the side channel, a completion, or perftest's test phase.
const WAIT: Duration = Duration::from_secs(120);
/// perftest in the guest is killed after this long whatever happens.
const GUEST_LIFETIME_S: u64 = 200;

fn e(x: softverbs::VerbsError) -> String {
    x.to_string()
}

fn wait_guest(env: &LabEnv, mut child: Child) -> Result<String, String> {
    Watchdog::new(env).wait_exit(&mut child, WAIT, "perftest in the guest")?;
    let out = child.wait_with_output().map_err(|x| x.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(4).collect();
        return Err(format!(
            "perftest in the guest failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let text = without_calibration_warnings(&text);
    let report = report_rows(text.lines(), "#bytes")
        .first()
        .map(|fields| fields.join(" "))
        .ok_or_else(|| format!("perftest printed no report: {}", text.trim()))?;
    Ok(report)
}

/// perftest's output without the warnings its clock calibration writes to stderr on a busy
/// machine ("Correlation coefficient r^2: 0.87 < 0.9", "Conflicting CPU frequency values
/// detected: ..."). They arrive unbuffered and so land in the middle of a stdout report row;
/// each is cut out with its newline, which joins the row's two halves again.
pub fn without_calibration_warnings(text: &str) -> String {
    const WARNINGS: [&str; 2] = [
        "Correlation coefficient r^2: ",
        "Conflicting CPU frequency values detected",
    ];
    let mut out = text.to_string();
    for warning in WARNINGS {
        while let Some(start) = out.find(warning) {
            let end = out[start..]
                .find('\n')
                .map_or(out.len(), |newline| start + newline + 1);
            out.replace_range(start..end, "");
        }
    }
    out
}

/// The rows of a report, perftest's or `softverbs perf`'s: the lines starting with a
/// number that follow the first line starting with `marker` (perftest's `#bytes` header,
/// or `softverbs perf`'s `---` line and any header after it), as fields.
pub fn report_rows<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    marker: &str,
) -> Vec<Vec<&'a str>> {
    let is_row = |l: &&str| l.trim_start().starts_with(|c: char| c.is_ascii_digit());
    lines
        .into_iter()
        .skip_while(|l| !l.trim_start().starts_with(marker))
        .skip(1)
        .skip_while(|l| !is_row(l))
        .take_while(is_row)
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Connects to a forwarded perftest server, retrying while the forward has nobody behind it
/// yet; returns the stream and the peer's setup.
fn connect_client(
    addr: SocketAddr,
    mtu: u32,
    keys: &PerftestKeys,
) -> Result<(PerftestComm, crate::perftest_oob::PerftestPeer), String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let attempt = (|| -> Result<_, String> {
            let s = TcpStream::connect_timeout(&addr, WAIT).map_err(|x| x.to_string())?;
            s.set_read_timeout(Some(WAIT)).map_err(|x| x.to_string())?;
            let mut comm = PerftestComm::new(s, true);
            let peer = comm.setup(mtu_enum(mtu), keys).map_err(e)?;
            Ok((comm, peer))
        })();
        match attempt {
            Ok(r) => return Ok(r),
            Err(_) if Instant::now() + Duration::from_millis(300) < deadline => {
                std::thread::sleep(Duration::from_millis(300))
            }
            Err(x) => return Err(x),
        }
    }
}

fn accept_server(
    listener: &TcpListener,
    mtu: u32,
    keys: &PerftestKeys,
) -> Result<(PerftestComm, crate::perftest_oob::PerftestPeer), String> {
    let (stream, _) = crate::tcp_accept::accept_within(listener, WAIT)
        .map_err(|x| format!("waiting for perftest to connect: {x}"))?;
    stream
        .set_read_timeout(Some(WAIT))
        .map_err(|x| x.to_string())?;
    let mut comm = PerftestComm::new(stream, false);
    let peer = comm.setup(mtu_enum(mtu), keys).map_err(e)?;
    Ok((comm, peer))
}

/// Runs `kind` with softverbs as the requester (`SoftverbsToRxe`, softverbs is perftest's
/// client) or as the responder (`RxeToSoftverbs`).
pub fn run(
    env: &LabEnv,
    device: &str,
    kind: PerftestBw,
    dir: Direction,
    mtu: u32,
) -> Result<String, String> {
    let ctx = Context::open(device).map_err(e)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(256).map_err(e)?;
    let buf_len = 2 * SIZE.max(4096) + 4096;
    let mr = pd
        .register(
            RdmaBuffer::new(buf_len).ok_or("buffer allocation failed")?,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .map_err(e)?;
    let qp = pd
        .qp_builder()
        .cap(QpCap {
            max_send_wr: 64,
            max_recv_wr: ITERS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .build(&cq, &cq)
        .map_err(e)?;
    let psn = 0x12_3456;
    let ep = qp.endpoint(psn, 1).map_err(e)?;
    let keys = PerftestKeys {
        out_reads: OUT_READS,
        qpn: ep.qpn,
        psn,
        rkey: mr.rkey(),
        vaddr: mr.addr(),
        gid: ep.gid,
    };
    let guest_cmd = format!(
        "exec timeout {GUEST_LIFETIME_S} {} -d rxe0 -x 1 -F -m {mtu} -s {SIZE} -n {ITERS} -p {IBV_PINGPONG_PORT}",
        kind.program()
    );
    let is_client = dir == Direction::SoftverbsToRxe;
    let (child, setup) = if is_client {
        let port = free_local_port()?;
        let child = env.spawn_guest(
            &[
                "-L".into(),
                format!("127.0.0.1:{port}:127.0.0.1:{IBV_PINGPONG_PORT}"),
            ],
            &guest_cmd,
        )?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        (child, connect_client(addr, mtu, &keys))
    } else {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|x| x.to_string())?;
        let port = listener.local_addr().map_err(|x| x.to_string())?.port();
        let child = env.spawn_guest(
            &["-R".into(), format!("{IBV_PINGPONG_PORT}:127.0.0.1:{port}")],
            &format!("{guest_cmd} 127.0.0.1"),
        )?;
        (child, accept_server(&listener, mtu, &keys))
    };
    let outcome = (|| -> Result<String, String> {
        let (mut comm, peer) = setup?;
        // As perftest: the smaller MTU of the two, and a buffer that covers the larger cycle
        // buffer the peer's requests walk through.
        let path_mtu = peer.agreed_mtu(Mtu::from_bytes(mtu).ok_or("bad MTU")?);
        // Each half of the buffer (SIZE fits it) must hold the peer's cycle buffer.
        peer.check_cycle_buffer(buf_len / 2).map_err(e)?;
        let remote = RcEndpoint {
            qpn: peer.keys.qpn,
            psn: peer.keys.psn,
            gid: peer.keys.gid,
            udp_port: None,
        };
        qp.connect_rc(
            psn,
            &remote,
            &RcConnectOptions {
                path_mtu,
                access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
                timeout: LAB_QP_TIMEOUT,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: peer.keys.out_reads.clamp(1, OUT_READS) as u8,
                max_dest_rd_atomic: OUT_READS as u8,
                ..RcConnectOptions::default()
            },
        )
        .map_err(e)?;
        comm.barrier(&keys, "after connect").map_err(e)?;
        comm.barrier(&keys, "after RTR").map_err(e)?;
        let started = Instant::now();
        if kind == PerftestBw::Send {
            // ib_send_bw: the server's receives are posted before a third barrier; then the
            // client sends, and there is no report exchange in a half-duplex test.
            if !is_client {
                for i in 0..ITERS {
                    qp.post_recv(&[RecvWr {
                        wr_id: i,
                        sg_list: vec![mr.sge(0, SIZE as u32).map_err(e)?],
                    }])
                    .map_err(|x| x.error.to_string())?;
                }
            }
            comm.barrier(&keys, "receives posted").map_err(e)?;
            if is_client {
                post_all(&qp, &cq, &mr, kind, &peer.keys)?;
            } else {
                for i in 0..ITERS {
                    let wc = cq.poll_one(WAIT).map_err(e)?;
                    if wc.status != WcStatus::Success
                        || wc.opcode != WcOpcode::Recv
                        || wc.wr_id != i
                        || wc.byte_len as usize != SIZE
                        || wc.src_qp != peer.keys.qpn
                    {
                        return Err(format!("receive {i}: {wc:?}"));
                    }
                }
            }
        } else {
            if is_client {
                post_all(&qp, &cq, &mr, kind, &peer.keys)?;
            }
            // The server's barrier waits here until the client's test is over.
            comm.barrier(&keys, "after the test").map_err(e)?;
            let secs = started.elapsed().as_secs_f64().max(1e-6);
            let mb = (SIZE as u64 * ITERS) as f64 / secs / 1e6;
            let (rsize, riters, _, _, _) = comm
                .xchg_report(SIZE as u64, ITERS, mb, mb, ITERS as f64 / secs / 1e6)
                .map_err(e)?;
            if !is_client && (rsize, riters) != (SIZE as u64, ITERS) {
                return Err(format!(
                    "perftest reported {riters} x {rsize} B, ran {ITERS} x {SIZE} B"
                ));
            }
        }
        comm.close(&keys).map_err(e)?;
        let op = match kind {
            PerftestBw::Send => "SEND",
            PerftestBw::Write => "WRITE",
            PerftestBw::Read => "READ",
        };
        Ok(if is_client {
            format!(
                "{ITERS} x {SIZE} B {op}s posted by softverbs, all completed; peer version {}",
                peer.version
            )
        } else if kind == PerftestBw::Send {
            format!(
                "{ITERS} x {SIZE} B SENDs received by softverbs, all completions checked; peer version {}",
                peer.version
            )
        } else {
            format!(
                "rxe's {} ran {ITERS} x {SIZE} B {op}s on softverbs' buffer; peer version {}",
                kind.program(),
                peer.version
            )
        })
    })();
    match outcome {
        Ok(covered) => {
            let report = wait_guest(env, child)?;
            Ok(format!("{covered}; perftest's report: {report}"))
        }
        Err(x) => {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            Err(x)
        }
    }
}

/// softverbs as the client: ITERS requests of SIZE bytes at the server's buffer, at most
/// IN_FLIGHT outstanding, every completion checked.
fn post_all(
    qp: &softverbs::Qp,
    cq: &softverbs::Cq,
    mr: &softverbs::Mr,
    kind: PerftestBw,
    peer: &PerftestKeys,
) -> Result<(), String> {
    let (opcode, wc_opcode) = match kind {
        PerftestBw::Send => (WrOpcode::Send, WcOpcode::Send),
        PerftestBw::Write => (WrOpcode::RdmaWrite, WcOpcode::RdmaWrite),
        PerftestBw::Read => (WrOpcode::RdmaRead, WcOpcode::RdmaRead),
    };
    let (mut posted, mut done) = (0u64, 0u64);
    while done < ITERS {
        while posted < ITERS && posted - done < IN_FLIGHT {
            let wr = SendWr {
                opcode,
                remote: RemoteAddr {
                    remote_addr: peer.vaddr,
                    rkey: peer.rkey,
                },
                ..SendWr::send(posted, vec![mr.sge(0, SIZE as u32).map_err(e)?])
            };
            qp.post_send(&[wr]).map_err(|x| x.error.to_string())?;
            posted += 1;
        }
        let wc = cq.poll_one(WAIT).map_err(e)?;
        if wc.status != WcStatus::Success || wc.opcode != wc_opcode || wc.wr_id != done {
            return Err(format!("completion {done}: {wc:?}"));
        }
        done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{report_rows, without_calibration_warnings};

    /// As ib_write_bw printed it on a loaded lab host: the warning cut a row in two.
    #[test]
    fn calibration_warnings_inside_a_report_row_are_cut_out() {
        let text = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
                    64         5                0.00               0.00                 0.000021\n \
                    128        5                0.00               0.00                 0.000007Correlation coefficient r^2: 0.872461 < 0.9\n\
                    \n \
                    256        5                0.01               0.01                 0.000010\n\
                    Conflicting CPU frequency values detected: 2400.000000 != 2900.000000. CPU Frequency is not max.\n \
                    512        5                0.02               0.02                 0.000011\n";
        let clean = without_calibration_warnings(text);
        let sizes: Vec<&str> = report_rows(clean.lines(), "#bytes")
            .iter()
            .map(|row| row[0])
            .collect();
        assert_eq!(sizes, ["64", "128", "256", "512"]);
        let rows = report_rows(clean.lines(), "#bytes");
        assert_eq!(rows[1].len(), 5, "{:?}", rows[1]);
    }
}
