//! IP multicast for UD multicast groups (RoCEv2: a multicast GID is an IP multicast address,
//! `::ffff:230.1.2.3` for IPv4, and a datagram to the group is an IP multicast datagram to
//! its UDP port with destination QPN 0xFFFFFF).
//!
//! A device that has QPs attached to a group receives it through a [`GroupSocket`]: a UDP
//! socket bound to the group's address and the device's port, member of the group on the
//! device's interface. Every process and device in the group binds the same address
//! (`SO_REUSEADDR`), and the kernel gives each such socket its own copy of every datagram,
//! which is what a multicast group means. The device's own socket sends to groups through
//! its interface ([`set_multicast_interface`]), so that a group on loopback needs no route.
//!
//! IPv4 only: an IPv6 group would need the interface index of the device's address.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// One device's membership of one IP multicast group: the socket its datagrams arrive on.
/// Dropping it closes the socket, which leaves the group.
#[derive(Debug)]
pub struct GroupSocket {
    socket: UdpSocket,
    group: SocketAddr,
}

impl GroupSocket {
    /// Joins IPv4 group `group` on the interface of `interface` and binds `group:port`.
    /// `InvalidInput` for an address that is not an IPv4 multicast group or an interface
    /// that is not IPv4; the OS's error when it refuses the membership.
    pub fn join(group: IpAddr, port: u16, interface: IpAddr) -> io::Result<GroupSocket> {
        let (IpAddr::V4(group_v4), IpAddr::V4(interface_v4)) = (group, interface) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "multicast groups are served on IPv4 devices only",
            ));
        };
        if !group_v4.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not an IP multicast address"),
            ));
        }
        let addr = SocketAddr::new(group, port);
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        // Every member of the group on this host binds the same address.
        socket.set_reuse_address(true)?;
        // Only the group this socket joined, not every group another socket joined on the
        // interface (Linux's default).
        socket.set_multicast_all_v4(false)?;
        socket.bind(&SockAddr::from(addr))?;
        socket.join_multicast_v4(&group_v4, &interface_v4)?;
        socket.set_nonblocking(true)?;
        Ok(GroupSocket {
            socket: socket.into(),
            group: addr,
        })
    }

    /// The group's address and port (what its datagrams were sent to).
    pub fn group(&self) -> SocketAddr {
        self.group
    }

    /// Receives one datagram into `buf` without waiting: its length and sender, `None` when
    /// nothing is there. A datagram longer than `buf` is cut (and then fails its ICRC).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        match self.socket.recv_from(buf) {
            Ok(got) => Ok(Some(got)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for GroupSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// Makes `socket` (a device's, bound to `local`) send multicast datagrams out of `local`'s
/// interface, whatever the routing table says about multicast. IPv4 only (see the module
/// docs); nothing to do for IPv6.
pub(crate) fn set_multicast_interface(socket: &Socket, local: IpAddr) -> io::Result<()> {
    match local {
        IpAddr::V4(v4) if v4 != Ipv4Addr::UNSPECIFIED => socket.set_multicast_if_v4(&v4),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn recv_within(g: &GroupSocket, limit: Duration) -> Option<Vec<u8>> {
        let start = Instant::now();
        let mut buf = [0u8; 64];
        while start.elapsed() < limit {
            if let Some((n, _)) = g.try_recv(&mut buf).unwrap() {
                return Some(buf[..n].to_vec());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    #[test]
    fn two_members_on_loopback_each_get_a_copy_and_a_closed_one_gets_none() {
        let group: IpAddr = "239.77.0.1".parse().unwrap();
        let a_if: IpAddr = "127.77.0.1".parse().unwrap();
        let b_if: IpAddr = "127.77.0.2".parse().unwrap();
        // An OS-chosen port, then the group bound on it.
        let sender = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        sender
            .bind(&SockAddr::from(SocketAddr::new(a_if, 0)))
            .unwrap();
        set_multicast_interface(&sender, a_if).unwrap();
        let port = sender.local_addr().unwrap().as_socket().unwrap().port();
        let a = GroupSocket::join(group, port, a_if).unwrap();
        let b = GroupSocket::join(group, port, b_if).unwrap();
        assert_eq!(a.group(), SocketAddr::new(group, port));
        let to = SockAddr::from(SocketAddr::new(group, port));
        sender.send_to(b"one", &to).unwrap();
        assert_eq!(recv_within(&a, Duration::from_secs(2)).unwrap(), b"one");
        assert_eq!(recv_within(&b, Duration::from_secs(2)).unwrap(), b"one");
        drop(a);
        sender.send_to(b"two", &to).unwrap();
        assert_eq!(recv_within(&b, Duration::from_secs(2)).unwrap(), b"two");
    }

    #[test]
    fn a_unicast_address_or_an_ipv6_device_is_refused() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let e = GroupSocket::join(lo, 4791, lo).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = GroupSocket::join("ff02::1".parse().unwrap(), 4791, "::1".parse().unwrap())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
