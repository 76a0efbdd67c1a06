//! The device runtime: the only part of the emulator with threads and a clock. It owns the
//! PD / CQ / QP tables, feeds the transport with posted WRs, received packets and timer ticks,
//! and delivers what the transport produces (packets to the link, completions to CQs).
//!
//! Files, bottom up: `limits`; `device` (the tables and state of one device) with
//! `device_attr` (what it reports), `device_counters` (one counter per drop reason),
//! `device_timers` (timers of the device, not of a QP), `gsi` (the QP1 handler slot) and
//! `comm_est` (the connection manager's first-request hook);
//! `receive` (the receive pipeline: ICRC, parse, header checks, dispatch); `datapath` (a
//! transport call on a QP and the delivery of what it produced, with the ACK hold of
//! `ack_hold`); `engine_thread` (the thread that receives and fires timers, and the
//! `DeviceRuntime` that owns it) with `poll_yield` (what a polling application thread does
//! with its CPU between empty polls) and `app_poll` (an application's poll of a CQ, which
//! receives for the device when the CQ is empty, and gets what that receive completes on
//! it handed over by `cq_hand_off`); `context` (the
//! [`softverbs_api::VerbsContext`] impl over them). `device_list` and `registry` find and
//! open devices (a UDP device as one member of the processes sharing its port, see
//! docs/shared-devices.md), `fork_guard` keeps a forked child off the devices it inherited;
//! `event_queue` is the one fd-backed event queue under completion channels
//! (`comp_channel`) and async events (`async_events`).

mod ack_hold;
mod app_poll;
mod app_wait;
pub mod async_events;
mod bound_calls;
pub mod clock;
pub mod comm_est;
pub mod comp_channel;
pub mod config;
pub mod context;
mod context_services;
pub mod cq;
mod cq_hand_off;
#[cfg(test)]
mod cq_hand_off_tests;
mod datapath;
pub mod device;
mod device_attr;
pub mod device_counters;
pub mod device_list;
pub mod device_timers;
pub mod engine_thread;
pub mod event_fd;
pub mod event_queue;
mod exit_hook;
mod fork_guard;
pub mod gsi;
mod id_hash;
pub mod limits;
mod mcast_groups;
pub mod multicast;
mod poll_yield;
mod qp_entry;
pub mod receive;
mod receive_batch;
pub mod registry;
mod timer_slack;

pub use comm_est::CommEstHandler;
pub use config::{DeviceConfig, LinkConfig};
pub use context::EmuContext;
pub use device_counters::{DeviceCounters, RxDrop};
pub use device_list::{device_list, register_device, DEVICES_ENV};
pub use device_timers::{TimerId, TimerJob, TimersFull, MAX_DEVICE_TIMERS};
pub use gsi::GsiHandler;
pub use limits::DeviceLimits;
pub use multicast::{MAX_MCAST_GROUPS, MAX_MCAST_QP_ATTACH};
pub use receive::{GSI_QPN, MULTICAST_QPN};
pub use registry::open_device;

#[cfg(test)]
mod tests;
