//! Memory regions and windows: the MR table, the window table, key generation, bounds and
//! access checks, and the raw copies to and from registered memory (`region.rs`, `buffer.rs`:
//! two of the modules the crate docs allow `unsafe`, see "Unsafe" there).
//!
//! Every address that reaches memory, from a local SGE or from a peer's packet, goes through
//! [`MrTable`], which checks key, protection domain, access flags and bounds before any copy;
//! a refused access returns a [`MemError`] and changes no byte.

pub mod buffer;
mod error;
mod keys;
mod local_slice;
mod region;
mod table;
mod window;

pub use buffer::RdmaBuffer;
pub use error::MemError;
pub use local_slice::LocalSlice;
pub use table::{MrReader, MrTable, RemoteAccessor};
pub use window::MAX_MW;

#[cfg(test)]
mod rereg_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod window_tests;
