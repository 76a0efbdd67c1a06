//! The slot for a connection manager's "communication established" hook: the data path
//! tells the [`CommEstHandler`] installed on the device when a connected QP's responder
//! accepted its first request since the move to RTR (IB_EVENT_COMM_EST, as the kernel's
//! CM takes it in `cm_establish`): the peer is sending, so the connection is established
//! even if the RTU that was to say so got lost.

/// Told when a connected (RC / UC) QP accepted its first request since its move to RTR;
/// once per connection (a new move to RTR, after RESET, arms it again). Installed with
/// `EmuContext::set_comm_est_handler`.
///
/// It is called outside the QP's lock but on whichever thread receives (the engine thread,
/// or an application thread polling a CQ, with the device's receive lock held): it must not
/// block, and should only queue the news for its own processing.
pub trait CommEstHandler: Send + Sync {
    /// QP `qpn` accepted its first request.
    fn on_comm_est(&self, qpn: u32);
}
