//! softverbs: RDMA verbs for Rust applications, over a user-space soft-RoCE emulator (and,
//! with the `hw` feature, real NICs through rdma-core).
//!
//! The handles make misuse impossible rather than merely an error: a [`Mr`] owns the memory it
//! registers (deregistration happens before the memory is freed), and every object keeps its
//! parents alive ([`Qp`] holds its [`Pd`] and [`Cq`]s, which hold their [`Context`]).
//!
//! ```no_run
//! use softverbs::{Context, RdmaBuffer, AccessFlags};
//! let ctx = Context::open("softrxe0")?;
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.register(RdmaBuffer::new(4096).unwrap(), AccessFlags::LOCAL_WRITE)?;
//! # Ok::<(), softverbs::VerbsError>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod ah;
#[cfg(feature = "tokio")]
mod async_wait;
#[cfg(feature = "tokio")]
mod async_wait_state;
pub mod cm;
mod context;
mod cq;
mod endpoint;
mod events;
mod fd;
#[cfg(feature = "hw")]
pub mod hw;
mod mr;
mod mw;
mod pd;
mod qp;
pub mod select;
mod srq;

pub use ah::Ah;
pub use context::{all_devices, devices, devices_for, Context};
pub use cq::CompChannel;
pub use cq::Cq;
pub use endpoint::exchange_endpoints;
pub use events::AsyncEvents;
pub use mr::Mr;
pub use mw::{Mw, MwBindTarget};
pub use pd::Pd;
pub use qp::{Qp, QpBuilder, RcConnectOptions, RcEndpoint};
pub use softverbs_api::{
    backend::{DeviceInfo, MrKeys, PostError},
    mw::next_rkey,
    wr::{RemoteAddr, UdDest},
    AccessFlags, AhAttr, AsyncElement, AsyncEvent, AsyncEventKind, BindMwWr, DeviceAttr, Gid,
    GidEntry, GidType, Mtu, MwBind, MwBindInfo, MwType, PortAttr, PortState, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, SrqAttrMask,
    VerbsError, VerbsResult, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
pub use softverbs_emu::engine::{register_device, DeviceConfig, LinkConfig};
pub use softverbs_emu::memory::RdmaBuffer;
pub use softverbs_emu::net::channel::ChannelNetwork;
pub use srq::Srq;
