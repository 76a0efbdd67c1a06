//! The softverbs contract: plain data types that mirror `verbs.h` semantics and the backend
//! traits that the emulator (and later the hardware passthrough and a C ABI) implement, and
//! (`c_layout`) the C layouts of the attribute and completion structures that both C-facing
//! layers, the drop-in libibverbs.so.1 and the hardware backend, convert through.
//!
//! Nothing here does I/O and nothing here is `unsafe`; the safe, ownership-checked handles
//! that applications use live in the `softverbs` crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod c_layout;
pub mod device;
pub mod error;
pub mod event;
pub mod flags;
pub mod mw;
pub mod qp;
pub mod qp_transition;
pub mod srq;
pub mod wc;
pub mod wr;
mod wr_builders;

pub use backend::{
    CqDataPath, CqPoller, DeviceInfo, PostError, QpDataPath, QpPoster, VerbsContext,
};
pub use device::{DeviceAttr, Gid, GidEntry, GidType, Mtu, PortAttr, PortState};
pub use error::{VerbsError, VerbsResult};
pub use event::{AsyncElement, AsyncEvent, AsyncEventKind};
pub use flags::{AccessFlags, SendFlags, WcFlags};
pub use mw::{BindMwWr, MwBind, MwBindInfo, MwType};
pub use qp::{AhAttr, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType};
pub use qp_transition::ModifyLimits;
pub use srq::{SrqAttr, SrqAttrMask};
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{RecvWr, SendWr, Sge, WrOpcode};
