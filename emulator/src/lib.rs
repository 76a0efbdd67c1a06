//! softverbs-emu: a user-space soft-RoCE engine, wire-compatible with the Linux kernel's rxe.
//!
//! # Layers
//!
//! Bottom up; a module imports only from the layers below it (and `softverbs_api`):
//!
//! 1. [`wire`] (packet format only: header views, THE opcode table and the send WR table,
//!    ICRC) and [`memory`] (MR / MW tables, keys, bounds and access checks).
//! 2. [`net`] (datagram links, the outgoing packet type [`net::OutPacket`] and its buffer
//!    pool, fault injection, pcap), then [`transport`] (sans-I/O per-QP state machines:
//!    requester, responder, completer, each owning its state), which builds `net`'s packets
//!    but never sends them.
//! 3. [`cm`] (the sans-I/O connection manager: CM MADs in, MADs, QP-modify requests and
//!    events out; it never writes transport state), beside the transport.
//! 4. [`engine`] (threads, the clock, the device tables; drives the transport), and [`sim`]
//!    (the deterministic harness, which drives the transport with a virtual clock).
//! 5. [`cm_service`] (the CM core running on a device: QP1 in, device timers, `modify_qp`,
//!    event sinks), over the engine's public calls only.
//!
//! # Map of the emulator
//!
//! Receive pipeline, one line of modules in order:
//! `net::udp` (or `channel`, `qemu_socket`) → `engine::engine_thread` →
//! `engine::receive` (port, ICRC, parse, BTH version, P_Key, QP lookup, transport vs QP
//! type, source: **where a packet is checked**; QP1 goes to `engine::gsi`) →
//! `engine::datapath::on_qp` → `transport::qp_calls::on_packet` →
//! `transport::responder::requests` (a request: **where a packet is executed**, against
//! `memory`; its ACK / NAK / response and receive completion are made in
//! `transport::responder::answers`) or `transport::completer::responses` (an ACK or
//! response: **where a send completion is made**) → `engine::datapath::deliver` (packets
//! to the link, completions to `engine::cq`, events to `engine::async_events`).
//!
//! Send path, one line of modules in order:
//! `engine::context::post_send` → `engine::datapath::on_qp` →
//! `transport::qp_calls::post_send` (checks: `transport::validate` over `wire::wr_table`)
//! → `transport::requester::segment` (segments into packets, `wire::roce` emits them into
//! `net::packet` buffers) → `engine::datapath::send_packets` (with `engine::ack_hold`)
//! → `net::Link::send_batch` (writes the ICRC, sends).
//!
//! Connection manager: CM MADs arrive on QP1 through `engine::gsi` into
//! `cm_service::inlet` (other management classes counted and dropped), are fed on the
//! engine thread to `cm::manager`, which parses them with `wire::cm` and runs the state
//! machines (`cm::active`, `cm::passive`, `cm::teardown`, `cm::sidr`);
//! `cm_service::service` sends its MADs from QP1, applies its QP moves and routes its
//! events.
//!
//! Timers: per-QP deadlines live in `transport::timers` and fire through
//! `transport::qp_calls::on_timer`; device-level timers (`engine::device_timers`) run jobs
//! that belong to no QP. Both are fired by `engine::engine_thread`.
//!
//! # Unsafe
//!
//! The crate is `#![deny(unsafe_code)]`. These modules, and only these, allow it, each for
//! a reason that safe Rust cannot express; every `unsafe` block in them carries a
//! `// SAFETY:` line:
//!
//! - `memory::region` and `memory::buffer`: the copies to and from registered memory (raw
//!   application addresses, checked against the MR table first) and page-aligned buffers;
//! - `net::socket_options` and `net::batched_io`: socket options and `recvmmsg` / `sendmmsg` with GSO /
//!   GRO control messages that `socket2` does not offer;
//! - `engine::event_fd`: the eventfd(2) behind every fd-backed event queue;
//! - `engine::fork_guard`: `pthread_atfork`, to tell a forked child's inherited devices;
//! - `engine::exit_hook`: `atexit`, to hand over shared ports when the process exits.
//!
//! Everything else, the transport and the wire format in particular, is safe code.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cm;
pub mod cm_service;
pub mod engine;
pub mod memory;
pub mod net;
pub mod sim;
pub mod transport;
pub mod wire;
