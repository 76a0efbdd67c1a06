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
/// datagram protocol: the caller decides).
pub fn send_batch(socket: &impl AsRawFd, datagrams: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let mut sent = 0;
    for chunk in datagrams.chunks(MAX_BATCH) {
        let addrs: Vec<SockAddr> = chunk.iter().map(|(_, a)| SockAddr::from(*a)).collect();
        let mut iovs: Vec<libc::iovec> = chunk
            .iter()
            .map(|(b, _)| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(chunk.len());
        for (iov, addr) in iovs.iter_mut().zip(&addrs) {
            // SAFETY: mmsghdr is plain old data; all-zero is a valid empty header.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_namelen = addr.len();
            m.msg_hdr.msg_iov = iov as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            msgs.push(m);
        }
        // SAFETY: every header points at an iovec and a sockaddr that live (in `iovs`,
        // `addrs`, `chunk`) until the call returns; the count is the vector's length.
        let rc = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
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
    let slot = slots.slot_bytes;
    let mut iovs: Vec<libc::iovec> = (0..n)
        .map(|i| libc::iovec {
            // SAFETY: in bounds of `data` (n slots of `slot` bytes).
            iov_base: unsafe { slots.data.as_mut_ptr().add(i * slot) } as *mut libc::c_void,
            iov_len: slot,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
    for (iov, addr) in iovs.iter_mut().zip(slots.addrs.iter_mut()) {
        // SAFETY: mmsghdr is plain old data; all-zero is a valid empty header.
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        m.msg_hdr.msg_iov = iov as *mut libc::iovec;
        m.msg_hdr.msg_iovlen = 1;
        msgs.push(m);
    }
    // SAFETY: every header points at a live iovec over `data` and a sockaddr_storage of the
    // size given; MSG_WAITFORONE makes only the first datagram wait; no timeout pointer.
    let rc = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_WAITFORONE,
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
