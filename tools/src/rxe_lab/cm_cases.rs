//! The RDMA connection manager against the kernel's rdma_cm on rxe0: unmodified rping,
//! ucmatose and udaddy (rdma-core's rdmacm-utils) in the guest facing softverbs' own
//! (`softverbs rping`'s code, and `cm_peers`' ucmatose / udaddy), in both roles, plus a
//! REQ nobody listens for in each direction.
//!
//! The direction names the active side: `SoftverbsToRxe` = softverbs connects (client),
//! `RxeToSoftverbs` = the kernel connects. Who disconnects first follows each program:
//! rping's client, ucmatose's server; so across the cases both softverbs and the kernel
//! disconnect first, as the active and as the passive side.

use std::process::Child;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softverbs::cm::{getaddrinfo, rej_reason, ConnParam, EventType, PortSpace};
use softverbs::Context;

use super::cm_peers::{self, Exchange, UCMATOSE_PORT, UDADDY_PORT};
use super::lab_env::LabEnv;
use super::line_tap::{tap_lines, wait_for_line};
use super::scenario::Direction;
use super::watchdog::Watchdog;
use crate::rping::{self, RpingArgs};

/// rping's port.
const RPING_PORT: u16 = 7174;
/// A port nobody listens on in the reject case.
const UNUSED_PORT: u16 = 7199;
/// The guest program is killed after this long whatever happens.
const GUEST_LIFETIME_S: u64 = 90;
/// Longest wait for the guest program (the watchdog fails a stalled one sooner).
const WAIT: Duration = Duration::from_secs(100);
/// How long softverbs' servers wait for the kernel's request.
const REQUEST_WAIT: Duration = Duration::from_secs(60);
/// How long the guest server may take to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(40);
/// What the guest prints once its server listens.
const LISTENING: &str = "cm-listening";

/// One CM scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmCase {
    /// rping -C count -S size: the kernel's rping against `softverbs rping`.
    Rping {
        /// Iterations.
        count: u32,
        /// Buffer size.
        size: usize,
    },
    /// ucmatose (RC) with several connections.
    Ucmatose(Exchange),
    /// udaddy (UD through SIDR).
    Udaddy(Exchange),
    /// A REQ for a port nobody listens on: REJECTED, reason 8 (invalid service ID).
    Reject,
    /// A CM ClassPortInfo Get sent to the kernel (softverbs -> rxe only: the kernel's
    /// rdma_cm never sends one): its answer is what softverbs' CM answers a Get with.
    ClassPortInfo,
}

impl CmCase {
    /// Every CM case, in table order.
    pub const ALL: [CmCase; 8] = [
        CmCase::Rping { count: 1, size: 64 },
        CmCase::Rping {
            count: 10,
            size: 1000,
        },
        CmCase::Rping {
            count: 3,
            size: 65535,
        },
        CmCase::Ucmatose(Exchange {
            connections: 4,
            count: 10,
            size: 100,
        }),
        CmCase::Ucmatose(Exchange {
            connections: 2,
            count: 20,
            size: 4000,
        }),
        CmCase::Udaddy(Exchange {
            connections: 1,
            count: 10,
            size: 100,
        }),
        CmCase::Reject,
        CmCase::ClassPortInfo,
    ];

    /// Scenario name (the results table, `--only`).
    pub fn name(self) -> String {
        match self {
            CmCase::Rping { count, size } => format!("CM rping -C {count} -S {size}"),
            CmCase::Ucmatose(x) => {
                format!(
                    "CM ucmatose -c {} -C {} -S {}",
                    x.connections, x.count, x.size
                )
            }
            CmCase::Udaddy(x) => format!("CM udaddy -C {} -S {}", x.count, x.size),
            CmCase::Reject => "CM REJ no listener".to_string(),
            CmCase::ClassPortInfo => "CM ClassPortInfo Get".to_string(),
        }
    }

    /// The roles the case runs in (see the module docs).
    pub fn directions(self) -> &'static [Direction] {
        match self {
            CmCase::ClassPortInfo => &[Direction::SoftverbsToRxe],
            _ => &Direction::BOTH,
        }
    }

    /// Whether CI runs it: one case of each program and the reject, both roles (about
    /// 30-50 s on a quiet lab); the other sizes and counts run with `--full`.
    pub fn in_ci(self) -> bool {
        matches!(
            self,
            CmCase::Rping { count: 10, .. }
                | CmCase::Udaddy(_)
                | CmCase::Reject
                | CmCase::ClassPortInfo
        ) || matches!(self, CmCase::Ucmatose(x) if x.connections == 4)
    }
}

/// Runs `case` with softverbs on `device` in role `dir`; `Ok` says what was shown.
pub fn run(env: &LabEnv, device: &str, case: CmCase, dir: Direction) -> Result<String, String> {
    // The device stays open for the whole case, so its CM answers throughout.
    let _ctx = Context::open(device).map_err(|e| e.to_string())?;
    let host = env.host_ip.to_string();
    let guest = env.guest_ip.to_string();
    match (case, dir) {
        (CmCase::ClassPortInfo, Direction::SoftverbsToRxe) => class_port_info_get(device, &guest),
        (CmCase::ClassPortInfo, Direction::RxeToSoftverbs) => {
            Err("the kernel's rdma_cm sends no ClassPortInfo Get".into())
        }
        (CmCase::Reject, Direction::SoftverbsToRxe) => reject_by_kernel(&guest, &host),
        (CmCase::Reject, Direction::RxeToSoftverbs) => {
            let cmd = format!("rping -c -a {host} -p {UNUSED_PORT} -C 1 -d");
            let out = GuestProgram::start(env, &cmd, None)?.finish(env, false)?;
            if !out.contains("RDMA_CM_EVENT_REJECTED, error 8") {
                return Err(format!("rping did not report REJECTED 8: {}", tail(&out)));
            }
            Ok("rping's REQ for a port nobody listens on: softverbs REJ 8 (invalid service ID), the kernel reports RDMA_CM_EVENT_REJECTED, error 8".into())
        }
        (CmCase::Rping { count, size }, dir) => {
            let mut args = RpingArgs {
                server: dir == Direction::RxeToSoftverbs,
                client: dir == Direction::SoftverbsToRxe,
                addr: host.clone(),
                source: None,
                port: RPING_PORT,
                count,
                size,
                verbose: false,
                debug: false,
                request_wait_s: REQUEST_WAIT.as_secs(),
            };
            let flags = format!("-C {count} -S {size} -p {RPING_PORT} -V -v");
            let out = if args.server {
                let cmd = format!("rping -c -a {host} {flags}");
                pair(env, move || rping_side(&args), &cmd, None)?
            } else {
                args.addr = guest.clone();
                args.source = Some(host.clone());
                let cmd = format!("rping -s -a {guest} {flags}");
                pair(
                    env,
                    move || rping_side(&args),
                    &cmd,
                    Some(("TCP", RPING_PORT)),
                )?
            };
            let pings = out.1.matches("ping data: rdma-ping-").count();
            if pings != count as usize {
                return Err(format!(
                    "the kernel's rping printed {pings} of {count} pings: {}",
                    tail(&out.1)
                ));
            }
            let first = if dir == Direction::SoftverbsToRxe {
                "softverbs"
            } else {
                "rxe"
            };
            Ok(format!(
                "{count} x {size} B SEND/READ/WRITE cycles, data checked on both sides (-V); {first} (client) disconnected first"
            ))
        }
        (CmCase::Ucmatose(x), Direction::RxeToSoftverbs) => {
            let cmd = format!(
                "ucmatose -s {host} -c {} -C {} -S {}",
                x.connections, x.count, x.size
            );
            let run = move || cm_peers::ucmatose_server(x, REQUEST_WAIT);
            let out = pair(env, run, &cmd, None)?;
            returned_zero(&out.1, "ucmatose")?;
            Ok(out.0)
        }
        (CmCase::Ucmatose(x), Direction::SoftverbsToRxe) => {
            let cmd = format!("ucmatose -c {} -C {} -S {}", x.connections, x.count, x.size);
            let run = move || cm_peers::ucmatose_client(&guest, &host, x);
            let out = pair(env, run, &cmd, Some(("TCP", UCMATOSE_PORT)))?;
            returned_zero(&out.1, "ucmatose")?;
            Ok(out.0)
        }
        (CmCase::Udaddy(x), Direction::RxeToSoftverbs) => {
            let cmd = format!("udaddy -s {host} -C {} -S {}", x.count, x.size);
            let h = host.clone();
            let run = move || cm_peers::udaddy_server(&h, x, REQUEST_WAIT);
            let out = pair(env, run, &cmd, None)?;
            returned_zero(&out.1, "udaddy")?;
            Ok(out.0)
        }
        (CmCase::Udaddy(x), Direction::SoftverbsToRxe) => {
            let cmd = format!("udaddy -C {} -S {}", x.count, x.size);
            let run = move || cm_peers::udaddy_client(&guest, &host, x);
            let out = pair(env, run, &cmd, Some(("UDP", UDADDY_PORT)))?;
            returned_zero(&out.1, "udaddy")?;
            Ok(out.0)
        }
    }
}

/// Sends a CM ClassPortInfo Get from QP1 of `device` to the guest's QP1 and waits for
/// the kernel's GetResp to reach our CM (`get_responses_received`). `softverbs decode` of
/// the capture shows its method and status.
fn class_port_info_get(device: &str, guest: &str) -> Result<String, String> {
    use softverbs_emu::cm_service::{gsi_packet, gsi_path};
    use softverbs_emu::wire::cm::mad::{method, MadHeaderRepr};
    use softverbs_emu::wire::cm::{ClassPortInfoRepr, CmMad, CmMessage, MAD_LEN};
    let ctx = Context::open(device).map_err(|e| e.to_string())?;
    let service = ctx.cm_service().ok_or("no CM on the lab device")?;
    let before = service.counters().cm.get_responses_received;
    let mad = CmMad {
        header: MadHeaderRepr {
            method: method::GET,
            ..MadHeaderRepr::cm_send(0, 0x5e1f_0000_0000_0001)
        },
        message: CmMessage::ClassPortInfo(ClassPortInfoRepr::default()),
    };
    let mut bytes = [0u8; MAD_LEN];
    mad.emit(&mut bytes).map_err(|e| e.to_string())?;
    let to: std::net::IpAddr = guest.parse().map_err(|_| "bad guest address")?;
    service
        .context()
        .send_gsi_packet(&gsi_path(to), &gsi_packet(&bytes, 0))
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while service.counters().cm.get_responses_received == before {
        if Instant::now() > deadline {
            return Err("no GetResp from the kernel within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok("the kernel answered a CM ClassPortInfo Get with a GetResp (method and status in the capture's decode)".into())
}

fn rping_side(args: &RpingArgs) -> Result<String, String> {
    let result = if args.server {
        rping::server(args)
    } else {
        rping::client(args)
    };
    result
        .map(|()| String::new())
        .map_err(|e| format!("softverbs rping: {e}"))
}

/// softverbs connects to a guest port nobody listens on: the kernel's CM answers REJ
/// "invalid service ID" (8), which must arrive as REJECTED with that status.
fn reject_by_kernel(guest: &str, host: &str) -> Result<String, String> {
    let e = |x: softverbs::VerbsError| x.to_string();
    let info = getaddrinfo(guest, UNUSED_PORT, Some(host), false, PortSpace::Tcp).map_err(e)?;
    let id = softverbs::cm::create_ep(&info, None, Some(&Default::default())).map_err(e)?;
    id.connect(&ConnParam::default()).map_err(e)?;
    let ev = id.next_event(Duration::from_secs(30)).map_err(e)?;
    let want = i32::from(rej_reason::INVALID_SERVICE_ID);
    if ev.event != EventType::Rejected || ev.status != want {
        return Err(format!(
            "expected REJECTED status {want}, got {} status {}",
            ev.event.name(),
            ev.status
        ));
    }
    Ok(format!(
        "connect to port {UNUSED_PORT} of the guest: the kernel's REJ, REJECTED status {want} (invalid service ID)"
    ))
}

/// Runs softverbs' half (`ours`, on a thread) against the guest program `cmd`; with
/// `listen` = (port space, port) the guest program is the server and ours starts once
/// the guest listens, else ours is the server and the guest starts right away (ours
/// waits for the request). Returns (ours' summary, the guest's output).
fn pair(
    env: &LabEnv,
    ours: impl FnOnce() -> Result<String, String> + Send + 'static,
    cmd: &str,
    listen: Option<(&str, u16)>,
) -> Result<(String, String), String> {
    let (guest, ours) = match listen {
        Some(_) => {
            let guest = GuestProgram::start(env, cmd, listen)?;
            (guest, std::thread::spawn(ours))
        }
        None => {
            let ours = std::thread::spawn(ours);
            // Our listener is up within milliseconds; the guest's ssh takes longer.
            std::thread::sleep(Duration::from_millis(200));
            (GuestProgram::start(env, cmd, None)?, ours)
        }
    };
    let guest_out = guest.finish(env, true);
    let ours = join(ours);
    let guest_out = guest_out?;
    Ok((ours?, guest_out))
}

fn join(handle: JoinHandle<Result<String, String>>) -> Result<String, String> {
    handle
        .join()
        .unwrap_or_else(|_| Err("softverbs' side panicked".into()))
}

/// A program running in the guest under `timeout`, its output collected.
pub(super) struct GuestProgram {
    child: Child,
    output: JoinHandle<String>,
    cmd: String,
}

impl GuestProgram {
    /// Starts `cmd`; with `listen`, returns once the guest's rdma_cm shows it listening
    /// on that port space and port.
    pub(super) fn start(
        env: &LabEnv,
        cmd: &str,
        listen: Option<(&str, u16)>,
    ) -> Result<Self, String> {
        let run = format!("timeout {GUEST_LIFETIME_S} {cmd}");
        let script = match listen {
            Some((ps, port)) => format!(
                "{run} 2>&1 & for i in $(seq 300); do rdma res show cm_id | grep -q 'state LISTEN ps {ps} .*src-addr [0-9.]*:{port} ' && echo {LISTENING} && break; sleep 0.1; done; wait $!"
            ),
            None => format!("{run} 2>&1"),
        };
        let mut child = env.spawn_guest(&[], &script)?;
        let stdout = child.stdout.take().ok_or("no guest stdout")?;
        let (rx, output) = tap_lines(stdout);
        let program = GuestProgram {
            child,
            output,
            cmd: cmd.to_string(),
        };
        if listen.is_some() && !wait_for_line(&rx, LISTENING, Instant::now() + LISTEN_WAIT) {
            let out = program.finish_now();
            return Err(format!("`{cmd}` did not listen: {}", tail(&out)));
        }
        Ok(program)
    }

    /// Waits (watchdog included) for the program; its output, or why it failed (a
    /// non-zero exit is a failure when `must_succeed`).
    pub(super) fn finish(mut self, env: &LabEnv, must_succeed: bool) -> Result<String, String> {
        let waited = Watchdog::new(env).wait_exit(&mut self.child, WAIT, &self.cmd);
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        }
        let out = self.output.join().unwrap_or_default() + &err;
        let status = waited?;
        if must_succeed && !status.success() {
            return Err(format!("`{}` failed ({status}): {}", self.cmd, tail(&out)));
        }
        Ok(out)
    }

    fn finish_now(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.output.join().unwrap_or_default()
    }
}

/// ucmatose and udaddy end with "return status N".
fn returned_zero(out: &str, program: &str) -> Result<(), String> {
    if out.contains("return status 0") {
        Ok(())
    } else {
        Err(format!("{program} did not return 0: {}", tail(out)))
    }
}

/// The last lines of a program's output, for an error message.
fn tail(out: &str) -> String {
    let lines: Vec<&str> = out.lines().rev().take(4).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" / ")
}
