//! The slot for QP1, the general services interface: the receive pipeline hands every
//! packet for QP1 that passed its checks to the [`GsiHandler`] installed on the device (a
//! connection manager), or counts and drops it when there is none.

use std::net::SocketAddr;

use crate::wire::RoceRepr;

/// The handler of packets for QP1 (the GSI): where the connection manager receives its
/// MADs. Installed with `EmuContext::set_gsi_handler`; without one, QP1 packets are counted
/// in `DeviceCounters::gsi_unhandled` and dropped.
///
/// It is called on whichever thread receives (the engine thread, or an application thread
/// polling a CQ), with the device's receive lock held: it must not block, and should only
/// queue the packet for its own processing.
pub trait GsiHandler: Send + Sync {
    /// A packet for QP1 passed the pipeline's checks; `from` is the sender's IP address and
    /// UDP port.
    fn on_gsi_packet(&self, packet: &RoceRepr<'_>, from: SocketAddr);
}
