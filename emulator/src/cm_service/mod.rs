//! The connection manager running on an emulated device: the sans-I/O core ([`crate::cm`])
//! wired to the device's QP1 slot, device timers, `modify_qp` and event sinks. Above the
//! engine (it uses only [`crate::engine::EmuContext`]'s public calls) and below the Rust
//! handles of the `softverbs` crate and the C librdmacm, which both sit on [`CmService`].
//!
//! Files: `service` (the driver: inputs, outputs, the timer), `calls` (the rdma_cm calls),
//! `inlet` (QP1's handler: filter and queue), `comm_est` (the engine's first-request
//! hook: establishes a passive connection whose RTU got lost), `gsi_send` (a MAD as a UD SEND from QP1),
//! `qp_moves` (QP requests as modify_qp), `ports` (port spaces), `registry` (one service
//! per device), `counters`.

mod calls;
mod comm_est;
mod counters;
mod gsi_send;
mod inlet;
mod ports;
pub mod qp_moves;
mod registry;
mod service;

pub use counters::ServiceCounters;
pub use gsi_send::{gsi_packet, gsi_path};
pub use service::{CmEventSink, CmService, INBOX_LIMIT};

#[cfg(test)]
mod tests;
