//! The device's counters: one per reason the receive pipeline drops a datagram ([`RxDrop`]),
//! what it delivered, and what the send path could not send.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why the pipeline dropped a datagram: each reason is a counter of [`DeviceCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxDrop {
    /// The port is down.
    PortDown,
    /// The ICRC did not verify.
    IcrcError,
    /// It did not parse as RoCEv2 (short, unknown opcode, bad header).
    Malformed,
    /// BTH transport header version other than 0.
    BadVersion,
    /// A P_Key that does not match the port's only (default) partition.
    BadPkey,
    /// No QP with that number.
    UnknownQp,
    /// The opcode's transport is not the QP's type (an RC packet to a UD QP, say).
    WrongTransport,
    /// A connected QP got it from an address other than its peer's.
    WrongSource,
    /// For QP1, and nothing handles the GSI yet.
    GsiUnhandled,
}

/// Device-wide counters: what the receive pipeline dropped (one counter per [`RxDrop`]),
/// what it delivered, and what the send path could not send.
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// Datagrams whose ICRC did not verify.
    pub icrc_errors: AtomicU64,
    /// Datagrams that did not parse as RoCEv2.
    pub malformed: AtomicU64,
    /// Packets with a BTH transport header version other than 0.
    pub bad_version: AtomicU64,
    /// Packets with a P_Key other than the default partition's.
    pub bad_pkey: AtomicU64,
    /// Packets for a QP number that does not exist.
    pub unknown_qp: AtomicU64,
    /// Packets whose opcode belongs to another transport than their QP's type.
    pub wrong_transport: AtomicU64,
    /// Packets for a connected QP from an address other than its peer's.
    pub wrong_source: AtomicU64,
    /// Packets for QP1 (GSI) while no handler is installed (see `GsiHandler`).
    pub gsi_unhandled: AtomicU64,
    /// Packets delivered to a QP.
    pub delivered: AtomicU64,
    /// Packets handed to the GSI handler.
    pub gsi_delivered: AtomicU64,
    /// Link send errors.
    pub send_errors: AtomicU64,
    /// Packets not sent or not received because the port was down.
    pub port_down_drops: AtomicU64,
    /// Packets not sent because the memory their payload was to be read from was
    /// deregistered between building and sending them.
    pub payload_gone_drops: AtomicU64,
    /// Transport calls (a received packet, a timer, a lazy ACK, a post) skipped because
    /// their QP was destroyed between looking it up and locking it.
    pub destroyed_qp_calls: AtomicU64,
}

impl DeviceCounters {
    /// The counter of drop reason `reason`.
    pub fn of(&self, reason: RxDrop) -> &AtomicU64 {
        match reason {
            RxDrop::PortDown => &self.port_down_drops,
            RxDrop::IcrcError => &self.icrc_errors,
            RxDrop::Malformed => &self.malformed,
            RxDrop::BadVersion => &self.bad_version,
            RxDrop::BadPkey => &self.bad_pkey,
            RxDrop::UnknownQp => &self.unknown_qp,
            RxDrop::WrongTransport => &self.wrong_transport,
            RxDrop::WrongSource => &self.wrong_source,
            RxDrop::GsiUnhandled => &self.gsi_unhandled,
        }
    }

    /// Counts one drop for `reason`.
    pub fn count(&self, reason: RxDrop) {
        self.of(reason).fetch_add(1, Ordering::Relaxed);
    }
}
