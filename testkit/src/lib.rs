//! Set-up that the tests of several crates share (`emulator/tests`, `tests/`, `fuzz/`): QP
//! capacities, the attribute sets of the RC QP state moves, one-SGE work requests.
//!
//! It depends only on `softverbs-api`, so every crate of the workspace may take it as a
//! dev-dependency without an import circle: the helpers build plain verbs data (attributes
//! and masks), and each test applies them through whatever it holds, a backend
//! (`VerbsContext::modify_qp`) or a safe handle (`Qp::modify`).
#![forbid(unsafe_code)]

mod cap;
mod rc_moves;
mod wrs;

pub use cap::qp_cap;
pub use rc_moves::{ah_to, init_attr, RcMoves, INIT_MASK, RC_RTR_MASK, RC_RTS_MASK};
pub use wrs::{recv_one, sge};
