//! What the kernel's rdma_cm (cma.c) adds on top of the IB CM: the service ID built from a
//! port space and a port, and the 36-byte header it puts in front of the user's private
//! data in REQ and SIDR_REQ.
//!
//! ```text
//! byte 0       cma_version (0x00)
//! byte 1       ip_version in bits 7:4 (4 or 6), bits 3:0 zero
//! bytes 2-3    source port
//! bytes 4-19   source address      (IPv4: 12 zero bytes, then the address)
//! bytes 20-35  destination address (same encoding)
//! ```
//!
//! Note that IPv4 is zero-padded (the kernel's `pad[3]`), not IPv4-mapped; the conformance
//! capture shows exactly that.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::layout::check_len;
use super::mad::MadError;

/// Length of rdma_cm's private data header.
pub const CMA_HDR_LEN: usize = 36;
/// The only header version rdma_cm sends and accepts.
pub const CMA_VERSION: u8 = 0x00;

/// An rdma_cm port space: the high half of an IP-based service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// RDMA_PS_TCP: connected (RC) QPs.
    Tcp,
    /// RDMA_PS_UDP: UD QPs, resolved with SIDR.
    Udp,
    /// RDMA_PS_IB: any QP type.
    Ib,
    /// RDMA_PS_IPOIB.
    Ipoib,
}

impl PortSpace {
    /// The kernel's `enum rdma_ucm_port_space` value.
    pub fn value(self) -> u16 {
        match self {
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
            PortSpace::Ipoib => 0x0002,
        }
    }

    /// The port space of an `enum rdma_ucm_port_space` value.
    pub fn from_value(v: u16) -> Option<PortSpace> {
        match v {
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            0x0002 => Some(PortSpace::Ipoib),
            _ => None,
        }
    }
}

/// The service ID rdma_cm uses for `port` in `space`: `space << 16 | port`
/// (so TCP port 18515 is 0x0000_0000_0106_4853, as perftest's REQ carries).
pub fn ip_service_id(space: PortSpace, port: u16) -> u64 {
    (u64::from(space.value()) << 16) | u64::from(port)
}

/// The (port space, port) of an IP-based service ID, or `None` if it is not one.
pub fn parse_ip_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    let space = PortSpace::from_value((service_id >> 16) as u16)?;
    Some((space, service_id as u16))
}

/// The flow label rdma_cm gives a RoCE connection from its ports (the kernel's
/// `cma_get_roce_udp_flow_label`: source port * 31 + destination port, 20 bits); on RoCEv2
/// it picks the UDP source port of the data packets.
pub fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0x000f_ffff
}

/// The GID of an IP address as RoCEv2 uses it: IPv4-mapped for v4.
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// rdma_cm's private data header: who connects to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// The connecting side's port.
    pub src_port: u16,
    /// The connecting side's address.
    pub src_addr: IpAddr,
    /// The address connected to.
    pub dst_addr: IpAddr,
}

impl CmaHdr {
    /// Parses the header at the start of `private_data`.
    pub fn parse(private_data: &[u8]) -> Result<CmaHdr, MadError> {
        check_len(private_data, CMA_HDR_LEN)?;
        let b = private_data;
        if b[0] != CMA_VERSION {
            return Err(MadError::BadField {
                what: "cma_version",
                value: u64::from(b[0]),
            });
        }
        let ip_version = b[1] >> 4;
        let addr = |at: usize| -> IpAddr {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            if ip_version == 4 {
                IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
            } else {
                IpAddr::V6(Ipv6Addr::from(a))
            }
        };
        if ip_version != 4 && ip_version != 6 {
            return Err(MadError::BadField {
                what: "cma ip_version",
                value: u64::from(ip_version),
            });
        }
        Ok(CmaHdr {
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src_addr: addr(4),
            dst_addr: addr(20),
        })
    }

    /// Writes the header into the first 36 bytes of `private_data`. Both addresses must be
    /// of the same family.
    pub fn emit(&self, private_data: &mut [u8]) -> Result<(), MadError> {
        check_len(private_data, CMA_HDR_LEN)?;
        let ip_version: u8 = match (self.src_addr, self.dst_addr) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => {
                return Err(MadError::BadField {
                    what: "cma address families differ",
                    value: 0,
                })
            }
        };
        let b = &mut private_data[..CMA_HDR_LEN];
        b.fill(0);
        b[0] = CMA_VERSION;
        b[1] = ip_version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        for (at, addr) in [(4, self.src_addr), (20, self.dst_addr)] {
            match addr {
                IpAddr::V4(a) => b[at + 12..at + 16].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => b[at..at + 16].copy_from_slice(&a.octets()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_service_id() {
        assert_eq!(ip_service_id(PortSpace::Tcp, 18515), 0x0000_0000_0106_4853);
        assert_eq!(
            parse_ip_service_id(0x0000_0000_0106_4853),
            Some((PortSpace::Tcp, 18515))
        );
        assert_eq!(parse_ip_service_id(0x0000_0001_0106_4853), None);
        assert_eq!(parse_ip_service_id(0x0000_0000_0107_4853), None);
        for ps in [
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
            PortSpace::Ipoib,
        ] {
            assert_eq!(parse_ip_service_id(ip_service_id(ps, 7)), Some((ps, 7)));
        }
    }

    #[test]
    fn flow_labels_of_the_capture() {
        // The two REQs of ib_send_lat_rdmacm_mtu1500.pcap: ports 0xdfcf and 0xc1b2 -> 18515.
        assert_eq!(roce_flow_label(0xdfcf, 18515), 0xb6264);
        assert_eq!(roce_flow_label(0xc1b2, 18515), 0x7bce1);
        assert_eq!(
            ip_to_gid("10.77.0.1".parse().unwrap())[10..],
            [0xff, 0xff, 10, 77, 0, 1]
        );
    }

    #[test]
    fn ipv4_header_matches_the_capture() {
        // ib_send_lat_rdmacm_mtu1500.pcap frame 1, REQ private data bytes 0..36.
        let mut real = [0u8; 36];
        real[1] = 0x40;
        real[2..4].copy_from_slice(&[0xdf, 0xcf]);
        real[16..20].copy_from_slice(&[10, 77, 0, 2]);
        real[32..36].copy_from_slice(&[10, 77, 0, 1]);
        let h = CmaHdr::parse(&real).unwrap();
        assert_eq!(
            h,
            CmaHdr {
                src_port: 0xdfcf,
                src_addr: "10.77.0.2".parse().unwrap(),
                dst_addr: "10.77.0.1".parse().unwrap(),
            }
        );
        let mut out = [0xeeu8; 36];
        h.emit(&mut out).unwrap();
        assert_eq!(out, real);
    }

    #[test]
    fn ipv6_round_trip_and_bad_headers() {
        let h = CmaHdr {
            src_port: 1,
            src_addr: "fe80::1".parse().unwrap(),
            dst_addr: "::1".parse().unwrap(),
        };
        let mut b = [0u8; 40];
        h.emit(&mut b).unwrap();
        assert_eq!(b[1], 0x60);
        assert_eq!(CmaHdr::parse(&b).unwrap(), h);
        b[0] = 1;
        assert!(matches!(CmaHdr::parse(&b), Err(MadError::BadField { .. })));
        b[0] = 0;
        b[1] = 0x50;
        assert!(matches!(CmaHdr::parse(&b), Err(MadError::BadField { .. })));
        assert!(matches!(
            CmaHdr::parse(&b[..35]),
            Err(MadError::Truncated { .. })
        ));
        let mixed = CmaHdr {
            dst_addr: "10.0.0.1".parse().unwrap(),
            ..h
        };
        assert!(mixed.emit(&mut b).is_err());
    }
}
