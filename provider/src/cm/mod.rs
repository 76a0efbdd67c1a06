//! `softverbs::cm`: the RDMA connection manager with librdmacm's semantics, over the CM
//! running on each emulated device (`softverbs_emu::cm_service`).
//!
//! ```no_run
//! use std::time::Duration;
//! use softverbs::cm::{create_ep, getaddrinfo, ConnParam, Local, PortSpace, QpOptions};
//! use softverbs::SendFlags;
//! let info = getaddrinfo("127.28.0.1", 7471, Some("127.28.0.2"), false, PortSpace::Tcp)?;
//! let id = create_ep(&info, None, Some(&QpOptions::default()))?;
//! id.connect_sync(&ConnParam::with_private_data(b"hi"), Duration::from_secs(5))?;
//! id.post_send(1, Local::Inline(b"ping"), SendFlags::INLINE | SendFlags::SIGNALED)?;
//! let wc = id.get_send_comp()?;
//! # Ok::<(), softverbs::VerbsError>(())
//! ```
//!
//! Files: `shared` (the id's state and handle, the channel's queue, the core's sink:
//! the bottom), `channel` (the event channel, a real fd), `event` (event types and contents),
//! `id` (the id's life and event routing), `conn` (bind, resolve, listen, connect,
//! accept, reject, disconnect), `post` (rdma_post_* and friends), `addr` (IP address to
//! device), `wildcard` (binding 0.0.0.0 / :: on every device), `endpoint` (getaddrinfo, create_ep, synchronous calls).

mod addr;
mod channel;
mod conn;
mod endpoint;
mod event;
mod event_type;
mod id;
mod post;
mod shared;
mod wildcard;

pub use channel::{EventChannel, EVENT_CHANNEL_LIMIT};
pub use conn::{ConnParam, QpOptions, RDMA_UDP_QKEY};
pub use endpoint::{create_ep, getaddrinfo, AddrInfo};
pub use event::{CmEvent, EventType, UdEventParam};
pub use post::Local;
pub use shared::{CmId, ConnEventParam};
pub use softverbs_emu::cm::private_data_max;
pub use softverbs_emu::wire::cm::{rej_reason, PortSpace};
