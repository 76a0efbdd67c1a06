//! UDP ports of RoCEv2: the fixed destination port and the source port rxe derives from
//! the connection's flow label (spreading flows over ECMP paths while keeping each QP's
//! packets in order).
//!
//! rxe takes the flow label of the QP's address vector; only if that is 0 does it compute
//! one from the two QPNs. QPs connected with plain `ibv_modify_qp` (the pingpong tools,
//! perftest without `-R`) have flow label 0, so [`rc_udp_src_port`] applies; RDMA CM sets a
//! flow label from its port numbers (`sport * 31 + dport`, carried in the CM REQ's primary
//! path), so CM-connected QPs use [`flow_label_udp_src_port`] of that label (seen in
//! `ib_send_lat_rdmacm_mtu1500.pcap`).

/// The IANA RoCEv2 UDP destination port.
pub const ROCE_UDP_PORT: u16 = 4791;

/// Base of the source-port range rxe uses (0xC000..=0xFFFF, the dynamic range).
const SRC_PORT_BASE: u16 = 0xc000;

/// The 20-bit flow label ib_core computes for a RoCEv2 RC/UC connection whose address
/// vector has none (`rdma_calc_flow_label`): symmetric in the two QPNs.
pub fn rdma_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// UDP source port for a 20-bit flow label: `0xC000 | ((fl & 0x3fff) ^ (fl >> 14))`.
pub fn flow_label_udp_src_port(flow_label: u32) -> u16 {
    let fl = flow_label & 0xf_ffff;
    // fl is 20 bits, so both terms fit in 14 bits.
    SRC_PORT_BASE | (((fl & 0x3fff) ^ (fl >> 14)) as u16)
}

/// UDP source port of an RC/UC QP `lqpn` connected to `rqpn` with flow label 0 (no RDMA
/// CM); both directions of a connection use the same port.
pub fn rc_udp_src_port(lqpn: u32, rqpn: u32) -> u16 {
    flow_label_udp_src_port(rdma_flow_label(lqpn, rqpn))
}

/// UDP source port of a UD QP (and of QP1, the CM): `0xC000 + hash_32(src_qpn, 14)`.
pub fn ud_udp_src_port(src_qpn: u32) -> u16 {
    // Linux hash_32: multiply by the 32-bit golden ratio, keep the top 14 bits.
    let hash = src_qpn.wrapping_mul(0x61c8_8647) >> (32 - 14);
    SRC_PORT_BASE + hash as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values from the conformance README and captures (QPNs from logs/*.txt).
    #[test]
    fn rc_ports_from_captures() {
        assert_eq!(rc_udp_src_port(0x27, 0x2b), 50829);
        assert_eq!(rc_udp_src_port(0x2b, 0x27), 50829);
        // ib_atomic_lat_cmp_swap: client QPN 0x28, server QPN 0x2c, UDP source port 50912.
        assert_eq!(rc_udp_src_port(0x28, 0x2c), 50912);
        // pyverbs_rc_imm_rnr: QPNs 48 and 52, UDP source port 51648.
        assert_eq!(rc_udp_src_port(48, 52), 51648);
    }

    #[test]
    fn rc_port_folds_high_flow_label_bits() {
        // 0x1000 * 0x1000 = 2^24: v ^= v >> 20 gives 0x1000010, fl = 0x10, port 0xC010.
        assert_eq!(rc_udp_src_port(0x1000, 0x1000), 0xc010);
        // Flow label 0xffff * 3 = 0x2fffd: 0x3ffd ^ 0xb = 0x3ff6.
        assert_eq!(rc_udp_src_port(0xffff, 3), 0xfff6);
    }

    // ib_send_lat_rdmacm_mtu1500.pcap: flow labels from the two CM REQs, and the ports
    // both directions of those connections use.
    #[test]
    fn cm_flow_label_ports_from_capture() {
        assert_eq!(flow_label_udp_src_port(0xb6264), 57929);
        assert_eq!(flow_label_udp_src_port(0x7bce1), 64767);
        // The QPN-derived port would have been different.
        assert_ne!(rc_udp_src_port(0x2d, 0x31), 57929);
    }

    #[test]
    fn ud_ports_from_captures() {
        assert_eq!(ud_udp_src_port(1), 55410);
        assert_eq!(ud_udp_src_port(0x37), 49285);
    }
}
