//! A deterministic simulation harness: two transport QPs joined by a fault-injecting virtual
//! network and driven by a virtual clock. The same seed gives the same packet and completion
//! trace, so a failing seed replays exactly.

mod faults;
mod pair;
pub mod workload;

pub use faults::{FaultConfig, SimRng};
pub use pair::{Side, SimNode, SimPair, TraceEvent, SIM_PD};
