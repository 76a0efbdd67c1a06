//! The one socket option socket2 does not offer, set through libc: this module is FFI, one of
//! the two places (with `memory`) where the emulator may use `unsafe`.
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
    let value: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: the fd is a live socket owned by `socket`; we pass a pointer to a c_int that
    // outlives the call and its exact size, as setsockopt(2) requires for this option.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
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
