//! A CM MAD as the kernel sends it from QP1 over RoCEv2: a UD SEND ONLY to QP1 with the
//! GSI Q_Key and default P_Key, ACK request set, PSNs counting up per device, from the UDP
//! source port rxe gives QP1.

use std::net::IpAddr;

use crate::net::PathInfo;
use crate::wire::cm::mad::{DEFAULT_PKEY, GSI_QKEY, GSI_QPN};
use crate::wire::udp_port::{ud_udp_src_port, ROCE_UDP_PORT};
use crate::wire::{BthRepr, DethRepr, Opcode, Psn, RoceRepr};

/// The path of a MAD to QP1 of `to`.
pub fn gsi_path(to: IpAddr) -> PathInfo {
    PathInfo {
        dst_ip: to,
        udp_dst_port: ROCE_UDP_PORT,
        udp_src_port: ud_udp_src_port(GSI_QPN),
    }
}

/// The packet carrying `mad` to QP1 with PSN `psn`.
pub fn gsi_packet(mad: &[u8], psn: u32) -> RoceRepr<'_> {
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, GSI_QPN, Psn::new(psn));
    bth.pkey = DEFAULT_PKEY;
    bth.ack_req = true;
    let mut repr = RoceRepr::new(bth, mad);
    repr.deth = Some(DethRepr {
        qkey: GSI_QKEY,
        src_qp: GSI_QPN,
    });
    repr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp1_sends_from_the_port_rxe_uses() {
        assert_eq!(gsi_path("127.28.0.1".parse().unwrap()).udp_src_port, 55410);
        let mad = [7u8; 256];
        let p = gsi_packet(&mad, 3);
        assert_eq!(p.bth.dest_qp, 1);
        assert!(p.bth.ack_req);
        assert_eq!(p.deth.map(|d| (d.qkey, d.src_qp)), Some((0x8001_0000, 1)));
    }
}
