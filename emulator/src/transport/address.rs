//! Address handles (UD destinations) and the network header a received datagram came with
//! (what a UD receive reports in its 40-byte GRH area).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where an address handle points, resolved from its `AhAttr` at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Protection domain of the AH.
    pub pd: u32,
    /// Destination IP address (from the destination GID).
    pub dst_ip: IpAddr,
    /// UDP destination port (4791 unless configured for emulator-to-emulator use).
    pub udp_dst_port: u16,
}

/// The address handles of a device, by id.
#[derive(Debug, Default)]
pub struct AhTable {
    entries: HashMap<u32, AddressVector>,
    next_id: u32,
}

impl AhTable {
    /// Adds `av`; returns its id, or `None` when `limit` handles exist already.
    pub fn insert(&mut self, av: AddressVector, limit: usize) -> Option<u32> {
        if self.entries.len() >= limit {
            return None;
        }
        self.next_id = self.next_id.wrapping_add(1).max(1);
        while self.entries.contains_key(&self.next_id) {
            self.next_id = self.next_id.wrapping_add(1).max(1);
        }
        self.entries.insert(self.next_id, av);
        Some(self.next_id)
    }

    /// Removes handle `id`; false if there was none.
    pub fn remove(&mut self, id: u32) -> bool {
        self.entries.remove(&id).is_some()
    }

    /// Handle `id`.
    pub fn get(&self, id: u32) -> Option<&AddressVector> {
        self.entries.get(&id)
    }

    /// True if some handle belongs to PD `pd`.
    pub fn pd_in_use(&self, pd: u32) -> bool {
        self.entries.values().any(|av| av.pd == pd)
    }
}

/// Bytes of the GRH area at the start of every UD receive buffer.
pub const GRH_BYTES: usize = 40;

/// The IP header a request arrived with, as far as the link knows it; what a UD receive
/// writes into its GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetHeader {
    /// Sender's address.
    pub src: IpAddr,
    /// Our address.
    pub dst: IpAddr,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv4 TOS / IPv6 traffic class.
    pub traffic_class: u8,
    /// IPv4 identification (0 for IPv6).
    pub ipv4_identification: u16,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// Bytes of the UDP payload (BTH .. ICRC).
    pub udp_payload_len: usize,
}

impl NetHeader {
    /// The 40 bytes rxe places before a UD message: for IPv4, 20 zero bytes then the IPv4
    /// header (DF set, no options, checksum filled in); for IPv6, the IPv6 header.
    pub fn grh_bytes(&self) -> [u8; GRH_BYTES] {
        let mut grh = [0u8; GRH_BYTES];
        let udp_len = 8 + self.udp_payload_len;
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                grh[20..].copy_from_slice(&self.ipv4_header(src, dst, udp_len));
            }
            (src, dst) => {
                let (src, dst) = (v6(src), v6(dst));
                let first_word = (6u32 << 28)
                    | (u32::from(self.traffic_class) << 20)
                    | (self.flow_label & 0xf_ffff);
                grh[0..4].copy_from_slice(&first_word.to_be_bytes());
                grh[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
                grh[6] = 17; // UDP
                grh[7] = self.hop_limit;
                grh[8..24].copy_from_slice(&src.octets());
                grh[24..40].copy_from_slice(&dst.octets());
            }
        }
        grh
    }

    fn ipv4_header(&self, src: Ipv4Addr, dst: Ipv4Addr, udp_len: usize) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[1] = self.traffic_class;
        h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&self.ipv4_identification.to_be_bytes());
        h[6] = 0x40; // DF, as rxe sends
        h[8] = self.hop_limit;
        h[9] = 17; // UDP
        h[12..16].copy_from_slice(&src.octets());
        h[16..20].copy_from_slice(&dst.octets());
        let sum = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let folded = (sum & 0xffff) + (sum >> 16);
        let folded = (folded & 0xffff) + (folded >> 16);
        h[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        h
    }
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_grh_is_zeros_then_a_valid_ipv4_header() {
        let h = NetHeader {
            src: "127.0.0.1".parse().unwrap(),
            dst: "127.0.0.2".parse().unwrap(),
            hop_limit: 64,
            traffic_class: 0,
            ipv4_identification: 0,
            flow_label: 0,
            udp_payload_len: 12 + 8 + 4 + 4,
        };
        let grh = h.grh_bytes();
        assert_eq!(&grh[..20], &[0u8; 20]);
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&grh[20..]).unwrap();
        assert_eq!(ip.total_len(), 20 + 8 + 28);
        assert!(ip.dont_fragment());
        assert_eq!(ip.ttl(), 64);
        assert_eq!(ip.protocol(), etherparse::IpNumber::UDP);
        assert_eq!(ip.source(), [127, 0, 0, 1]);
        assert_eq!(ip.destination(), [127, 0, 0, 2]);
        let checksum = ip.to_header().calc_header_checksum();
        assert_eq!(ip.header_checksum(), checksum);
    }

    #[test]
    fn ipv6_grh_is_the_ipv6_header() {
        let h = NetHeader {
            src: "::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            hop_limit: 1,
            traffic_class: 0x20,
            ipv4_identification: 0,
            flow_label: 0x12345,
            udp_payload_len: 100,
        };
        let grh = h.grh_bytes();
        let ip = etherparse::Ipv6HeaderSlice::from_slice(&grh).unwrap();
        assert_eq!(ip.payload_length(), 108);
        assert_eq!(ip.hop_limit(), 1);
        assert_eq!(ip.traffic_class(), 0x20);
        assert_eq!(ip.flow_label().value(), 0x12345);
        assert_eq!(ip.source_addr(), "::1".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn ah_ids_are_unique_and_bounded() {
        let av = AddressVector {
            pd: 1,
            dst_ip: "127.0.0.1".parse().unwrap(),
            udp_dst_port: 4791,
        };
        let mut t = AhTable::default();
        let a = t.insert(av, 2).unwrap();
        let b = t.insert(av, 2).unwrap();
        assert_ne!(a, b);
        assert!(t.insert(av, 2).is_none());
        assert!(t.remove(a));
        assert!(!t.remove(a));
        assert!(t.get(b).is_some() && t.pd_in_use(1) && !t.pd_in_use(2));
    }
}
