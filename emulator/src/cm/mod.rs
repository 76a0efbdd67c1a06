//! The RDMA connection manager, sans-I/O: the IB CM protocol as the kernel's rdma_cm speaks
//! it over RoCEv2 (MADs on QP1, wire format in [`crate::wire::cm`]), for RC connections
//! (REQ / MRA / REP / RTU / REJ / DREQ / DREP) and UD service resolution (SIDR).
//!
//! No sockets, threads or clocks: the engine feeds [`CmManager`] with API calls, received
//! MADs (with the sender's address) and `now_ns`, then drains [`CmManager::poll_output`]
//! (MADs to send from QP1, QP state changes to apply, events for the application) and
//! calls [`CmManager::handle_timeout`] at [`CmManager::next_deadline_ns`]. The CM never
//! writes transport state: it asks for QP moves with [`QpRequest`]. Nothing here depends
//! on the Rust handle layer, so a C librdmacm can sit on it too.
//!
//! Files: `manager.rs` (tables, dispatch, timers), `active.rs` (connect, REP, MRA, REJ),
//! `passive.rs` (listen matches, REQ, accept, reject, RTU), `held_reqs.rs` (REQs that
//! arrive just before their listener), `teardown.rs` (DREQ, DREP,
//! time-wait, destroy), `sidr.rs`, `conn.rs` (the state enum), `timing.rs` (the kernel's
//! timeout arithmetic), `ids.rs`, `config.rs`, `counters.rs`, `types.rs`.

mod active;
mod config;
mod conn;
mod counters;
mod held_reqs;
mod ids;
mod manager;
mod passive;
mod sidr;
mod sidr_state;
mod teardown;
pub mod timing;
mod types;

pub use active::ConnectParams;
pub use config::{private_data_max, CmConfig};
pub use conn::{ConnInfo, ConnState};
pub use counters::CmCounters;
pub use manager::CmManager;
pub use passive::AcceptParams;
pub use sidr_state::SidrState;
pub use types::{
    CmError, CmEvent, CmEventKind, CmId, CmOutput, QpRequest, Rejection, Role, RtrAttrs, RtsAttrs,
};
