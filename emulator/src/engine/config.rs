//! How an emulated device is described: its name, IP address, UDP port, link and faults.

use std::net::IpAddr;

use softverbs_api::{VerbsError, VerbsResult};

use crate::net::channel::ChannelNetwork;
use crate::net::fault::FaultSetting;
use crate::transport::qp::ROCE_UDP_PORT;

/// Which link a device sends through.
#[derive(Clone, Default)]
pub enum LinkConfig {
    /// A UDP socket bound to the device's address (the default).
    #[default]
    Udp,
    /// An in-process channel network shared with other devices of the process.
    Channel(ChannelNetwork),
}

impl std::fmt::Debug for LinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkConfig::Udp => write!(f, "Udp"),
            LinkConfig::Channel(_) => write!(f, "Channel"),
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
}

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
    /// called `softrxe<N>` by position.
    pub fn parse_list(spec: &str) -> VerbsResult<Vec<DeviceConfig>> {
        let mut out = Vec::new();
        for (index, entry) in spec.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let (name, addr) = match entry.split_once('=') {
                Some((n, a)) => (n.trim().to_string(), a.trim()),
                None => (format!("softrxe{index}"), entry),
            };
            if name.is_empty() {
                return Err(VerbsError::inval(format!("empty device name in {entry:?}")));
            }
            let (ip, port) = parse_addr(addr)
                .ok_or_else(|| VerbsError::inval(format!("bad device address {addr:?}")))?;
            let mut cfg = DeviceConfig::new(name, ip);
            if let Some(port) = port {
                cfg.udp_port = port;
            }
            out.push(cfg);
        }
        Ok(out)
    }
}

fn parse_addr(s: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some((ip, None));
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
