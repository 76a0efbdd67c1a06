//! The ports of one device's rdma_cm port spaces: what rdma_bind_addr takes, explicit or
//! ephemeral, so that two ids never share a (port space, port).

use std::collections::BTreeSet;

use crate::cm::CmError;
use crate::wire::cm::{ip_service_id, PortSpace};

/// Linux's default ephemeral range (`ip_local_port_range`), where port 0 binds.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// Ports in use, per port space.
#[derive(Debug, Default)]
pub struct PortTable {
    used: BTreeSet<(PortSpace, u16)>,
    next_ephemeral: u16,
}

impl PortTable {
    /// Takes `port` in `space`, or a free ephemeral port for 0. EADDRINUSE if taken (or
    /// every ephemeral port is).
    pub fn bind(&mut self, space: PortSpace, port: u16) -> Result<u16, CmError> {
        if port != 0 {
            if !self.used.insert((space, port)) {
                return Err(CmError::AddressInUse(ip_service_id(space, port)));
            }
            return Ok(port);
        }
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        for _ in 0..span {
            if !EPHEMERAL.contains(&self.next_ephemeral) {
                self.next_ephemeral = *EPHEMERAL.start();
            }
            let candidate = self.next_ephemeral;
            self.next_ephemeral = self.next_ephemeral.wrapping_add(1);
            if self.used.insert((space, candidate)) {
                return Ok(candidate);
            }
        }
        Err(CmError::AddressInUse(ip_service_id(space, 0)))
    }

    /// Gives `port` of `space` back.
    pub fn release(&mut self, space: PortSpace, port: u16) {
        self.used.remove(&(space, port));
    }

    /// Ports held, all spaces.
    pub fn count(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_held_once_per_space_and_ephemeral_ports_differ() {
        let mut t = PortTable::default();
        assert_eq!(t.bind(PortSpace::Tcp, 7471), Ok(7471));
        assert!(matches!(
            t.bind(PortSpace::Tcp, 7471),
            Err(CmError::AddressInUse(_))
        ));
        assert_eq!(t.bind(PortSpace::Udp, 7471), Ok(7471));
        let a = t.bind(PortSpace::Tcp, 0).unwrap();
        let b = t.bind(PortSpace::Tcp, 0).unwrap();
        assert!(a != b && EPHEMERAL.contains(&a) && EPHEMERAL.contains(&b));
        t.release(PortSpace::Tcp, 7471);
        assert_eq!(t.bind(PortSpace::Tcp, 7471), Ok(7471));
        assert_eq!(t.count(), 4);
    }
}
