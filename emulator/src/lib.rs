//! softverbs-emu: a user-space soft-RoCE engine, wire-compatible with the Linux kernel's rxe.
//!
//! Layers, bottom up: [`wire`] (packet format only), [`memory`] (MR tables and the only unsafe
//! copies), [`transport`] (sans-I/O RC state machines), [`net`] (datagram links),
//! [`engine`] (threads, clocks and tables that drive the transport).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cm;
pub mod engine;
pub mod memory;
pub mod net;
pub mod sim;
pub mod transport;
pub mod wire;
