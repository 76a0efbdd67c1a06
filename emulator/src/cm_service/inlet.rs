//! The service's end of QP1: the [`GsiHandler`] the device calls with the receive lock
//! held. It only filters and queues (bounded): CM MADs with the GSI Q_Key go to the inbox
//! and a zero-delay device timer is armed to process them on the engine thread; anything
//! else is counted and dropped.

use std::net::SocketAddr;
use std::sync::Weak;

use super::counters::ServiceCounterCells;
use super::service::{CmService, Inbound};
use crate::engine::GsiHandler;
use crate::wire::cm::mad::{GSI_QKEY, MGMT_CLASS_CM};
use crate::wire::RoceRepr;

/// The GSI handler of a device with a CM service.
pub struct GsiInlet {
    pub(super) service: Weak<CmService>,
}

/// Whether a QP1 packet is for the CM: returns the counter that drops it otherwise.
fn refusal<'a>(
    packet: &RoceRepr<'_>,
    counters: &'a ServiceCounterCells,
) -> Option<&'a std::sync::atomic::AtomicU64> {
    if packet.deth.map(|d| d.qkey) != Some(GSI_QKEY) {
        return Some(&counters.bad_qkey_dropped);
    }
    // Byte 1 of the MAD header is its management class; a payload too short to say is
    // left for the CM core to refuse as malformed (a typed, counted error).
    match packet.payload.get(1) {
        Some(&class) if class != MGMT_CLASS_CM => Some(&counters.other_class_dropped),
        _ => None,
    }
}

impl GsiHandler for GsiInlet {
    fn on_gsi_packet(&self, packet: &RoceRepr<'_>, from: SocketAddr) {
        let Some(service) = self.service.upgrade() else {
            return;
        };
        let counters = service.cells();
        ServiceCounterCells::bump(&counters.gsi_packets);
        if let Some(drop_counter) = refusal(packet, counters) {
            ServiceCounterCells::bump(drop_counter);
        } else {
            service.enqueue(Inbound {
                from: from.ip(),
                payload: packet.payload.to_vec(),
            });
        }
        super::service::release(service);
    }
}
