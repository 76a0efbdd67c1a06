//! Socket options socket2 does not offer, set through libc: this module is FFI, one of the
//! modules the crate docs allow `unsafe` (see "Unsafe" there).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// Sets `IP_MTU_DISCOVER` to `IP_PMTUDISC_DO` on an IPv4 socket.
///
/// Why: the ICRC covers the IPv4 identification field. Linux writes identification 0 into
/// DF packets of an unconnected socket only when the socket does real path-MTU discovery
/// (`IP_PMTUDISC_DO`); under the default (`IP_PMTUDISC_WANT`) the kernel may fragment, so
/// it draws an ID from its hash-based generator, which the sender cannot know. With this
/// option every datagram goes out with DF and ID 0, so the ICRC we compute for ID 0 is the
/// one a kernel rxe receiver checks (see `wire::icrc`).
pub fn set_pmtudisc_do(socket: &impl AsRawFd) -> io::Result<()> {
    set_int_option(
        socket,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

/// Sets the receive buffer to `bytes` past `net.core.rmem_max` (`SO_RCVBUFFORCE`), which
/// needs CAP_NET_ADMIN; callers fall back to `SO_RCVBUF` when it fails.
///
/// Why: a RoCE requester bursts a 128-packet window (and a READ responder a whole READ) at
/// once; with the default 208 KiB cap, bursts of 4 KiB packets overflow it and every
/// overflow costs a go-back-N retransmission.
pub fn set_recv_buffer_force(socket: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value)
}

/// setsockopt(2) of one `int` option.
pub(crate) fn set_int_option(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is a live socket owned by `socket`; we pass a pointer to a c_int that
    // outlives the call and its exact size, as setsockopt(2) requires for int options.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
