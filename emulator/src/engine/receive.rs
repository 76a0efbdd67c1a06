//! The receive pipeline (kernel rxe's `rxe_rcv` + `hdr_check`): every datagram a device
//! receives goes through here, in this order:
//!
//! 1. the port is up,
//! 2. the ICRC verifies for the IP header the datagram most plausibly travelled with,
//! 3. it parses as RoCEv2 (the opcode table says which headers and how long),
//! 4. the BTH is one we take: transport header version 0, the default P_Key,
//! 5. it is addressed to a data QP whose transport is the opcode's (RC / UC / UD), to
//!    QP1 (the GSI, for the connection manager), or to QPN 0xFFFFFF of a multicast group
//!    (every UD QP attached to it, see `multicast`), and a connected QP hears only its peer,
//!
//! and is then handed to the data QP's transport (`TransportQp::on_packet`), to the GSI
//! handler a CM installed ([`GsiHandler`]), or dropped. Each drop reason ([`RxDrop`]) has
//! its own counter in `DeviceCounters`.
//!
//! [`check_datagram`] and [`check_for_qp`] are the checks without the device's tables, so
//! that the deterministic simulator (`sim`) receives through the same steps.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use softverbs_api::QpType;

use super::device::{Device, QpEntry};
use super::device_counters::RxDrop;
use super::gsi::GsiHandler;
use super::qp_entry::LastQp;
use crate::net::icrc_check::{icrc_ok, ipv4_identification};
use crate::net::DatagramView;
use crate::transport::NetHeader;
use crate::wire::{RoceRepr, Transport};

/// QP number of the general services interface (CM MADs).
pub const GSI_QPN: u32 = 1;
/// The destination QPN of every multicast datagram (see `multicast`).
pub const MULTICAST_QPN: u32 = 0xff_ffff;
/// The only BTH transport header version (IBTA 1.x).
pub const BTH_TVER: u8 = 0;
/// The default partition key, full membership, the only partition a RoCE port has.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// TTL of the IP packets our UDP sockets send (the Linux default).
const DEFAULT_HOP_LIMIT: u8 = 64;

/// Steps 2–4: ICRC, parse, BTH version and P_Key. The port check and the QP steps are the
/// caller's.
///
/// Inlined, with the parse: the parsed packet is built in the caller's frame (it was
/// copied out of the parse and out of this function, some 100 instructions per datagram).
#[inline(always)]
pub fn check_datagram(d: DatagramView<'_>) -> Result<RoceRepr<'_>, RxDrop> {
    if !icrc_ok(d) {
        return Err(RxDrop::IcrcError);
    }
    let Ok((repr, _icrc)) = RoceRepr::parse_inlined(d.payload) else {
        return Err(RxDrop::Malformed);
    };
    if repr.bth.tver != BTH_TVER {
        return Err(RxDrop::BadVersion);
    }
    if !pkey_matches(repr.bth.pkey, DEFAULT_PKEY) {
        return Err(RxDrop::BadPkey);
    }
    Ok(repr)
}

/// Whether two P_Keys name the same partition with at least one full member (IBTA
/// 10.9.3; rxe's `pkey_match`).
fn pkey_matches(a: u16, b: u16) -> bool {
    let (base_a, base_b) = (a & 0x7fff, b & 0x7fff);
    base_a != 0 && base_a == base_b && (a & 0x8000 != 0 || b & 0x8000 != 0)
}

/// Step 5 for a data QP of type `qp_type` whose peer (connected QPs, once at RTR) is
/// `peer`: the opcode's transport is the QP's, and the sender is the peer.
pub fn check_for_qp(
    repr: &RoceRepr<'_>,
    qp_type: QpType,
    peer: Option<IpAddr>,
    src: IpAddr,
) -> Result<(), RxDrop> {
    let transport = repr.bth.opcode.info().map(|info| info.transport);
    let matches = matches!(
        (qp_type, transport),
        (QpType::Rc, Some(Transport::Rc))
            | (QpType::Uc, Some(Transport::Uc))
            | (QpType::Ud, Some(Transport::Ud))
    );
    if !matches {
        return Err(RxDrop::WrongTransport);
    }
    // A connected QP takes packets only from its peer (rxe's check_addr): anyone else
    // could otherwise inject data with a guessed PSN.
    if let Some(peer) = peer {
        if qp_type != QpType::Ud && peer != src {
            return Err(RxDrop::WrongSource);
        }
    }
    Ok(())
}

impl Device {
    /// Takes one received datagram through the pipeline and hands it on (see the module
    /// docs). The caller is the one receiver of the moment (it holds `rx_lock`, or the link
    /// is not pollable and it is the engine thread).
    ///
    /// `last_qp` is the receiver's (see [`LastQp`]).
    pub(crate) fn receive(&self, d: DatagramView<'_>, last_qp: &mut LastQp) {
        if let Err(reason) = self.receive_checked(d, last_qp) {
            self.counters.count(reason);
        }
    }

    fn receive_checked(&self, d: DatagramView<'_>, last_qp: &mut LastQp) -> Result<(), RxDrop> {
        if !self.port_active() {
            // Nothing arrives through a port that is down.
            return Err(RxDrop::PortDown);
        }
        let repr = check_datagram(d)?;
        let qpn = repr.bth.dest_qp;
        if qpn == MULTICAST_QPN {
            return self.receive_multicast(&repr, d);
        }
        if qpn == GSI_QPN {
            let handler = self.gsi_handler.read().clone();
            let handler = handler.ok_or(RxDrop::GsiUnhandled)?;
            self.counters.gsi_delivered.fetch_add(1, Ordering::Relaxed);
            handler.on_gsi_packet(&repr, d.src);
            return Ok(());
        }
        let entry = last_qp.entry(&self.qps, qpn).ok_or(RxDrop::UnknownQp)?;
        self.deliver_to_qp(entry, &repr, d, net_header(d))
    }

    /// Step 5 for the QP of `entry` (the addressee, or one member of a multicast group):
    /// its checks, then the QP's transport. `rx` is `d`'s [`net_header`].
    pub(super) fn deliver_to_qp(
        &self,
        entry: &QpEntry,
        repr: &RoceRepr<'_>,
        d: DatagramView<'_>,
        rx: NetHeader,
    ) -> Result<(), RxDrop> {
        self.on_qp(entry, Some(rx), |qp, env, out| {
            check_for_qp(repr, qp.qp_type, qp.path.map(|p| p.dst_ip), d.src.ip())?;
            // Counted by the device's one receiver of the moment (see `receive`): a load
            // and a store, not an atomic add, which would be a locked instruction per
            // packet (some 20 cycles).
            let delivered = &self.counters.delivered;
            delivered.store(delivered.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            qp.on_packet(repr, env, out);
            Ok(())
        })
        // Destroyed since the lookup: counted by on_qp, dropped like a packet for no QP.
        .unwrap_or(Ok(()))
    }

    /// Installs (or, with `None`, removes) the handler of QP1 packets.
    pub(crate) fn set_gsi_handler(&self, handler: Option<Arc<dyn GsiHandler>>) {
        *self.gsi_handler.write() = handler;
    }
}

/// The IP header the datagram came with, as far as the link tells: a UDP socket reports
/// neither TTL nor TOS, so those are what our own senders use (64 and 0); the IPv4
/// identification is what the ICRC check verified (0 for DF senders such as softverbs).
pub(super) fn net_header(d: DatagramView<'_>) -> NetHeader {
    NetHeader {
        src: d.src.ip(),
        dst: d.dst.ip(),
        hop_limit: DEFAULT_HOP_LIMIT,
        traffic_class: 0,
        ipv4_identification: ipv4_identification(d).unwrap_or(0),
        flow_label: 0,
        udp_payload_len: d.payload.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BthRepr, Opcode, Psn};

    fn repr(opcode: Opcode) -> RoceRepr<'static> {
        RoceRepr::new(BthRepr::new(opcode, 0x11, Psn::new(0)), &[])
    }

    #[test]
    fn p_keys_match_as_rxe_matches_them() {
        assert!(pkey_matches(0xffff, DEFAULT_PKEY));
        assert!(
            pkey_matches(0x7fff, DEFAULT_PKEY),
            "limited member, full port"
        );
        assert!(!pkey_matches(0x7fff, 0x7fff), "two limited members");
        assert!(!pkey_matches(0x8000, 0x8000), "the invalid P_Key");
        assert!(!pkey_matches(0x1234, DEFAULT_PKEY));
    }

    #[test]
    fn the_opcode_transport_must_be_the_qp_type() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let rc = repr(Opcode::RC_SEND_ONLY);
        let ud = repr(Opcode::UD_SEND_ONLY);
        assert_eq!(check_for_qp(&rc, QpType::Rc, None, ip), Ok(()));
        assert_eq!(
            check_for_qp(&rc, QpType::Ud, None, ip),
            Err(RxDrop::WrongTransport)
        );
        assert_eq!(
            check_for_qp(&ud, QpType::Uc, None, ip),
            Err(RxDrop::WrongTransport)
        );
        assert_eq!(check_for_qp(&ud, QpType::Ud, Some(ip), ip), Ok(()));
    }

    #[test]
    fn a_connected_qp_hears_only_its_peer() {
        let peer: IpAddr = "127.0.0.2".parse().unwrap();
        let other: IpAddr = "127.0.0.3".parse().unwrap();
        let rc = repr(Opcode::RC_SEND_ONLY);
        assert_eq!(check_for_qp(&rc, QpType::Rc, Some(peer), peer), Ok(()));
        assert_eq!(
            check_for_qp(&rc, QpType::Rc, Some(peer), other),
            Err(RxDrop::WrongSource)
        );
        // A UD QP hears anyone.
        let ud = repr(Opcode::UD_SEND_ONLY);
        assert_eq!(check_for_qp(&ud, QpType::Ud, Some(peer), other), Ok(()));
    }
}
