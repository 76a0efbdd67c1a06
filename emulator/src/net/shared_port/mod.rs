//! Sharing one device's UDP port among processes (issue 29, see docs/shared-devices.md):
//! every process binds the port with `SO_REUSEPORT`, and a classic-BPF program steers each
//! datagram to the process owning its destination QP. Built so far: the program and the
//! steering it does on real sockets, the slot registry (with the CM listen table), the
//! forwarding sockets, the routing of QP1 MADs, and the link that routes between them. The
//! engine opens every UDP device as a member (`engine::registry`) and hands out QPNs from
//! the member's slot.

pub mod forward;
pub mod link;
pub mod listen_table;
pub mod mad_route;
pub mod registry;
pub mod steering;

pub use super::socket_options::attach_reuseport_cbpf;
#[cfg(test)]
mod tests;
