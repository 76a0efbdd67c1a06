//! The sans-I/O transport: per-QP state machines split as in the kernel rxe driver.
//!
//! - [`requester`] turns posted send WRs into request packets (segmentation, PSNs, ack-req),
//! - [`responder`] executes incoming requests against memory and answers with ACK / NAK,
//! - [`completer`] consumes ACKs and NAKs, retransmits and produces send completions,
//! - [`ud`] receives datagrams on UD QPs; [`srq`] is a receive queue QPs share.
//!
//! Inputs are posted WRs, parsed packets and the current time (`now_ns`, supplied by the
//! caller); outputs are packets, completions and the next deadline. Nothing here opens a
//! socket, spawns a thread or reads a clock, so tests drive it deterministically.

pub mod address;
pub mod completer;
pub mod counters;
pub mod env;
pub mod outputs;
pub mod qp;
pub mod qp_calls;
pub mod recv_queue;
pub mod requester;
pub mod responder;
pub mod srq;
pub mod timers;
pub mod ud;
pub mod validate;
pub mod wqe;

pub use address::{AddressVector, AhTable, NetHeader};
pub use counters::Counters;
pub use env::{CallTime, Env};
pub use outputs::{Completion, CompletionTarget, Outputs};
pub use qp::TransportQp;
// The packet type that crosses to the link belongs to net (the layer below that sends it).
pub use crate::net::packet::{payloads_in_memory, OutPacket, PathInfo, PayloadRef};
pub use srq::SharedRecvQueue;
