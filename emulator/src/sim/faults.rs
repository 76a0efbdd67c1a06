//! Seeded fault injection for the simulator: the fault model and PRNG live in
//! [`crate::net::fault`], shared with the fault-injecting link of real devices, so that "the
//! same faults" means the same thing on the virtual and on the real wire.

pub use crate::net::fault::{FaultConfig, SimRng};
