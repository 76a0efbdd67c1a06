//! How an emulated device is described: its name, IP address, UDP port, link and faults.

use std::net::{IpAddr, SocketAddr};

use softverbs_api::{VerbsError, VerbsResult};

use crate::net::channel::ChannelNetwork;
use crate::net::fault::FaultSetting;
use crate::transport::qp::ROCE_UDP_PORT;

/// The environment variable listing emulated devices (see [`DeviceConfig::parse_list`]).
pub const DEVICES_ENV: &str = "SOFTVERBS_DEVICES";

/// Which link a device sends through.
#[derive(Clone, Default)]
pub enum LinkConfig {
    /// A UDP socket bound to the device's address (the default).
    #[default]
    Udp,
    /// An in-process channel network shared with other devices of the process.
    Channel(ChannelNetwork),
    /// Ethernet frames as UDP datagrams to and from a qemu socket netdev
    /// (`-netdev socket,udp=FRAMES_LOCAL,localaddr=FRAMES_PEER`): the device is a station
    /// on the VM's Ethernet segment with its own IPv4 address and MAC, answering ARP itself.
    QemuSocket {
        /// Where this side receives frames (qemu's `udp=`), on 127.0.0.0/8.
        frames_local: SocketAddr,
        /// Where qemu receives frames (its `localaddr=`).
        frames_peer: SocketAddr,
    },
}

impl std::fmt::Debug for LinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkConfig::Udp => write!(f, "Udp"),
            LinkConfig::Channel(_) => write!(f, "Channel"),
            LinkConfig::QemuSocket {
                frames_local,
                frames_peer,
            } => write!(f, "QemuSocket({frames_local} <-> {frames_peer})"),
        }
    }
}

/// An emulated device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Device name, e.g. `softrxe0`.
    pub name: String,
    /// The IP address the device is bound to; its GID at index 1.
    pub ip: IpAddr,
    /// UDP port (4791; another value only for emulator-to-emulator use).
    pub udp_port: u16,
    /// MTU of the network interface the device stands for; the port's active MTU follows
    /// from it as in rxe. Loopback's is 65536, giving an active MTU of 4096.
    pub netdev_mtu: u32,
    /// The link.
    pub link: LinkConfig,
    /// Fault injection on what the device sends (either link); `None` for a clean link.
    pub faults: Option<FaultSetting>,
    /// RC requesters ask for an ACK only where someone waits for it (see
    /// `transport::requester`); off, every message asks, as rxe's requester does, which
    /// makes our wire traffic match rxe's packet for packet. On unless
    /// `SOFTVERBS_ACK_COALESCING=0`.
    pub ack_coalescing: bool,
    /// What the device reports and enforces (rxe's limits unless set smaller).
    pub limits: super::limits::DeviceLimits,
    /// A UDP device's port is shared with the other processes that open the device (each
    /// joins the port's `SO_REUSEPORT` group and gets QP numbers of its own, see
    /// docs/shared-devices.md), as every process on a host shares a real NIC. On unless
    /// `SOFTVERBS_SHARE_PORT=0`; off, the device binds its port alone and a second process
    /// opening it gets EADDRINUSE.
    pub share_port: bool,
}

/// The environment variable that turns port sharing off (`0`) for every UDP device.
pub const SHARE_PORT_ENV: &str = "SOFTVERBS_SHARE_PORT";

/// The environment variable that turns ACK coalescing off (`0`) for every device.
pub const ACK_COALESCING_ENV: &str = "SOFTVERBS_ACK_COALESCING";

impl DeviceConfig {
    /// A device `name` on `ip`, UDP port 4791, loopback MTU.
    pub fn new(name: impl Into<String>, ip: IpAddr) -> Self {
        DeviceConfig {
            name: name.into(),
            ip,
            udp_port: ROCE_UDP_PORT,
            netdev_mtu: 65536,
            link: LinkConfig::Udp,
            faults: None,
            ack_coalescing: std::env::var(ACK_COALESCING_ENV).map_or(true, |v| v != "0"),
            limits: super::limits::DeviceLimits::default(),
            share_port: std::env::var(SHARE_PORT_ENV).map_or(true, |v| v != "0"),
        }
    }

    /// Gives every device of `list` the faults of `spec` (see [`FaultSetting::parse`]),
    /// device `i` with seed `seed + i` so that devices do not drop in lockstep, each with
    /// its own counters. EINVAL naming `source` if `spec` is malformed.
    pub fn apply_fault_spec(
        list: &mut [DeviceConfig],
        spec: &str,
        source: &str,
    ) -> VerbsResult<()> {
        let setting =
            FaultSetting::parse(spec).map_err(|e| VerbsError::inval(format!("{source}: {e}")))?;
        for (i, device) in list.iter_mut().enumerate() {
            device.faults = Some(FaultSetting::new(
                setting.config,
                setting.seed.wrapping_add(i as u64),
            ));
        }
        Ok(())
    }

    /// The MAC address the device stands for: locally administered, from its IP address (the
    /// source of GID 0's EUI-64 and of the node GUID).
    pub fn mac(&self) -> [u8; 6] {
        let tail = match self.ip {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(v6) => {
                let o = v6.octets();
                [o[12], o[13], o[14], o[15]]
            }
        };
        [0x02, 0x00, tail[0], tail[1], tail[2], tail[3]]
    }

    /// The node GUID: the EUI-64 of [`DeviceConfig::mac`].
    pub fn node_guid(&self) -> u64 {
        let m = self.mac();
        u64::from_be_bytes([m[0], m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }

    /// Parses the device list of `SOFTVERBS_DEVICES`: comma-separated entries, each
    /// `IP`, `NAME=IP`, `IP:PORT` / `[IPv6]:PORT` or `NAME=...:PORT`. Unnamed entries are
    /// called `softrxe<N>` by position. An entry may end in `@LOCAL/PEER[/MTU]`: the device
    /// then stands on a qemu socket netdev's segment ([`LinkConfig::QemuSocket`], frames
    /// received on UDP `LOCAL` and sent to UDP `PEER`) with netdev MTU `MTU` (1500 if not
    /// given), e.g. `lab=10.77.0.1@127.0.0.1:47901/127.0.0.1:47902/9000`.
    /// EINVAL naming `SOFTVERBS_DEVICES` and the entry for a malformed entry, a name used
    /// twice, or two UDP devices on one address and port.
    pub fn parse_list(spec: &str) -> VerbsResult<Vec<DeviceConfig>> {
        let bad = |what: String| VerbsError::inval(format!("{DEVICES_ENV}={spec:?}: {what}"));
        let mut out: Vec<DeviceConfig> = Vec::new();
        for (index, entry) in spec.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let (name, addr) = match entry.split_once('=') {
                Some((n, a)) => (n.trim().to_string(), a.trim()),
                None => (format!("softrxe{index}"), entry),
            };
            if name.is_empty() {
                return Err(bad(format!("empty device name in {entry:?}")));
            }
            let (addr, link) = match addr.split_once('@') {
                Some((a, l)) => (a, Some(parse_qemu_link(l)?)),
                None => (addr, None),
            };
            let (ip, port) = parse_addr(addr).ok_or_else(|| {
                bad(format!(
                    "bad device address {addr:?} (expected IP, IP:PORT, [IPv6] or [IPv6]:PORT)"
                ))
            })?;
            let mut cfg = DeviceConfig::new(name, ip);
            if let Some(port) = port {
                cfg.udp_port = port;
            }
            if let Some((link, mtu)) = link {
                if !ip.is_ipv4() {
                    return Err(bad(format!(
                        "{entry:?}: a qemu socket link carries IPv4 only"
                    )));
                }
                cfg.link = link;
                cfg.netdev_mtu = mtu;
            }
            if let Some(twin) = out.iter().find(|d| d.name == cfg.name) {
                return Err(bad(format!(
                    "device name {:?} is given twice ({} and {})",
                    cfg.name, twin.ip, cfg.ip
                )));
            }
            let udp = |d: &DeviceConfig| matches!(d.link, LinkConfig::Udp);
            if let Some(twin) = out
                .iter()
                .find(|d| udp(d) && udp(&cfg) && d.ip == cfg.ip && d.udp_port == cfg.udp_port)
            {
                return Err(bad(format!(
                    "devices {:?} and {:?} are both on {} port {} (each device needs its own address)",
                    twin.name, cfg.name, cfg.ip, cfg.udp_port
                )));
            }
            out.push(cfg);
        }
        Ok(out)
    }
}

/// The on/off switches the emulator reads from the environment: `0` (off) or `1` (on).
pub const SWITCH_ENVS: [&str; 3] = [ACK_COALESCING_ENV, crate::net::udp::GSO_ENV, SHARE_PORT_ENV];
/// The pacing rate of qemu socket links, in kbit/s (a positive integer).
pub const QEMU_PACE_ENV: &str = "SOFTVERBS_QEMU_PACE_KBPS";

/// Checks the emulator's environment switches and numbers ([`SWITCH_ENVS`],
/// [`QEMU_PACE_ENV`]): EINVAL naming the variable and its value when one is set to
/// something it does not take (read where the links are made, a bad value would
/// otherwise be silently taken as the default). `SOFTVERBS_DEVICES` and
/// `SOFTVERBS_FAULTS` are checked where the device list is read.
pub fn check_env() -> VerbsResult<()> {
    for name in SWITCH_ENVS {
        match std::env::var(name) {
            Ok(v) if v == "0" || v == "1" => {}
            Ok(v) => {
                return Err(VerbsError::inval(format!(
                    "{name}={v:?}: expected 0 (off) or 1 (on)"
                )))
            }
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(VerbsError::inval(format!("{name} is not valid UTF-8")))
            }
        }
    }
    match std::env::var(QEMU_PACE_ENV) {
        Ok(v) if v.parse::<u64>().is_ok_and(|k| k > 0) => Ok(()),
        Ok(v) => Err(VerbsError::inval(format!(
            "{QEMU_PACE_ENV}={v:?}: expected a rate in kbit/s (a positive integer)"
        ))),
        Err(std::env::VarError::NotPresent) => Ok(()),
        Err(std::env::VarError::NotUnicode(_)) => Err(VerbsError::inval(format!(
            "{QEMU_PACE_ENV} is not valid UTF-8"
        ))),
    }
}

/// Netdev MTU of a qemu socket link when the entry names none: a NIC's default.
const ETHERNET_DEFAULT_MTU: u32 = 1500;

/// `LOCAL/PEER[/MTU]` of a device entry: the frame sockets of a qemu socket link.
fn parse_qemu_link(s: &str) -> VerbsResult<(LinkConfig, u32)> {
    let bad = || {
        VerbsError::inval(format!(
            "bad qemu socket link {s:?} (expected LOCAL/PEER[/MTU], e.g. 127.0.0.1:47901/127.0.0.1:47902/9000)"
        ))
    };
    let mut parts = s.split('/');
    let frames_local: SocketAddr = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let frames_peer: SocketAddr = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let mtu = match parts.next() {
        Some(m) => m.parse::<u32>().map_err(|_| bad())?,
        None => ETHERNET_DEFAULT_MTU,
    };
    if parts.next().is_some() || !(576..=65535).contains(&mtu) {
        return Err(bad());
    }
    Ok((
        LinkConfig::QemuSocket {
            frames_local,
            frames_peer,
        },
        mtu,
    ))
}

fn parse_addr(s: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some((ip, None));
    }
    // `[IPv6]` without a port, as `[IPv6]:PORT` is written with one.
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|ip| (IpAddr::V6(ip), None));
    }
    let sa: std::net::SocketAddr = s.parse().ok()?;
    Some((sa.ip(), Some(sa.port())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_lists() {
        let list = DeviceConfig::parse_list("127.0.0.1, b=127.0.0.2:5000,[::1]:4791").unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[0].name, "softrxe0");
        assert_eq!(list[0].ip, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(list[0].udp_port, 4791);
        assert_eq!(list[1].name, "b");
        assert_eq!(list[1].udp_port, 5000);
        assert_eq!(list[2].ip, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            DeviceConfig::parse_list("x=nonsense").unwrap_err().errno(),
            22
        );
    }

    #[test]
    fn a_bracketed_ipv6_address_needs_no_port() {
        let list = DeviceConfig::parse_list("a=[::1],b=[::1]:4792").unwrap();
        assert_eq!(list[0].ip, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(list[0].udp_port, 4791);
        assert_eq!(list[1].udp_port, 4792);
        assert!(DeviceConfig::parse_list("a=[127.0.0.1]").is_err());
    }

    #[test]
    fn a_name_or_an_address_given_twice_is_refused_by_name() {
        for (spec, says) in [
            ("x=127.0.0.1,x=127.0.0.2", "\"x\" is given twice"),
            ("a=127.0.0.1,b=127.0.0.1", "both on 127.0.0.1 port 4791"),
        ] {
            let e = DeviceConfig::parse_list(spec).unwrap_err();
            assert_eq!(e.errno(), 22);
            let text = e.to_string();
            assert!(text.contains(says), "{spec}: {text}");
            assert!(text.contains("SOFTVERBS_DEVICES"), "{spec}: {text}");
        }
        // The same address on another port is another device.
        assert_eq!(
            DeviceConfig::parse_list("a=127.0.0.1,b=127.0.0.1:4792")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn parses_qemu_socket_links() {
        let list = DeviceConfig::parse_list(
            "lab=10.77.0.1@127.0.0.1:47901/127.0.0.1:47902/9000,10.77.0.3@127.0.0.1:1/127.0.0.1:2",
        )
        .unwrap();
        assert_eq!(list[0].name, "lab");
        assert_eq!(list[0].ip, "10.77.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(list[0].udp_port, 4791);
        assert_eq!(list[0].netdev_mtu, 9000);
        match &list[0].link {
            LinkConfig::QemuSocket {
                frames_local,
                frames_peer,
            } => {
                assert_eq!(*frames_local, "127.0.0.1:47901".parse().unwrap());
                assert_eq!(*frames_peer, "127.0.0.1:47902".parse().unwrap());
            }
            other => panic!("wrong link {other:?}"),
        }
        assert_eq!(list[1].netdev_mtu, 1500);
        for bad in [
            "x=10.0.0.1@127.0.0.1:1",
            "x=10.0.0.1@127.0.0.1:1/nowhere",
            "x=10.0.0.1@127.0.0.1:1/127.0.0.1:2/12",
            "x=10.0.0.1@127.0.0.1:1/127.0.0.1:2/9000/1",
            "x=fe80::1@127.0.0.1:1/127.0.0.1:2",
        ] {
            assert_eq!(
                DeviceConfig::parse_list(bad).unwrap_err().errno(),
                22,
                "{bad}"
            );
        }
    }

    #[test]
    fn fault_specs_apply_to_every_device_with_distinct_seeds() {
        let mut list = DeviceConfig::parse_list("127.0.0.1,127.0.0.2").unwrap();
        assert!(list.iter().all(|d| d.faults.is_none()));
        DeviceConfig::apply_fault_spec(&mut list, "loss=100,corrupt=10,seed=7", "test").unwrap();
        let f0 = list[0].faults.clone().unwrap();
        let f1 = list[1].faults.clone().unwrap();
        assert_eq!(f0.config.loss_per_mille, 100);
        assert_eq!(f1.config.corrupt_per_mille, 10);
        assert_eq!((f0.seed, f1.seed), (7, 8));
        assert!(!std::sync::Arc::ptr_eq(&f0.counters, &f1.counters));

        let e =
            DeviceConfig::apply_fault_spec(&mut list, "loss=lots", "SOFTVERBS_FAULTS").unwrap_err();
        assert_eq!(e.errno(), 22);
        assert!(e.to_string().contains("SOFTVERBS_FAULTS"), "{e}");
    }
}
