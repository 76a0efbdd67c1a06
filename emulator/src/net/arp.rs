//! ARP for IPv4 over Ethernet (RFC 826), the 28-byte body only: parse and emit. The
//! workspace's etherparse (0.16) has no ARP support.

use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP body.
pub const ARP_LEN: usize = 28;
/// Fixed start of every Ethernet/IPv4 ARP body: hardware type 1 (Ethernet), protocol type
/// 0x0800 (IPv4), hardware address length 6, protocol address length 4.
const ARP_ETHERNET_IPV4: [u8; 6] = [0x00, 0x01, 0x08, 0x00, 6, 4];

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    /// Who has `target_ip`? (1)
    Request,
    /// `sender_ip` is at `sender_mac` (2)
    Reply,
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in requests).
    pub target_mac: [u8; 6],
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an ARP body (trailing padding allowed); `None` if it is not Ethernet/IPv4
    /// request or reply, or is too short.
    pub fn parse(body: &[u8]) -> Option<ArpRepr> {
        let b: &[u8; ARP_LEN] = body.get(..ARP_LEN)?.try_into().ok()?;
        if b[..6] != ARP_ETHERNET_IPV4 {
            return None;
        }
        let op = match u16::from_be_bytes([b[6], b[7]]) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return None,
        };
        let mac = |at: usize| -> [u8; 6] {
            [b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]]
        };
        let ip = |at: usize| Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
        Some(ArpRepr {
            op,
            sender_mac: mac(8),
            sender_ip: ip(14),
            target_mac: mac(18),
            target_ip: ip(24),
        })
    }

    /// The 28 body bytes.
    pub fn emit(&self) -> [u8; ARP_LEN] {
        let mut b = [0u8; ARP_LEN];
        b[..6].copy_from_slice(&ARP_ETHERNET_IPV4);
        b[7] = match self.op {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        };
        b[8..14].copy_from_slice(&self.sender_mac);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_mac);
        b[24..28].copy_from_slice(&self.target_ip.octets());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let r = ArpRepr {
            op: ArpOp::Reply,
            sender_mac: [0x52, 0x54, 0, 0x77, 0, 2],
            sender_ip: Ipv4Addr::new(10, 77, 0, 2),
            target_mac: [2, 0, 10, 77, 0, 1],
            target_ip: Ipv4Addr::new(10, 77, 0, 1),
        };
        let b = r.emit();
        assert_eq!(&b[..8], &[0, 1, 8, 0, 6, 4, 0, 2]);
        assert_eq!(ArpRepr::parse(&b), Some(r));
        let mut padded = b.to_vec();
        padded.extend_from_slice(&[0; 18]);
        assert_eq!(ArpRepr::parse(&padded), Some(r));
        assert_eq!(ArpRepr::parse(&b[..27]), None);
        let mut rarp = b;
        rarp[7] = 3;
        assert_eq!(ArpRepr::parse(&rarp), None);
        let mut ipv6 = b;
        ipv6[2..4].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(ArpRepr::parse(&ipv6), None);
    }
}
