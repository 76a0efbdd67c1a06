//! Sharing one device's UDP port among processes (issue 29, see docs/shared-devices.md):
//! every process binds the port with `SO_REUSEPORT`, and a classic-BPF program steers each
//! datagram to the process owning its destination QP. Built so far: the program and the
//! steering it does on real sockets, the slot registry, the forwarding sockets and the
//! link that routes between them; the engine's part (QPNs from the slot's range, opening a
//! device as a member, QP1 routing) comes next.

pub mod forward;
pub mod link;
pub mod registry;
pub mod steering;

pub use super::socket_options::attach_reuseport_cbpf;
#[cfg(test)]
mod tests;
