//! Batched datagram syscalls socket2 does not offer: sendmmsg(2), recvmmsg(2), and the UDP
//! GSO / GRO socket options. FFI, like [`super::sys`]: one of the places the emulator may
//! use `unsafe`; everything it exports is safe.
//!
//! Why: one syscall per datagram is most of what a soft-RoCE data path costs. Batching
//! amortises the syscall entry over up to [`MAX_BATCH`] datagrams; GSO lets the kernel cut
//! one large buffer into equal segments.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use socket2::SockAddr;

/// Most datagrams per sendmmsg / recvmmsg call (the kernel's UIO_MAXIOV is 1024; beyond a
/// few dozen the gain is nil).
pub const MAX_BATCH: usize = 64;

/// Sends `datagrams` (bytes, destination) with as few sendmmsg calls as possible; returns
/// how many the kernel took (a full socket buffer stops a call early, which is loss to a
/// datagram protocol: the caller decides). Allocates nothing: the headers live on the stack.
pub fn send_batch(socket: &impl AsRawFd, datagrams: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let mut sent = 0;
    for chunk in datagrams.chunks(MAX_BATCH) {
        // SAFETY: these are plain old data; all-zero is a valid value of each.
        let mut addrs: [libc::sockaddr_storage; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for (i, (bytes, dst)) in chunk.iter().enumerate() {
            let sa = SockAddr::from(*dst);
            // SAFETY: `sa` holds `sa.len()` valid bytes of a sockaddr, at most the size of
            // sockaddr_storage; the two do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    sa.as_ptr().cast::<u8>(),
                    (&mut addrs[i] as *mut libc::sockaddr_storage).cast::<u8>(),
                    sa.len() as usize,
                )
            };
            iovs[i] = libc::iovec {
                iov_base: bytes.as_ptr() as *mut libc::c_void,
                iov_len: bytes.len(),
            };
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_namelen = sa.len();
            msgs[i].msg_hdr.msg_iov = &mut iovs[i] as *mut libc::iovec;
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `chunk.len()` headers point at iovecs and sockaddrs on this
        // stack frame and at the caller's buffers, all alive until the call returns.
        let rc = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                chunk.len() as libc::c_uint,
                0,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if sent > 0 {
                return Ok(sent);
            }
            return Err(e);
        }
        sent += rc as usize;
        if (rc as usize) < chunk.len() {
            break;
        }
    }
    Ok(sent)
}

/// Waits up to `timeout` until `socket` has something to receive, without receiving it;
/// `Ok(false)` on timeout (or an interrupted wait).
pub fn wait_readable(socket: &impl AsRawFd, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // ppoll, not poll: waits shorter than a millisecond matter here.
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one pollfd and one timespec, alive for the call; no signal mask.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

/// Buffers for [`recv_batch`]: `count` slots of `slot_bytes` each, allocated once.
pub struct RecvSlots {
    data: Vec<u8>,
    slot_bytes: usize,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<libc::socklen_t>,
}

impl RecvSlots {
    /// `count` (at most [`MAX_BATCH`]) slots of `slot_bytes`.
    pub fn new(count: usize, slot_bytes: usize) -> RecvSlots {
        let count = count.clamp(1, MAX_BATCH);
        RecvSlots {
            data: vec![0; count * slot_bytes],
            slot_bytes,
            lens: vec![0; count],
            // SAFETY: sockaddr_storage is plain old data; zero is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; count],
            addr_lens: vec![0; count],
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Datagram `i` of the last [`recv_batch`]: its bytes and its sender.
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let start = i * self.slot_bytes;
        let bytes = &self.data[start..start + self.lens[i]];
        // SAFETY: the kernel wrote a sockaddr of `addr_lens[i]` bytes (at most the storage
        // size) into `addrs[i]`.
        let addr = unsafe { SockAddr::new(self.addrs[i], self.addr_lens[i]) };
        (bytes, addr.as_socket())
    }
}

/// Receives up to `slots.capacity()` datagrams with one recvmmsg, waiting (per the socket's
/// receive timeout) for the first only; returns how many arrived. Truncated datagrams are
/// reported at the slot size. `WouldBlock` / `TimedOut` when none came.
pub fn recv_batch(socket: &impl AsRawFd, slots: &mut RecvSlots) -> io::Result<usize> {
    let n = slots.capacity();
    recv_batch_flags(socket, slots, n, libc::MSG_WAITFORONE)
}

/// Like [`recv_batch`] but never waits, and takes at most `limit` datagrams: `WouldBlock`
/// when nothing is there.
pub fn recv_batch_now(
    socket: &impl AsRawFd,
    slots: &mut RecvSlots,
    limit: usize,
) -> io::Result<usize> {
    recv_batch_flags(socket, slots, limit, libc::MSG_DONTWAIT)
}

fn recv_batch_flags(
    socket: &impl AsRawFd,
    slots: &mut RecvSlots,
    limit: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = slots.capacity().min(limit).max(1);
    let slot = slots.slot_bytes;
    // SAFETY: plain old data; all-zero is a valid value of each.
    let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    let base = slots.data.as_mut_ptr();
    for i in 0..n {
        iovs[i] = libc::iovec {
            // SAFETY: slot i lies inside `data` (n slots of `slot` bytes).
            iov_base: unsafe { base.add(i * slot) }.cast(),
            iov_len: slot,
        };
        msgs[i].msg_hdr.msg_name = (&mut slots.addrs[i] as *mut libc::sockaddr_storage).cast();
        msgs[i].msg_hdr.msg_namelen =
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msgs[i].msg_hdr.msg_iov = &mut iovs[i] as *mut libc::iovec;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: the first n headers point at live iovecs over `data` and sockaddr_storages of
    // the size given; no timeout pointer.
    let rc = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            flags,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for (i, m) in msgs.iter().take(got).enumerate() {
        slots.lens[i] = (m.msg_len as usize).min(slot);
        slots.addr_lens[i] = m.msg_hdr.msg_namelen;
    }
    Ok(got)
}

/// Turns on UDP GSO for every send of `socket`: a send of more than `segment_bytes` leaves
/// as datagrams of `segment_bytes` (the last may be shorter). `Unsupported`-style errors
/// (ENOPROTOOPT, EINVAL) on kernels without it: the caller falls back.
pub fn set_udp_segment(socket: &impl AsRawFd, segment_bytes: u16) -> io::Result<()> {
    set_int(
        socket,
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        segment_bytes as libc::c_int,
    )
}

/// Turns on UDP GRO receive coalescing: one receive may return several equal datagrams
/// back to back.
pub fn set_udp_gro(socket: &impl AsRawFd, on: bool) -> io::Result<()> {
    set_int(socket, libc::SOL_UDP, libc::UDP_GRO, on as libc::c_int)
}

fn set_int(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a live fd, a pointer to a c_int that outlives the call and its exact size.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn a_batch_goes_out_and_comes_back_in_order() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let dst = b.local_addr().unwrap();
        let bufs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize]).collect();
        let list: Vec<(&[u8], SocketAddr)> = bufs.iter().map(|b| (b.as_slice(), dst)).collect();
        assert_eq!(send_batch(&a, &list).unwrap(), 10);
        let mut slots = RecvSlots::new(16, 2048);
        let mut seen = Vec::new();
        while seen.len() < 10 {
            let n = recv_batch(&b, &mut slots).unwrap();
            for i in 0..n {
                let (bytes, src) = slots.get(i);
                assert_eq!(src, Some(a.local_addr().unwrap()));
                seen.push(bytes.to_vec());
            }
        }
        assert_eq!(seen, bufs);
    }
}
