//! Device, port and GID attributes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit GID. On RoCEv2 it is an IPv6 address or an IPv4-mapped one (`::ffff:a.b.c.d`);
/// `Display` and `Debug` show it so, never as 16 bytes, and `FromStr` reads that form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl core::fmt::Debug for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl core::str::FromStr for Gid {
    type Err = crate::VerbsError;

    /// An IPv6 address (`fe80::1`, `::ffff:10.0.0.1`) or an IPv4 address (mapped).
    fn from_str(s: &str) -> Result<Gid, Self::Err> {
        s.parse::<IpAddr>()
            .map(Gid::from_ip)
            .map_err(|_| crate::VerbsError::inval(format!("{s:?} is not a GID (an IP address)")))
    }
}

impl Gid {
    /// The GID of an IP address: IPv4 becomes IPv4-mapped, as rxe does.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for (IPv4 for IPv4-mapped GIDs).
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// The link-local GID rxe puts at index 0: fe80:: with an EUI-64 derived from `mac`.
    pub fn link_local_from_mac(mac: [u8; 6]) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8] = mac[0] ^ 0x02;
        g[9] = mac[1];
        g[10] = mac[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = mac[3];
        g[14] = mac[4];
        g[15] = mac[5];
        Gid(g)
    }

    /// True for a multicast GID as the kernel's `rdma_is_multicast_addr` sees one: an
    /// IPv4-mapped GID of an IPv4 multicast address (224.0.0.0/4), or an IPv6 multicast
    /// address (ff00::/8).
    pub fn is_multicast(&self) -> bool {
        self.to_ip().is_multicast()
    }

    /// True for an all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl core::fmt::Display for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

/// `enum ibv_gid_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
}

/// One entry of a port's GID table (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table.
    pub gid_index: u32,
    /// Port number.
    pub port_num: u8,
    /// Type.
    pub gid_type: GidType,
}

/// `enum ibv_mtu`: path and port MTUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of a `enum ibv_mtu` value.
    pub fn from_raw(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The MTU of exactly `bytes` bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::from_raw(match bytes {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            4096 => 5,
            _ => return None,
        })
    }

    /// The largest IB MTU whose RoCEv2 packets fit in an Ethernet MTU of `netdev_mtu` bytes
    /// (as rxe computes `active_mtu`: IP + UDP + BTH + the largest extension headers + ICRC).
    pub fn for_netdev_mtu(netdev_mtu: u32) -> Mtu {
        const OVERHEAD: u32 = 20 + 8 + 12 + 28 + 4; // IPv4 + UDP + BTH + RETH/AtomicETH + ICRC
        let room = netdev_mtu.saturating_sub(OVERHEAD);
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= room)
            .unwrap_or(Mtu::Mtu256)
    }
}

/// `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// IBV_PORT_DOWN
    Down,
    /// IBV_PORT_ACTIVE
    Active,
}

/// `struct ibv_port_attr` (the fields meaningful on RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in effect (from the network interface MTU).
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Maximum message size.
    pub max_msg_sz: u32,
    /// Link layer: always Ethernet for RoCE.
    pub link_layer_ethernet: bool,
}

/// `struct ibv_device_attr` (the fields the emulator enforces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest registrable region.
    pub max_mr_size: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum WRs per queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Maximum PDs.
    pub max_pd: u32,
    /// Maximum outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding READ/atomic per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ receive WR.
    pub max_srq_sge: u32,
    /// Maximum address handles.
    pub max_ah: u32,
    /// Maximum inline data per send WR.
    pub max_inline_data: u32,
    /// Maximum multicast groups (0: no UD multicast).
    pub max_mcast_grp: u32,
    /// Maximum QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Maximum QP attachments to multicast groups in all.
    pub max_total_mcast_qp_attach: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gid_shows_and_parses_as_an_address() {
        let g = Gid::from_ip("127.0.0.1".parse().unwrap());
        assert_eq!(g.to_string(), "::ffff:127.0.0.1");
        assert_eq!(format!("{g:?}"), "Gid(::ffff:127.0.0.1)");
        assert_eq!("::ffff:127.0.0.1".parse::<Gid>().unwrap(), g);
        assert_eq!("127.0.0.1".parse::<Gid>().unwrap(), g);
        assert_eq!("nonsense".parse::<Gid>().unwrap_err().errno(), 22);
    }

    #[test]
    fn multicast_gids_are_ipv4_mapped_multicast_or_ipv6_multicast() {
        assert!("::ffff:230.1.2.3".parse::<Gid>().unwrap().is_multicast());
        assert!("ff12:401b::1".parse::<Gid>().unwrap().is_multicast());
        assert!(!"::ffff:127.0.0.1".parse::<Gid>().unwrap().is_multicast());
        assert!(!"fe80::1".parse::<Gid>().unwrap().is_multicast());
        assert!(!Gid::default().is_multicast());
    }

    #[test]
    fn mtu_from_bytes_round_trips_and_refuses_other_sizes() {
        for m in [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ] {
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_bytes(0), None);
    }
}
