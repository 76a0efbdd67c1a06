//! `struct sockaddr` from and to Rust addresses, for the addresses librdmacm's calls take
//! and the ones an id's route holds.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::abi::SockaddrStorage;

/// The address at `sa` (AF_INET or AF_INET6), or None for NULL or another family.
///
/// # Safety
/// `sa` is NULL or points to a sockaddr of at least the size its family implies.
pub unsafe fn read(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null; every sockaddr starts with its family.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in (caller's contract); read
            // unaligned since C may pass any byte buffer.
            let sin = unsafe { std::ptr::read_unaligned(sa as *const libc::sockaddr_in) };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(sa as *const libc::sockaddr_in6) };
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// `addr` as the bytes of a `sockaddr_in` / `sockaddr_in6` in a `sockaddr_storage`.
pub fn storage(addr: SocketAddr) -> SockaddrStorage {
    let mut out = SockaddrStorage::default();
    // SAFETY: a sockaddr_storage has room and alignment for either address type.
    unsafe { write(out.0.as_mut_ptr() as *mut libc::sockaddr, addr) };
    out
}

/// Writes `addr` at `sa`; returns its length.
///
/// # Safety
/// `sa` points to writable memory of at least `sizeof(struct sockaddr_in6)` bytes.
pub unsafe fn write(sa: *mut libc::sockaddr, addr: SocketAddr) -> u32 {
    match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: zeroed plain C struct.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            // SAFETY: the caller gives room for a sockaddr_in6, larger than this.
            unsafe { std::ptr::write_unaligned(sa as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(v6) => {
            // SAFETY: zeroed plain C struct.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            // SAFETY: the caller gives room for a sockaddr_in6.
            unsafe { std::ptr::write_unaligned(sa as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

/// The GID of an address: IPv4-mapped for v4, as RoCEv2 and rxe have it.
pub fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}
