//! What the CM service of a device counts beside the CM core's own counters: MADs taken
//! from QP1 or dropped before the core (other management classes, wrong Q_Key, a full
//! inbox), sends, QP moves that failed and events that found no listener.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cm::CmCounters;

macro_rules! service_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Live counters (atomics, bumped from the receive path and the service).
        #[derive(Debug, Default)]
        pub struct ServiceCounterCells {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A snapshot of a device's CM service counters.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct ServiceCounters {
            $($(#[$doc])* pub $name: u64,)*
            /// The CM core's counters (malformed MADs, retransmits, connections ...).
            pub cm: CmCounters,
            /// Connections the core holds now (time-wait included).
            pub live_connections: usize,
            /// SIDR requests the core holds now.
            pub live_sidr: usize,
            /// Ports bound now.
            pub ports_bound: usize,
            /// Event routes held now.
            pub routes: usize,
        }

        impl ServiceCounterCells {
            /// Adds one to `cell`.
            pub fn bump(cell: &AtomicU64) {
                cell.fetch_add(1, Ordering::Relaxed);
            }

            /// The values now, with the core's.
            pub fn snapshot(&self, cm: CmCounters) -> ServiceCounters {
                ServiceCounters {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    cm,
                    ..ServiceCounters::default()
                }
            }
        }
    };
}

service_counters! {
    /// Packets QP1 handed to the service.
    gsi_packets,
    /// MADs of another management class than CM (SA, PerfMgt ...): dropped.
    other_class_dropped,
    /// QP1 packets whose Q_Key is not the GSI's: dropped, as rxe drops them.
    bad_qkey_dropped,
    /// MADs dropped because the inbox was full (the peer resends).
    inbox_full_dropped,
    /// MADs the core refused as malformed (also in `cm.malformed`).
    malformed,
    /// MADs sent from QP1.
    mads_sent,
    /// MADs the device failed to send.
    send_failed,
    /// QP moves (RTR/RTS) that failed: the connection got CONNECT_ERROR.
    qp_modify_failed,
    /// Events handed to a sink.
    events_delivered,
    /// Events for ids nobody routes any more (dropped).
    events_unrouted,
    /// First requests accepted by QPs of this device's connections (the engine's
    /// COMM_EST hook, once per connection and side); on a passive connection still
    /// waiting for its RTU, it establishes the connection.
    comm_est_seen,
}
