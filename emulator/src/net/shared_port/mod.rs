//! Sharing one device's UDP port among processes (issue 29, see docs/shared-devices.md):
//! every process binds the port with `SO_REUSEPORT`, and a classic-BPF program steers each
//! datagram to the process owning its destination QP. Built so far: the program and the
//! steering it does on real sockets, the slot registry and the forwarding sockets; the
//! probes, the link that receives from both sockets and the QPN ranges come with the
//! engine's part.

pub mod forward;
pub mod registry;
pub mod steering;

pub use super::socket_options::attach_reuseport_cbpf;
#[cfg(test)]
mod tests;
