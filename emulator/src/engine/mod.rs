//! The device runtime: the only part of the emulator with threads and a clock. It owns the
//! PD / CQ / QP tables, feeds the transport with posted WRs, received packets and timer ticks,
//! and delivers what the transport produces (packets to the link, completions to CQs).

mod ack_hold;
pub mod async_events;
pub mod clock;
pub mod comp_channel;
pub mod config;
pub mod context;
pub mod cq;
pub mod event_fd;
mod id_hash;
pub mod registry;
mod wait;
pub mod worker;

pub use config::{DeviceConfig, LinkConfig};
pub use context::EmuContext;
pub use registry::{device_list, open_device, register_device, DEVICES_ENV};
