//! `softverbs devices`: the devices of both backends; with `-v` what `ibv_devinfo -v` shows
//! (attributes and limits, each port's state and MTUs, the GID table with types) plus the
//! emulated device's counters and the processes sharing it (each one's slot, pid and QP
//! count, from the device's registry); `--json` for one machine-readable document.

use std::process::ExitCode;

use softverbs::select::Provider;
use softverbs::{Context, DeviceInfo, GidType, PortState, VerbsResult};

use softverbs_emu::net::shared_port::registry::Registry;

use crate::json::json_str;

/// Arguments of `softverbs devices`.
#[derive(clap::Args)]
pub struct DevicesArgs {
    /// Attributes, limits, ports, GID tables and counters, as `ibv_devinfo -v`.
    #[arg(short, long)]
    pub verbose: bool,
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
}

/// One device as shown: what the list says, and with `-v` what opening it tells.
struct Shown {
    info: DeviceInfo,
    /// The emulated device's address and UDP port.
    place: Option<String>,
    /// With `-v`: what opening it told, or why it could not be opened (its address held by
    /// another process, for one: an emulated device lives in the process that opens it).
    details: Option<Result<Details, String>>,
}

/// What `-v` adds.
struct Details {
    attr: softverbs::DeviceAttr,
    ports: Vec<(u8, softverbs::PortAttr, Vec<softverbs::GidEntry>)>,
    /// Named counters of the emulated device (this process's traffic on it).
    counters: Vec<(&'static str, u64)>,
    /// The processes sharing the emulated device's port, this one included (it opened
    /// the device to describe it); empty for a device not shared.
    sharing: Vec<Sharer>,
}

/// One process sharing an emulated device.
struct Sharer {
    slot: u8,
    pid: u32,
    /// Its command name (`/proc/PID/comm`), when readable.
    command: String,
    /// QPs it has open (what it last published).
    qps: u32,
}

/// Runs the subcommand.
pub fn run(args: &DevicesArgs) -> ExitCode {
    match collect(args) {
        Ok((shown, selected)) => {
            if args.json {
                println!("{}", json(&shown, &selected));
            } else {
                print_text(&shown, &selected);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softverbs devices: {e}");
            ExitCode::FAILURE
        }
    }
}

fn collect(args: &DevicesArgs) -> VerbsResult<(Vec<Shown>, String)> {
    let mut list = softverbs::all_devices()?;
    if let Some(name) = &args.device {
        list.retain(|d| &d.name == name);
        if list.is_empty() {
            return Err(softverbs::VerbsError::NotFound(format!(
                "no device {name} (softverbs devices lists them)"
            )));
        }
    }
    let emulated = softverbs_emu::engine::device_list()?;
    let mut shown = Vec::with_capacity(list.len());
    for info in list {
        let place = emulated
            .iter()
            .find(|c| info.backend == "emu" && c.name == info.name)
            .map(|c| format!("{} udp/{}", c.ip, c.udp_port));
        let details = if args.verbose {
            Some(details(&info).map_err(|e| e.to_string()))
        } else {
            None
        };
        shown.push(Shown {
            info,
            place,
            details,
        });
    }
    Ok((shown, selected_backend()?))
}

/// Which backend `SOFTVERBS_PROVIDER` selects, and why auto chose the emulator.
fn selected_backend() -> VerbsResult<String> {
    let chosen = Provider::from_env();
    let p = chosen.clone().and_then(|p| p.resolve())?;
    let why = match (chosen, p) {
        (Ok(Provider::Auto), Provider::Emu) => match softverbs::devices_for(Provider::Hw) {
            Ok(_) => " (auto: no rdma-core device)".to_string(),
            Err(e) => format!(" (auto: {e})"),
        },
        _ => String::new(),
    };
    Ok(format!("{}{why}", p.backend_name()))
}

fn details(info: &DeviceInfo) -> VerbsResult<Details> {
    let provider = if info.backend == "hw" {
        Provider::Hw
    } else {
        Provider::Emu
    };
    let ctx = Context::open_with(&info.name, provider)?;
    let attr = ctx.query_device()?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        let pa = ctx.query_port(port)?;
        // Entries that are not in use answer with an error: the table shows those in use.
        let gids = (0..pa.gid_tbl_len)
            .filter_map(|i| ctx.query_gid(port, i).ok())
            .filter(|g| !g.gid.is_zero())
            .collect();
        ports.push((port, pa, gids));
    }
    Ok(Details {
        attr,
        ports,
        counters: counters(&ctx),
        sharing: sharing(&ctx, &info.name)?,
    })
}

/// Who shares the emulated device `ctx` is open on (named `name`), by slot (see
/// docs/shared-devices.md).
fn sharing(ctx: &Context, name: &str) -> VerbsResult<Vec<Sharer>> {
    let Some(emu) = ctx.emulator() else {
        return Ok(Vec::new());
    };
    if emu.shared_slot().is_none() {
        return Ok(Vec::new());
    }
    let addr = emu.local_addr();
    let io = |e: std::io::Error| softverbs::VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("reading the registry of {addr}: {e}"),
    };
    let registry = registry_of(name, addr).map_err(io)?;
    Ok(registry
        .members()
        .map_err(io)?
        .into_iter()
        // A slot whose holder has not published yet (it is joining) is left out.
        .filter_map(|(slot, info)| {
            let info = info?;
            let command = std::fs::read_to_string(format!("/proc/{}/comm", info.pid))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            Some(Sharer {
                slot,
                pid: info.pid,
                command,
                qps: info.qps,
            })
        })
        .collect())
}

/// The registry of the emulated device `name` on `addr`: a qemu socket device's is keyed by
/// its frames socket (its IP exists only on the VM's segment), a UDP device's by `addr`.
fn registry_of(name: &str, addr: std::net::SocketAddr) -> std::io::Result<Registry> {
    use softverbs_emu::engine::{device_list, LinkConfig};
    let config = device_list()
        .ok()
        .and_then(|l| l.into_iter().find(|d| d.name == name));
    match config.map(|c| c.link) {
        Some(LinkConfig::QemuSocket { frames_local, .. }) => {
            Registry::for_qemu_frames(frames_local)
        }
        _ => Registry::for_device(addr.ip(), addr.port()),
    }
}

/// The emulated device's counters, by name (none for an rdma-core device): the transport's,
/// added up over every QP the device has had, then the receive path's drops and errors.
fn counters(ctx: &Context) -> Vec<(&'static str, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(emu) = ctx.emulator() else {
        return Vec::new();
    };
    let c = emu.counters();
    let t = emu.transport_totals();
    let mut named = vec![
        ("sent_requests", t.sent_requests),
        ("sent_responses", t.sent_responses),
        ("received_packets", t.received_packets),
        ("retransmitted_packets", t.retransmitted_packets),
        ("ack_timeouts", t.ack_timeouts),
        ("rnr_naks_sent", t.rnr_naks_sent),
        ("rnr_naks_received", t.rnr_naks_received),
        ("seq_err_naks_sent", t.seq_err_naks_sent),
        ("seq_err_naks_received", t.seq_err_naks_received),
        ("duplicate_requests", t.duplicate_requests),
        ("qp_dropped_packets", t.dropped_packets),
        ("qkey_violations", t.qkey_violations),
        ("delivered_packets", c.delivered.load(Relaxed)),
        ("icrc_errors", c.icrc_errors.load(Relaxed)),
        ("malformed_drops", c.malformed.load(Relaxed)),
        ("unknown_qp_drops", c.unknown_qp.load(Relaxed)),
        ("wrong_source_drops", c.wrong_source.load(Relaxed)),
        ("port_down_drops", c.port_down_drops.load(Relaxed)),
        ("payload_gone_drops", c.payload_gone_drops.load(Relaxed)),
        ("destroyed_qp_calls", c.destroyed_qp_calls.load(Relaxed)),
        ("send_errors", c.send_errors.load(Relaxed)),
    ];
    // The connection manager on QP1: what it took, what it dropped and why.
    if let Some(cm) = ctx.cm_service() {
        let s = cm.counters();
        named.extend([
            ("cm_mads_received", s.cm.mads_received),
            ("cm_mads_sent", s.mads_sent),
            ("cm_malformed_drops", s.malformed),
            ("cm_other_class_drops", s.other_class_dropped),
            ("cm_bad_qkey_drops", s.bad_qkey_dropped),
            ("cm_retransmits", s.cm.retransmits),
            ("cm_connections", s.live_connections as u64),
        ]);
    }
    named
}

fn state_name(s: PortState) -> &'static str {
    match s {
        PortState::Down => "PORT_DOWN (1)",
        PortState::Active => "PORT_ACTIVE (4)",
    }
}

fn gid_type_name(t: GidType) -> &'static str {
    match t {
        GidType::Ib => "IB",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
    }
}

/// A GUID as ibv_devinfo prints it: four groups of four hex digits.
fn guid(g: u64) -> String {
    let h = format!("{g:016x}");
    format!("{}:{}:{}:{}", &h[0..4], &h[4..8], &h[8..12], &h[12..16])
}

/// The device limits `-v` prints, by ibv_devinfo's names.
fn limits(a: &softverbs::DeviceAttr) -> Vec<(&'static str, u64)> {
    vec![
        ("max_mr_size", a.max_mr_size),
        ("max_qp", a.max_qp.into()),
        ("max_qp_wr", a.max_qp_wr.into()),
        ("max_sge", a.max_sge.into()),
        ("max_cq", a.max_cq.into()),
        ("max_cqe", a.max_cqe.into()),
        ("max_mr", a.max_mr.into()),
        ("max_pd", a.max_pd.into()),
        ("max_qp_rd_atom", a.max_qp_rd_atom.into()),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom.into()),
        ("max_srq", a.max_srq.into()),
        ("max_srq_wr", a.max_srq_wr.into()),
        ("max_srq_sge", a.max_srq_sge.into()),
        ("max_ah", a.max_ah.into()),
        ("max_inline_data", a.max_inline_data.into()),
    ]
}

fn print_text(shown: &[Shown], selected: &str) {
    for d in shown {
        let Some(details) = &d.details else {
            let place = d
                .place
                .clone()
                .unwrap_or_else(|| format!("guid {:016x}", d.info.guid));
            println!("{:<12} {:<4} {place}", d.info.name, d.info.backend);
            continue;
        };
        println!("hca_id:\t{}", d.info.name);
        println!("\tbackend:\t\t\t{}", d.info.backend);
        if let Some(place) = &d.place {
            println!("\taddress:\t\t\t{place}");
        }
        let x = match details {
            Ok(x) => x,
            Err(e) => {
                println!("\tnot opened:\t\t{e}\n");
                continue;
            }
        };
        println!("\tfw_ver:\t\t\t\t{}", x.attr.fw_ver);
        println!("\tnode_guid:\t\t\t{}", guid(x.attr.node_guid));
        println!("\tsys_image_guid:\t\t\t{}", guid(x.attr.sys_image_guid));
        println!("\tvendor_id:\t\t\t{:#06x}", x.attr.vendor_id);
        println!("\tvendor_part_id:\t\t\t{}", x.attr.vendor_part_id);
        println!("\thw_ver:\t\t\t\t{:#x}", x.attr.hw_ver);
        println!("\tphys_port_cnt:\t\t\t{}", x.attr.phys_port_cnt);
        for (name, v) in limits(&x.attr) {
            println!("\t{name}:{}{v}", tabs(name, 4));
        }
        for (port, pa, gids) in &x.ports {
            println!("\t\tport:\t{port}");
            println!("\t\t\tstate:\t\t\t{}", state_name(pa.state));
            println!(
                "\t\t\tmax_mtu:\t\t{} ({})",
                pa.max_mtu.bytes(),
                pa.max_mtu as u32
            );
            println!(
                "\t\t\tactive_mtu:\t\t{} ({})",
                pa.active_mtu.bytes(),
                pa.active_mtu as u32
            );
            println!("\t\t\tmax_msg_sz:\t\t{:#x}", pa.max_msg_sz);
            println!("\t\t\tgid_tbl_len:\t\t{}", pa.gid_tbl_len);
            println!("\t\t\tpkey_tbl_len:\t\t{}", pa.pkey_tbl_len);
            let layer = if pa.link_layer_ethernet {
                "Ethernet"
            } else {
                "InfiniBand"
            };
            println!("\t\t\tlink_layer:\t\t{layer}");
            for g in gids {
                println!(
                    "\t\t\tGID[{:>3}]:\t\t{}, {}",
                    g.gid_index,
                    g.gid,
                    gid_type_name(g.gid_type)
                );
            }
        }
        if !x.sharing.is_empty() {
            println!("\tshared by {} processes:", x.sharing.len());
            for p in &x.sharing {
                let this = if p.pid == std::process::id() {
                    ", this one"
                } else {
                    ""
                };
                println!(
                    "\t\tslot {:>3}\tpid {:>7} ({}{this})\tqps {}",
                    p.slot, p.pid, p.command, p.qps
                );
            }
        }
        if !x.counters.is_empty() {
            println!("\tcounters (this process):");
            for (name, v) in &x.counters {
                println!("\t\t{name}:{}{v}", tabs(name, 3));
            }
        }
        println!();
    }
    if shown.is_empty() {
        println!("(no devices)");
    }
    println!("selected backend: {selected}");
}

/// Tabs that line values up after `name:` at column 8 * `stops` (as ibv_devinfo's).
fn tabs(name: &str, stops: usize) -> String {
    let used = (name.len() + 1) / 8;
    "\t".repeat(stops.saturating_sub(used).max(1))
}

fn json(shown: &[Shown], selected: &str) -> String {
    let devices: Vec<String> = shown.iter().map(device_json).collect();
    format!(
        "{{\"devices\":[{}],\"selected_backend\":{}}}",
        devices.join(","),
        json_str(selected)
    )
}

fn device_json(d: &Shown) -> String {
    let mut fields = vec![
        format!("\"name\":{}", json_str(&d.info.name)),
        format!("\"backend\":{}", json_str(d.info.backend)),
        format!("\"node_guid\":{}", json_str(&guid(d.info.guid))),
    ];
    if let Some(place) = &d.place {
        fields.push(format!("\"address\":{}", json_str(place)));
    }
    if let Some(Err(e)) = &d.details {
        fields.push(format!("\"error\":{}", json_str(e)));
    }
    if let Some(Ok(x)) = &d.details {
        fields.push(format!("\"fw_ver\":{}", json_str(&x.attr.fw_ver)));
        fields.push(format!("\"vendor_id\":{}", x.attr.vendor_id));
        fields.push(format!("\"phys_port_cnt\":{}", x.attr.phys_port_cnt));
        let limits: Vec<String> = limits(&x.attr)
            .into_iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        fields.push(format!("\"limits\":{{{}}}", limits.join(",")));
        let ports: Vec<String> = x
            .ports
            .iter()
            .map(|(port, pa, gids)| {
                let gids: Vec<String> = gids
                    .iter()
                    .map(|g| {
                        format!(
                            "{{\"index\":{},\"gid\":{},\"type\":{}}}",
                            g.gid_index,
                            json_str(&g.gid.to_string()),
                            json_str(gid_type_name(g.gid_type))
                        )
                    })
                    .collect();
                format!(
                    "{{\"port\":{port},\"state\":{},\"max_mtu\":{},\"active_mtu\":{},\
                     \"max_msg_sz\":{},\"gid_tbl_len\":{},\"pkey_tbl_len\":{},\
                     \"link_layer\":{},\"gids\":[{}]}}",
                    json_str(if pa.state == PortState::Active {
                        "active"
                    } else {
                        "down"
                    }),
                    pa.max_mtu.bytes(),
                    pa.active_mtu.bytes(),
                    pa.max_msg_sz,
                    pa.gid_tbl_len,
                    pa.pkey_tbl_len,
                    json_str(if pa.link_layer_ethernet {
                        "Ethernet"
                    } else {
                        "InfiniBand"
                    }),
                    gids.join(",")
                )
            })
            .collect();
        fields.push(format!("\"ports\":[{}]", ports.join(",")));
        let counters: Vec<String> = x
            .counters
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        fields.push(format!("\"counters\":{{{}}}", counters.join(",")));
        let sharing: Vec<String> = x
            .sharing
            .iter()
            .map(|p| {
                format!(
                    "{{\"slot\":{},\"pid\":{},\"command\":{},\"qps\":{},\"this\":{}}}",
                    p.slot,
                    p.pid,
                    json_str(&p.command),
                    p.qps,
                    p.pid == std::process::id()
                )
            })
            .collect();
        fields.push(format!("\"processes\":[{}]", sharing.join(",")));
    }
    format!("{{{}}}", fields.join(","))
}
