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

/// Detaches the `SO_REUSEPORT` group's steering program (`SO_DETACH_REUSEPORT_BPF`, Linux
/// 5.8): the kernel then picks a member by hash. A group without a program is fine.
pub fn detach_reuseport_bpf(socket: &impl AsRawFd) -> io::Result<()> {
    match set_int_option(socket, libc::SOL_SOCKET, libc::SO_DETACH_REUSEPORT_BPF, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// Attaches the classic-BPF `program` as the `SO_REUSEPORT` group's steering program
/// (`SO_ATTACH_REUSEPORT_CBPF`): it replaces the group's program, whichever member attaches
/// it, and stays after that member closes. Unprivileged.
pub fn attach_reuseport_cbpf(
    socket: &impl AsRawFd,
    program: &[super::shared_port::steering::BpfInsn],
) -> io::Result<()> {
    let filters: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len = u16::try_from(filters.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: filters.as_ptr().cast_mut(),
    };
    // SAFETY: the fd is a live socket owned by `socket`; `fprog` points at `filters`, which
    // outlives the call (the kernel copies the program), with its exact length, and we pass
    // sock_fprog's exact size, as setsockopt(2) requires for SO_ATTACH_REUSEPORT_CBPF.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
