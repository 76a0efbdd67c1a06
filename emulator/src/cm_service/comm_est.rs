//! The service's end of the engine's COMM_EST hook ([`CommEstHandler`]): a QP of one of
//! the device's connections accepted its first request. As the kernel's CM does on
//! IB_EVENT_COMM_EST (`cm_establish`), a passive connection still waiting for its RTU is
//! established then (ESTABLISHED, no more REP resends): the RTU got lost or is late, and
//! the peer is already sending.

use std::sync::Weak;
use std::time::Duration;

use super::counters::ServiceCounterCells;
use super::service::{release, CmService};
use crate::engine::CommEstHandler;

/// The COMM_EST handler of a device with a CM service.
pub struct CommEstInlet {
    pub(super) service: Weak<CmService>,
}

impl CommEstHandler for CommEstInlet {
    fn on_comm_est(&self, qpn: u32) {
        let Some(service) = self.service.upgrade() else {
            return;
        };
        // Called on the receiving thread: the core's work runs on the engine thread.
        let me = self.service.clone();
        let job = Box::new(move |_now| {
            if let Some(service) = me.upgrade() {
                service.comm_established_on(qpn);
                release(service);
            }
        });
        // Timers full: the RTU (or the REP's resend it answers) establishes it instead.
        let _ = service.context().schedule_device_timer(Duration::ZERO, job);
        release(service);
    }
}

impl CmService {
    /// QP `qpn` accepted its first request: the connection that owns it, if it is a
    /// passive one waiting for its RTU, is established.
    fn comm_established_on(&self, qpn: u32) {
        self.with_core(|st, _now_ns| {
            let Some(&id) = st.qp_owner.get(&qpn) else {
                return;
            };
            ServiceCounterCells::bump(&self.cells().comm_est_seen);
            // Not found or not waiting for an RTU: nothing to do.
            let _ = st.mgr.comm_established(id);
        });
    }
}
