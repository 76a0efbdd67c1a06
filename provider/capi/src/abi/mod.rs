//! `#[repr(C)]` definitions of the verbs.h structures (rdma-core 44), written from the header's
//! documented layout and proven by the C layout test (`layout_test`), which compiles against
//! the system's `<infiniband/verbs.h>` and compares every size and offset used here.
//!
//! Field names follow verbs.h; see verbs.h for each field's meaning.
#![allow(missing_docs)]

pub mod attr;
pub mod context;
pub mod objects;
pub mod wr;

pub use attr::*;
pub use context::*;
pub use objects::*;
pub use wr::*;

/// A pointer-sized slot the library leaves zero (an unsupported or obsolete entry).
pub type Opaque = usize;
