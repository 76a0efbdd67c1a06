//! Batched datagram syscalls socket2 does not offer: sendmmsg(2), recvmmsg(2), and the UDP
//! GSO / GRO socket options. FFI, like `super::socket_options`: one of the modules the crate docs
//! allow `unsafe` (see "Unsafe" there); everything it exports is safe.
//!
//! Why: one syscall per datagram is most of what a soft-RoCE data path costs. Batching
//! amortises the syscall entry over up to [`MAX_BATCH`] datagrams; GSO lets the kernel cut
//! one large buffer into equal segments.
//!
//! sendmmsg, recvmmsg and recvmsg are made as plain system calls, not through libc's wrappers: those
//! are thread cancellation points, and entering and leaving cancellation mode around each
//! call showed as 2% of a polling ping-pong's samples, as much as the receive's own code. A
//! polling application makes an empty receive in a loop. Nothing here uses cancellation.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use socket2::SockAddr;

/// Most datagrams per sendmmsg / recvmmsg call (the kernel's UIO_MAXIOV is 1024; beyond a
/// few dozen the gain is nil).
pub const MAX_BATCH: usize = 64;

/// Room for the control messages a receive may carry (UDP_GRO's int), in u64 words so that
/// the buffer is aligned for `cmsghdr`.
const CTRL_WORDS: usize = 8;

/// A datagram to send: its bytes and where they go.
pub trait Datagram {
    /// The UDP payload; only its length counts where [`Datagram::parts`] says otherwise.
    fn bytes(&self) -> &[u8];
    /// The destination.
    fn destination(&self) -> SocketAddr;
    /// The UDP payload as the kernel gets it, in up to [`PARTS`] pieces (empty ones are
    /// skipped) as long as [`Datagram::bytes`] in all: e.g. headers, a payload lying
    /// elsewhere, trailer. The whole of `bytes` by default.
    fn parts(&self) -> [&[u8]; PARTS] {
        [self.bytes(), &[], &[]]
    }
    /// What picks the socket that receives it where several processes share the
    /// destination port (a RoCE packet's steering slot, see `shared_port::steering`); `None`
    /// where nothing does. A GSO send reaches one socket, the one its first datagram picks.
    fn steering_slot(&self) -> Option<u8> {
        None
    }
}

/// Most pieces of one datagram ([`Datagram::parts`]).
pub const PARTS: usize = 3;

/// The [`Datagram::parts`] of a datagram whose bytes from `at` on are `middle` (a payload
/// sent from another buffer) whatever `bytes` holds there; `bytes` whole if `middle` is
/// empty.
#[inline]
pub fn parts_around<'a>(bytes: &'a [u8], at: usize, middle: &'a [u8]) -> [&'a [u8]; PARTS] {
    if middle.is_empty() {
        return [bytes, &[], &[]];
    }
    [&bytes[..at], middle, &bytes[at + middle.len()..]]
}

impl Datagram for (&[u8], SocketAddr) {
    fn bytes(&self) -> &[u8] {
        self.0
    }
    fn destination(&self) -> SocketAddr {
        self.1
    }
}

/// Most datagrams of one [`send_runs`] call (each of up to [`PARTS`] iovecs).
pub const MAX_SEND_DATAGRAMS: usize = 4 * MAX_BATCH;
/// Largest UDP payload of one GSO send (what fits an IPv4 datagram).
pub const GSO_MAX_BYTES: usize = 65_507;

/// Sends `datagrams` (bytes, destination) with as few sendmmsg calls as possible; returns
/// how many the kernel took (a full socket buffer stops a call early, which is loss to a
/// datagram protocol: the caller decides). Allocates nothing: the headers live on the stack.
pub fn send_batch(socket: &impl AsRawFd, datagrams: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let ones = [1usize; MAX_BATCH];
    let mut sent = 0;
    for chunk in datagrams.chunks(MAX_BATCH) {
        match send_runs(socket, chunk, &ones[..chunk.len()]) {
            Ok(k) => {
                sent += k;
                if k < chunk.len() {
                    break;
                }
            }
            Err(e) if sent == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(sent)
}

/// Sends `datagrams` with ONE sendmmsg: entry `k` of `runs` takes the next `runs[k]`
/// datagrams, which go as one plain datagram (a run of 1) or as one UDP GSO send (the kernel
/// cuts the run apart again, or delivers it in one piece to a GRO socket on this host). The
/// datagrams of a run share the destination of their first and are all the size of the
/// first but the last, which may be shorter. Returns how many entries (not datagrams) the
/// kernel took, like sendmmsg; at most [`MAX_BATCH`] entries and [`MAX_SEND_DATAGRAMS`]
/// datagrams. A kernel without UDP GSO refuses a run with EINVAL, ENOPROTOOPT or EIO.
///
/// Why one call: a message's first packet is longer than the rest (its RETH), so a message
/// is two GSO runs ([`super::send_plan::gso_run`]); as two syscalls, a 64 KiB WRITE paid
/// twice the per-call cost.
pub fn send_runs<D: Datagram>(
    socket: &impl AsRawFd,
    datagrams: &[D],
    runs: &[usize],
) -> io::Result<usize> {
    let total: usize = runs.iter().sum();
    if runs.is_empty()
        || runs.len() > MAX_BATCH
        || total > datagrams.len()
        || total > MAX_SEND_DATAGRAMS
        || runs.contains(&0)
    {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // Only the entries used are written: zeroing whole arrays (8 KiB of addresses) cost
    // more than the call when a batch holds one datagram.
    let mut addrs = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; MAX_BATCH];
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; PARTS * MAX_SEND_DATAGRAMS];
    let mut iov_next = 0;
    let mut ctrls = [const { MaybeUninit::<[u64; CTRL_WORDS]>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut next = 0;
    for (k, &run) in runs.iter().enumerate() {
        let sa = SockAddr::from(datagrams[next].destination());
        let addr = addrs[k].as_mut_ptr();
        // SAFETY: `sa` holds `sa.len()` valid bytes of a sockaddr, at most the size of
        // sockaddr_storage, copied into this entry's own storage; they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                sa.as_ptr().cast::<u8>(),
                addr.cast::<u8>(),
                sa.len() as usize,
            )
        };
        let iov_first = iov_next;
        for d in &datagrams[next..next + run] {
            for part in d.parts().into_iter().filter(|p| !p.is_empty()) {
                iovs[iov_next].write(libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                });
                iov_next += 1;
            }
        }
        // SAFETY: mmsghdr is plain old data; all-zero is a valid empty header.
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_name = addr.cast();
        m.msg_hdr.msg_namelen = sa.len();
        m.msg_hdr.msg_iov = iovs[iov_first].as_mut_ptr();
        m.msg_hdr.msg_iovlen = (iov_next - iov_first) as _;
        if run > 1 {
            let seg = datagrams[next].bytes().len() as u16;
            m.msg_hdr.msg_control = ctrls[k].write([0; CTRL_WORDS]).as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic on the payload size.
            m.msg_hdr.msg_controllen =
                unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
            // SAFETY: the control buffer is 64 aligned bytes, more than CMSG_SPACE(2); the
            // header written and the u16 after it lie inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
        msgs[k].write(m);
        next += run;
    }
    // SAFETY: the first `runs.len()` headers were written above and point at iovecs,
    // sockaddrs and control buffers on this stack frame and at the caller's buffers, all
    // alive until the call returns; the kernel reads no further entries. The system call
    // takes the same arguments as libc's wrapper (see the module doc).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sendmmsg,
            socket.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            runs.len() as libc::c_uint,
            0 as libc::c_int,
        )
    };
    syscall_result(rc)
}

/// The count a raw system call returned, or its error: `rc` is negative exactly when the
/// call failed and set errno.
fn syscall_result(rc: libc::c_long) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Waits up to `timeout` until `socket` has something to receive, without receiving it;
/// `Ok(false)` on timeout (or an interrupted wait).
pub fn wait_readable(socket: &impl AsRawFd, timeout: std::time::Duration) -> io::Result<bool> {
    Ok(wait_any_readable(&[socket.as_raw_fd()], timeout)? != 0)
}

/// [`wait_readable`] for up to 32 descriptors: once any of `fds` has something to read,
/// the set of those that have (bit `i` for `fds[i]`); 0 on timeout (or an interrupted
/// wait). The set spares the caller a receive on each descriptor that has nothing.
pub fn wait_any_readable(
    fds: &[std::os::fd::RawFd],
    timeout: std::time::Duration,
) -> io::Result<u32> {
    debug_assert!(fds.len() <= 32);
    let mut pfds: smallvec::SmallVec<[libc::pollfd; 2]> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // ppoll, not poll: waits shorter than a millisecond matter here.
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfds` holds exactly `pfds.len()` pollfds and `ts` one timespec, both alive
    // for the call; no signal mask.
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(pfds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .fold(0, |set, (i, _)| set | 1 << i))
}

/// Buffers for [`recv_batch`]: `count` slots of `slot_bytes` each, allocated once.
pub struct RecvSlots {
    data: Vec<u8>,
    slot_bytes: usize,
    lens: Vec<usize>,
    /// Control messages per slot (where UDP GRO reports its segment size).
    ctrl: Vec<[u64; CTRL_WORDS]>,
    /// Segment size of a slot holding GRO-coalesced datagrams, 0 for a plain datagram.
    segs: Vec<usize>,
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
            ctrl: vec![[0; CTRL_WORDS]; count],
            segs: vec![0; count],
            // SAFETY: sockaddr_storage is plain old data; zero is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; count],
            addr_lens: vec![0; count],
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// The iovec over slot `i` of `data` (panics past the slots).
    #[inline]
    fn iovec(&mut self, i: usize) -> libc::iovec {
        assert!(i < self.capacity(), "no receive slot {i}");
        libc::iovec {
            // SAFETY: slot i lies inside `data` (capacity slots of `slot_bytes` each).
            iov_base: unsafe { self.data.as_mut_ptr().add(i * self.slot_bytes) }.cast(),
            iov_len: self.slot_bytes,
        }
    }

    /// The receive header of slot `i`: `iov` (its [`RecvSlots::iovec`]), its address and
    /// control buffers, with their sizes.
    #[inline]
    fn header(&mut self, i: usize, iov: &mut libc::iovec) -> libc::msghdr {
        // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
        hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_iov = iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = self.ctrl[i].as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of::<[u64; CTRL_WORDS]>() as _;
        hdr
    }

    /// Notes what the kernel put in slot `i`: `len` bytes, the address length and GRO
    /// segment size its header `hdr` reports.
    #[inline]
    fn received(&mut self, i: usize, len: usize, hdr: &libc::msghdr) {
        self.lens[i] = len.min(self.slot_bytes);
        self.addr_lens[i] = hdr.msg_namelen;
        self.segs[i] = gro_segment(hdr);
    }

    /// The GRO segment size of slot `i` of the last receive: its bytes are datagrams of
    /// this size back to back (the last may be shorter); 0 when it holds one datagram.
    pub fn segment_bytes(&self, i: usize) -> usize {
        self.segs[i]
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
/// when nothing is there. A `limit` of 1 is a recvmsg(2), not a recvmmsg.
pub fn recv_batch_now(
    socket: &impl AsRawFd,
    slots: &mut RecvSlots,
    limit: usize,
) -> io::Result<usize> {
    recv_batch_flags(socket, slots, limit, libc::MSG_DONTWAIT)
}

/// Receives one datagram into slot 0 with recvfrom(2), without waiting: `WouldBlock` when
/// nothing is there. For a socket whose GRO is off (see `gro_mode`): recvfrom reports no
/// GRO segment size, so slot 0 is one datagram, and it costs the kernel less than recvmsg.
/// With `peek` the datagram stays queued ([`discard_one`] drops it).
pub fn recv_one_plain(
    socket: &impl AsRawFd,
    slots: &mut RecvSlots,
    peek: bool,
) -> io::Result<usize> {
    let mut addr_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let flags = libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 };
    // SAFETY: slot 0 is `slot_bytes` bytes inside `data`, addrs[0] a sockaddr_storage of the
    // length given; the kernel writes at most those. A plain system call as the others here
    // (see the module doc).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            socket.as_raw_fd(),
            slots.data.as_mut_ptr(),
            slots.slot_bytes,
            flags,
            (&mut slots.addrs[0] as *mut libc::sockaddr_storage).cast::<libc::sockaddr>(),
            &mut addr_len as *mut libc::socklen_t,
        )
    };
    let len = syscall_result(rc)?;
    slots.lens[0] = len.min(slots.slot_bytes);
    slots.addr_lens[0] = addr_len;
    slots.segs[0] = 0;
    Ok(1)
}

/// Sends one datagram with sendto(2) as a plain system call (see the module doc): std's
/// `send_to` resolves an address list and goes through libc's cancellation wrapper, about
/// 120 instructions per message of a ping-pong.
pub fn send_one(socket: &impl AsRawFd, bytes: &[u8], dst: SocketAddr) -> io::Result<usize> {
    let addr = SockAddr::from(dst);
    // SAFETY: `bytes` is a live slice of its length; `addr` holds a socket address of
    // `addr.len()` bytes; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            socket.as_raw_fd(),
            bytes.as_ptr(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            addr.as_ptr(),
            addr.len(),
        )
    };
    syscall_result(rc)
}

/// Drops the first datagram queued on `socket` (one that [`recv_one_plain`] peeked at),
/// without waiting or copying it.
pub fn discard_one(socket: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: a zero-length receive: the kernel writes no buffer and no address.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            socket.as_raw_fd(),
            std::ptr::null_mut::<u8>(),
            0usize,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    };
    syscall_result(rc).map(drop)
}

/// One datagram (or GRO run) into slot 0 without waiting, with recvmsg: what a polling
/// application asks for, mostly finding nothing. The kernel serves recvmsg with less work
/// than a recvmmsg of one entry (a raw UDP ping-pong's half round trip: about 0.3 us less
/// on this kind of machine), and one header on the stack costs less to set up than the
/// batch's arrays.
fn recv_one_now(socket: &impl AsRawFd, slots: &mut RecvSlots) -> io::Result<usize> {
    let mut iov = slots.iovec(0);
    let mut hdr = slots.header(0, &mut iov);
    // SAFETY: the header points at slot 0 of `data` (`slot_bytes` long), addrs[0] and
    // ctrl[0], with their sizes; the kernel writes at most those. A plain system call as
    // the others here (see the module doc).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvmsg,
            socket.as_raw_fd(),
            &mut hdr as *mut libc::msghdr,
            libc::MSG_DONTWAIT,
        )
    };
    let len = syscall_result(rc)?;
    slots.received(0, len, &hdr);
    Ok(1)
}

fn recv_batch_flags(
    socket: &impl AsRawFd,
    slots: &mut RecvSlots,
    limit: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = slots.capacity().min(limit).max(1);
    if n == 1 && flags == libc::MSG_DONTWAIT {
        return recv_one_now(socket, slots);
    }
    // Only the entries used are written: zeroing all MAX_BATCH headers cost more than an
    // empty receive.
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    for i in 0..n {
        let iov = iovs[i].write(slots.iovec(i));
        msgs[i].write(libc::mmsghdr {
            msg_hdr: slots.header(i, iov),
            msg_len: 0,
        });
    }
    // SAFETY: the first n headers were written above and point at live iovecs over
    // `data`, sockaddr_storages and control buffers of the sizes given; the kernel reads
    // no further entries; no timeout pointer. The system call takes the same arguments
    // as libc's wrapper (see the module doc).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            socket.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            flags,
            std::ptr::null_mut::<libc::timespec>(),
        )
    };
    let got = syscall_result(rc)?;
    // SAFETY: the kernel filled (at most) the first n headers, which were initialised.
    let msgs = unsafe { std::slice::from_raw_parts(msgs.as_ptr().cast::<libc::mmsghdr>(), n) };
    for (i, m) in msgs.iter().take(got).enumerate() {
        slots.received(i, m.msg_len as usize, &m.msg_hdr);
    }
    Ok(got)
}

/// The UDP_GRO segment size a received message reports, 0 if none.
fn gro_segment(hdr: &libc::msghdr) -> usize {
    // SAFETY: `hdr` is a header the kernel filled, its control pointer and length describe
    // our control buffer; the CMSG macros walk only within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return v.max(0) as usize;
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    0
}

/// Turns on UDP GSO for every send of `socket`: a send of more than `segment_bytes` leaves
/// as datagrams of `segment_bytes` (the last may be shorter). `Unsupported`-style errors
/// (ENOPROTOOPT, EINVAL) on kernels without it: the caller falls back.
pub fn set_udp_segment(socket: &impl AsRawFd, segment_bytes: u16) -> io::Result<()> {
    super::socket_options::set_int_option(
        socket,
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        segment_bytes as libc::c_int,
    )
}

/// Turns on UDP GRO receive coalescing: one receive may return several equal datagrams
/// back to back.
pub fn set_udp_gro(socket: &impl AsRawFd, on: bool) -> io::Result<()> {
    super::socket_options::set_int_option(socket, libc::SOL_UDP, libc::UDP_GRO, on as libc::c_int)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn a_wait_on_several_sockets_says_which_have_something() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        assert_eq!(wait_any_readable(&fds, Duration::ZERO).unwrap(), 0);
        a.send_to(b"x", b.local_addr().unwrap()).unwrap();
        assert_eq!(
            wait_any_readable(&fds, Duration::from_secs(5)).unwrap(),
            0b10
        );
        b.send_to(b"y", a.local_addr().unwrap()).unwrap();
        assert_eq!(
            wait_any_readable(&fds, Duration::from_secs(5)).unwrap(),
            0b11
        );
    }

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

    /// Receives `count` datagrams on `b`, a GRO run split into its segments (which only a
    /// socket with GRO on, `gro`, may get).
    fn receive_datagrams(b: &UdpSocket, count: usize, gro: bool) -> Vec<Vec<u8>> {
        let mut slots = RecvSlots::new(8, 65536);
        let mut seen = Vec::new();
        while seen.len() < count {
            let n = recv_batch(b, &mut slots).unwrap();
            for i in 0..n {
                let (bytes, _) = slots.get(i);
                match slots.segment_bytes(i) {
                    0 => seen.push(bytes.to_vec()),
                    seg => {
                        assert!(gro);
                        seen.extend(bytes.chunks(seg).map(|c| c.to_vec()));
                    }
                }
            }
        }
        seen
    }

    #[test]
    fn one_sendmmsg_carries_plain_datagrams_and_a_gso_run_in_order() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let gro = set_udp_gro(&b, true).is_ok();
        let segs: Vec<Vec<u8>> = (0..5u8)
            .map(|i| vec![i; if i == 4 { 300 } else { 1000 }])
            .collect();
        let dst = b.local_addr().unwrap();
        // A plain datagram, the run of five, another plain one: one sendmmsg.
        let mut list: Vec<(&[u8], SocketAddr)> = vec![(&b"first"[..], dst)];
        list.extend(segs.iter().map(|s| (s.as_slice(), dst)));
        list.push((&b"after"[..], dst));
        match send_runs(&a, &list, &[1, 5, 1]) {
            Ok(n) => assert_eq!(n, 3, "every entry went out"),
            Err(_) => return, // no UDP GSO in this kernel: the link falls back to sendmmsg
        }
        let mut want = vec![b"first".to_vec()];
        want.extend(segs.iter().cloned());
        want.push(b"after".to_vec());
        assert_eq!(receive_datagrams(&b, want.len(), gro), want);
    }

    /// A datagram in three pieces: head, a middle from another buffer, tail.
    struct Pieces<'a> {
        whole: Vec<u8>,
        middle: &'a [u8],
        at: usize,
        dst: SocketAddr,
    }

    impl Datagram for Pieces<'_> {
        fn bytes(&self) -> &[u8] {
            &self.whole
        }
        fn destination(&self) -> SocketAddr {
            self.dst
        }
        fn parts(&self) -> [&[u8]; PARTS] {
            parts_around(&self.whole, self.at, self.middle)
        }
    }

    #[test]
    fn datagrams_in_pieces_arrive_whole_plain_and_in_a_gso_run() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let gro = set_udp_gro(&b, true).is_ok();
        let dst = b.local_addr().unwrap();
        // Payloads elsewhere; the packets hold stale bytes where they go.
        let payloads: Vec<Vec<u8>> = (0..4u8).map(|i| vec![0x10 + i; 1000]).collect();
        let list: Vec<Pieces> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut whole = vec![0xee; 1024];
                whole[..16].fill(i as u8);
                whole[1016..].fill(0xa0 + i as u8);
                Pieces {
                    whole,
                    middle: p,
                    at: 16,
                    dst,
                }
            })
            .collect();
        let want: Vec<Vec<u8>> = list.iter().map(|d| d.parts().concat()).collect();
        assert!(want.iter().all(|w| w.len() == 1024 && !w.contains(&0xee)));
        // The first alone, the other three as one GSO run.
        match send_runs(&a, &list, &[1, 3]) {
            Ok(n) => assert_eq!(n, 2),
            Err(_) => return, // no UDP GSO in this kernel: the link falls back to sendmmsg
        }
        assert_eq!(receive_datagrams(&b, want.len(), gro), want);
    }

    #[test]
    fn a_receive_of_one_takes_one_datagram_with_its_sender_and_gro_segment() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gro = set_udp_gro(&b, true).is_ok();
        let mut slots = RecvSlots::new(4, 65536);
        let nothing = recv_batch_now(&b, &mut slots, 1).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock);
        let dst = b.local_addr().unwrap();
        let run: Vec<Vec<u8>> = (0..3u8).map(|i| vec![0x30 + i; 700]).collect();
        let mut list: Vec<(&[u8], SocketAddr)> = vec![(&b"alone"[..], dst)];
        list.extend(run.iter().map(|s| (s.as_slice(), dst)));
        let sent_as_run = send_runs(&a, &list, &[1, 3]).is_ok();
        if !sent_as_run {
            send_batch(&a, &list).unwrap();
        }
        // One receive of one, then the rest one at a time, until all four are in.
        let mut seen = Vec::new();
        let mut receives = 0;
        let started = std::time::Instant::now();
        while seen.len() < 4 && started.elapsed() < Duration::from_secs(5) {
            match recv_batch_now(&b, &mut slots, 1) {
                Ok(n) => {
                    assert_eq!(n, 1);
                    receives += 1;
                    let (bytes, src) = slots.get(0);
                    assert_eq!(src, Some(a.local_addr().unwrap()));
                    match slots.segment_bytes(0) {
                        0 => seen.push(bytes.to_vec()),
                        seg => {
                            assert_eq!(seg, 700);
                            seen.extend(bytes.chunks(seg).map(|c| c.to_vec()));
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let mut want = vec![b"alone".to_vec()];
        want.extend(run.iter().cloned());
        assert_eq!(seen, want);
        // A GSO run reaches a GRO socket as one receive.
        if sent_as_run && gro {
            assert_eq!(receives, 2);
        }
    }

    #[test]
    fn a_plain_receive_takes_one_datagram_with_its_sender() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("[::1]:0").ok();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut slots = RecvSlots::new(2, 4096);
        let nothing = recv_one_plain(&c, &mut slots, false).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock);
        a.send_to(b"first", c.local_addr().unwrap()).unwrap();
        a.send_to(&[7u8; 3000], c.local_addr().unwrap()).unwrap();
        a.send_to(b"third", c.local_addr().unwrap()).unwrap();
        for want in [&b"first"[..], &[7u8; 3000][..]] {
            assert!(wait_readable(&c, Duration::from_secs(5)).unwrap());
            // A peek leaves it queued; the receive after it takes it.
            for peek in [true, true, false] {
                assert_eq!(recv_one_plain(&c, &mut slots, peek).unwrap(), 1);
                let (bytes, src) = slots.get(0);
                assert_eq!((bytes, src), (want, Some(a.local_addr().unwrap())));
                assert_eq!(slots.segment_bytes(0), 0);
            }
        }
        // A peeked datagram dropped: the queue is empty after it.
        assert!(wait_readable(&c, Duration::from_secs(5)).unwrap());
        assert_eq!(recv_one_plain(&c, &mut slots, true).unwrap(), 1);
        assert_eq!(slots.get(0).0, b"third");
        discard_one(&c).unwrap();
        assert_eq!(
            recv_one_plain(&c, &mut slots, false).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(
            discard_one(&c).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // An IPv6 sender's address comes back whole.
        if let Some(b) = b {
            let d = UdpSocket::bind("[::1]:0").unwrap();
            b.send_to(b"six", d.local_addr().unwrap()).unwrap();
            assert!(wait_readable(&d, Duration::from_secs(5)).unwrap());
            assert_eq!(recv_one_plain(&d, &mut slots, false).unwrap(), 1);
            assert_eq!(slots.get(0), (&b"six"[..], Some(b.local_addr().unwrap())));
        }
    }

    #[test]
    fn send_one_delivers_its_bytes_to_the_address_over_either_family() {
        let mut slots = RecvSlots::new(1, 4096);
        let mut pairs = vec![(
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        )];
        if let (Ok(a), Ok(b)) = (UdpSocket::bind("[::1]:0"), UdpSocket::bind("[::1]:0")) {
            pairs.push((a, b));
        }
        for (from, to) in &pairs {
            let dst = to.local_addr().unwrap();
            assert_eq!(send_one(from, b"one datagram", dst).unwrap(), 12);
            assert!(wait_readable(to, Duration::from_secs(5)).unwrap());
            assert_eq!(recv_one_plain(to, &mut slots, false).unwrap(), 1);
            let (bytes, src) = slots.get(0);
            assert_eq!(bytes, b"one datagram");
            assert_eq!(src, Some(from.local_addr().unwrap()));
        }
        // A destination of the other family is refused, not sent anywhere.
        let (v4, _) = &pairs[0];
        let v6_dst: SocketAddr = "[::1]:9".parse().unwrap();
        assert!(send_one(v4, b"x", v6_dst).is_err());
    }

    #[test]
    fn send_runs_refuses_a_plan_that_does_not_fit_its_datagrams() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = a.local_addr().unwrap();
        let list: Vec<(&[u8], SocketAddr)> = vec![(&b"x"[..], dst); 3];
        for runs in [&[][..], &[4][..], &[1, 0, 2][..]] {
            let e = send_runs(&a, &list, runs).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{runs:?}");
        }
    }
}
