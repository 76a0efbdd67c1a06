//! Sharing one device's UDP port among processes (issue 29, see docs/shared-devices.md):
//! every process binds the port with `SO_REUSEPORT`, and a classic-BPF program steers each
//! datagram to the process owning its destination QP. The parts: the program
//! (`steering`) and its probes (`probe`), the slot registry (with the CM listen table),
//! the forwarding sockets, the routing of QP1 MADs (and the requests held until their
//! listener is known, `unclaimed`), the membership that ties them together
//! whatever a datagram is (`member`), and its two faces: `link` for a UDP port and
//! `qemu_link` for a qemu socket link's frames socket (the rxe lab's device), where each
//! datagram is a whole Ethernet frame. The engine opens every UDP and qemu socket device as
//! a member (`engine::registry`) and hands out QPNs from the member's slot.

pub mod forward;
pub mod link;
pub mod listen_table;
pub mod mad_route;
pub mod member;
pub mod probe;
pub mod qemu_link;
pub mod registry;
mod round_plan;
pub mod steering;
pub mod unclaimed;

pub use super::socket_options::{attach_reuseport_cbpf, detach_reuseport_bpf};
#[cfg(test)]
mod qemu_tests;
#[cfg(test)]
mod tests;
