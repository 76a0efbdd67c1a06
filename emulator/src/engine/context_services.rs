//! What an [`EmuContext`] offers beyond the verbs: the QP1 (GSI) slot for a connection
//! manager, device-level timers, the device's counters and its share of a shared port.

use std::sync::Arc;
use std::time::Duration;

use softverbs_api::{VerbsError, VerbsResult};

use super::comm_est::CommEstHandler;
use super::context::EmuContext;
use super::device_counters::DeviceCounters;
use super::device_timers::{TimerId, TimerJob};
use super::gsi::GsiHandler;
use crate::net::{OutPacket, PathInfo};
use crate::wire::RoceRepr;

impl EmuContext {
    /// The IP address and UDP port the device receives on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.dev().link.local_addr()
    }

    /// Installs `handler` for the packets that reach QP1 (the GSI: CM MADs), replacing any
    /// handler before; `None` removes it (QP1 packets are then counted in
    /// [`DeviceCounters::gsi_unhandled`] and dropped). The handler is the device's, shared
    /// by all its contexts.
    pub fn set_gsi_handler(&self, handler: Option<Arc<dyn GsiHandler>>) {
        self.dev().set_gsi_handler(handler);
    }

    /// Installs `handler` to be told when a connected QP accepted its first request since
    /// its move to RTR (see [`CommEstHandler`]), replacing any handler before; `None`
    /// removes it. The handler is the device's, shared by all its contexts.
    pub fn set_comm_est_handler(&self, handler: Option<Arc<dyn CommEstHandler>>) {
        *self.dev().comm_est_handler.write() = handler;
    }

    /// Sends one packet from QP1 (a CM MAD in a UD SEND ONLY with its DETH, built by the
    /// caller) to `path`. QP1 has no send queue in the emulator: its sender (the connection
    /// manager) keeps its own retry timers, so the packet goes straight to the link and,
    /// like any UD datagram, may be lost. EINVAL if `repr` does not fit the opcode table.
    pub fn send_gsi_packet(&self, path: &PathInfo, repr: &RoceRepr<'_>) -> VerbsResult<()> {
        let packet = OutPacket::build(path, repr)
            .ok_or_else(|| VerbsError::inval("QP1 packet inconsistent with its opcode"))?;
        let dev = self.dev();
        // What the device owes its peers leaves first, in a send call of its own (a deferred
        // ACK taken into this call would go behind the CM message).
        dev.flush_owed_acks();
        dev.send_packets(&mut vec![packet]);
        Ok(())
    }

    /// Schedules `job` to run on the device's engine thread once `delay` has passed (a
    /// device-level timer, for work that belongs to no QP). ENOMEM once
    /// [`super::device_timers::MAX_DEVICE_TIMERS`] are armed. A timer fires at most a few
    /// milliseconds late (the engine thread's longest sleep).
    pub fn schedule_device_timer(&self, delay: Duration, job: TimerJob) -> VerbsResult<TimerId> {
        let dev = self.dev();
        let delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        dev.schedule_timer(dev.now_ns().saturating_add(delay_ns), job)
            .map_err(|e| VerbsError::nomem(e.to_string()))
    }

    /// Cancels device timer `id`; false if it already fired or was cancelled.
    pub fn cancel_device_timer(&self, id: TimerId) -> bool {
        self.dev().timers.cancel(id)
    }

    /// Device-wide packet counters.
    pub fn counters(&self) -> &DeviceCounters {
        &self.dev().counters
    }

    /// The transport counters of every QP this device has had, live and destroyed, added
    /// up: retransmissions, ACK timeouts, RNR and sequence-error NAKs, duplicates ...
    pub fn transport_totals(&self) -> crate::transport::Counters {
        self.dev().transport_totals()
    }

    /// The slot this process holds on the device's shared port (its QP numbers are
    /// `slot << 16 | n`, see docs/shared-devices.md); `None` when the process has the
    /// device's link to itself.
    pub fn shared_slot(&self) -> Option<u8> {
        self.dev().link.shared_port().map(|s| s.slot())
    }

    /// What port sharing did on this process's end (forwarded datagrams, probe rounds, ...);
    /// `None` when the process has the device's link to itself.
    pub fn shared_counters(&self) -> Option<&crate::net::shared_port::link::SharedCounters> {
        self.dev().link.shared_port().map(|s| s.counters())
    }

    /// Tells the other processes sharing the device that this one listens on CM service
    /// `service_id`, so that connection and SIDR requests for it reaching them come here.
    /// EADDRINUSE if another live process listens on it. Nothing to do (Ok) for a device
    /// the process has to itself.
    pub fn share_listen(&self, service_id: u64) -> VerbsResult<()> {
        let Some(shared) = self.dev().link.shared_port() else {
            return Ok(());
        };
        shared.listen(service_id).map_err(|e| VerbsError::Io {
            errno: if e.kind() == std::io::ErrorKind::AddrInUse {
                libc::EADDRINUSE
            } else {
                e.raw_os_error().unwrap_or(libc::EIO)
            },
            message: format!("listening on service {service_id:#018x}: {e}"),
        })
    }

    /// Withdraws [`EmuContext::share_listen`] of `service_id` (a failure is logged: a stale
    /// entry is ignored by the others once this process is gone).
    pub fn share_unlisten(&self, service_id: u64) {
        if let Some(shared) = self.dev().link.shared_port() {
            if let Err(e) = shared.unlisten(service_id) {
                tracing::debug!(service_id, error = %e, "withdrawing a shared listen");
            }
        }
    }

    /// The transport counters of QP `qpn`.
    pub fn qp_counters(&self, qpn: u32) -> VerbsResult<crate::transport::Counters> {
        Ok(self.dev().qp_entry(qpn)?.qp.lock().counters)
    }
}
