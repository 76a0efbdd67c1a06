//! A device's link when several processes share its UDP port: a UDP socket in the port's
//! `SO_REUSEPORT` group, as the face of this process's [`Member`] (slot, forwarding socket,
//! probes, steering).
//!
//! Receiving routes each datagram by the slot in its destination QPN's top byte: this
//! member's slot and slot 0 (QP0/QP1) are delivered; a probe (slot 0xFF from our own
//! address) tells this member its index in the group; anything else was meant for another
//! member and is forwarded to it, or dropped and counted if that member is gone.
//! Whenever membership changes (a join here, a departure noticed by a liveness check) the
//! member that saw it re-probes under the registry's lock and attaches a new steering
//! program. See docs/shared-devices.md.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::super::batched_io;
use super::super::udp::UdpLink;
use super::super::{DatagramView, InDatagram, Link, OutPacket};
pub use super::member::SharedCounters;
use super::member::{Member, ProbeFace, Route, LIVENESS_PERIOD};
use super::probe::Probe;
use super::registry::Registry;
use super::steering::{BpfInsn, Framing};
use super::unclaimed;

/// Forwarded datagrams taken per receive call.
const FORWARDED_PER_CALL: usize = 64;
/// Receive calls between two looks at the forwarding socket (without a wait that saw
/// something): bounds the extra delay of a forwarded datagram (tens of microseconds for a
/// polling application). Each look is a system call that usually finds nothing, and in a
/// polling loop every nanosecond between two receives is a nanosecond more before a
/// datagram that arrives is seen: one look in 16 polls was 30-45 ns of a 700 ns empty poll.
const FORWARDER_CHECK_EVERY: u32 = 64;
/// Receive calls between two liveness checks (each reads the clock).
const MEMBERSHIP_CHECK_EVERY: u32 = 64;

/// A member's link of a shared UDP device.
pub struct SharedLink {
    udp: UdpLink,
    member: Member,
    /// Datagrams received while this member waited for its own probes.
    pending: Pending,
    /// Receive calls so far (see `recv_ready`).
    receive_calls: AtomicU32,
    /// A wait saw a socket readable: the next receive looks at the forwarding socket.
    forwarder_due: AtomicBool,
}

/// The datagrams a member set aside (received while it waited for its probes, or
/// connection requests released from their hold), with a flag that spares the empty case
/// (nearly every receive call) the lock.
#[derive(Default)]
struct Pending {
    queue: Mutex<VecDeque<InDatagram>>,
    any: AtomicBool,
}

impl Pending {
    fn push(&self, d: InDatagram) {
        self.extend(std::iter::once(d));
    }

    fn extend(&self, ds: impl IntoIterator<Item = InDatagram>) {
        let mut queue = self.queue.lock();
        queue.extend(ds);
        self.any.store(!queue.is_empty(), Ordering::Release);
    }

    fn pop(&self) -> Option<InDatagram> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut queue = self.queue.lock();
        let d = queue.pop_front();
        self.any.store(!queue.is_empty(), Ordering::Release);
        d
    }

    fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }
}

impl SharedLink {
    /// Joins the processes sharing `ip:port` (the first one creates the group): binds,
    /// claims a slot, and re-probes so that the group's program steers to this member too.
    pub fn join(ip: IpAddr, port: u16) -> io::Result<SharedLink> {
        SharedLink::join_registry(Registry::for_device(ip, port)?, ip, port)
    }

    /// [`SharedLink::join`] with the registry in a given place (tests).
    pub fn join_registry(registry: Registry, ip: IpAddr, port: u16) -> io::Result<SharedLink> {
        let (member, held) = Member::claim(registry, SocketAddr::new(ip, port))?;
        let udp = UdpLink::bind_shared(ip, port)?;
        let link = SharedLink {
            udp,
            member,
            pending: Pending::default(),
            receive_calls: AtomicU32::new(0),
            forwarder_due: AtomicBool::new(true),
        };
        link.member.start(&held, &link)?;
        Ok(link)
    }

    /// The slot this member holds: its QPNs are `slot << 16 | n`.
    pub fn slot(&self) -> u8 {
        self.member.slot()
    }

    /// The UDP socket, for tests that attach programs of their own.
    #[cfg(test)]
    pub(crate) fn socket_for_tests(&self) -> &std::net::UdpSocket {
        self.udp.socket()
    }

    /// The membership, for tests that run its rounds through a face of their own.
    #[cfg(test)]
    pub(crate) fn member_for_tests(&self) -> &Member {
        &self.member
    }

    /// What port sharing did.
    pub fn counters(&self) -> &SharedCounters {
        self.member.counters()
    }

    /// Whether the port group runs a steering program (not while this member is alone).
    pub fn steered(&self) -> bool {
        self.member.steered()
    }

    /// What to do with a datagram from the UDP socket: `Some` to deliver it here; probes
    /// and other members' datagrams are dealt with and `None` returned.
    fn route<'d>(&self, d: DatagramView<'d>) -> Option<DatagramView<'d>> {
        // A probe comes from our own address (a member's socket sent it).
        if d.src.ip() == self.udp.local_addr().ip() {
            if let Some(probe) = Probe::parse(d.payload) {
                self.member.answer_probe(probe);
                return None;
            }
        }
        match self.member.route(d) {
            Route::Here => Some(d),
            Route::Forwarded | Route::Held => None,
        }
    }

    /// True for a QP1 datagram (a MAD) this member sends to its own device.
    fn is_mad_to_own_device(&self, packet: &OutPacket) -> bool {
        let local = self.udp.local_addr();
        packet.payload.is_none()
            && packet.dst_ip == local.ip()
            && packet.udp_dst_port == local.port()
            && packet.bytes.get(5..8) == Some(&[0, 0, 1][..])
    }

    /// Sends a MAD to this device itself straight to the member it names (see `mad_route`),
    /// through the forwarder; true if it went. Through the shared port the kernel's hash
    /// hands every QP1 datagram to one member, and one that exits takes those it received
    /// for others with it: a passive side's DREQ sent just before its process ends never
    /// reached the active side (seen with pyverbs' rdmacm tests, both ends on one device).
    /// A MAD that names no member (a request whose listener is not in the listen table
    /// yet: its own CM may already listen) or a member gone meanwhile: false, and the port
    /// takes it as before.
    fn send_mad_to_own_device(&self, packet: &mut OutPacket) -> io::Result<bool> {
        if !self.is_mad_to_own_device(packet) {
            return Ok(false);
        }
        // The ICRC, as the UDP link writes it when it sends.
        self.udp.finalize(packet)?;
        let local = self.udp.local_addr();
        let Some(slot) = self.member.qp1_owner(&packet.bytes) else {
            return Ok(false);
        };
        // As the datagram would arrive through the port: from the port itself, with the
        // IPv4 identification the UDP link computes the ICRC with.
        let view = DatagramView {
            src: local,
            dst: local,
            payload: &packet.bytes,
            ipv4_identification: local.is_ipv4().then_some(0),
        };
        Ok(self.member.forward(slot, view))
    }

    /// Enters this member as the listener on CM service `service_id` (see
    /// [`Member::listen`]).
    pub fn listen(&self, service_id: u64) -> io::Result<()> {
        self.member.listen(service_id)
    }

    fn check_membership(&self) -> io::Result<()> {
        self.member.check_membership(self).map(drop)
    }
}

impl ProbeFace for SharedLink {
    fn framing(&self) -> Framing {
        Framing::UdpPayload
    }

    fn send_probe(&self, probe: Probe) -> io::Result<()> {
        self.udp
            .socket()
            .send_to(&probe.to_bytes(), self.udp.local_addr())
            .map(drop)
    }

    fn take_ready(&self) -> io::Result<usize> {
        let mut got = Vec::new();
        let taken = self.udp.recv_ready(64, &mut |d| got.push(d.to_owned()))?;
        for d in got {
            if let Some(d) = self.route(d.view()) {
                self.pending.push(d.to_owned());
            }
        }
        Ok(taken)
    }

    fn attach(&self, program: &[BpfInsn]) -> io::Result<()> {
        super::attach_reuseport_cbpf(self.udp.socket(), program)
    }

    fn detach(&self) -> io::Result<()> {
        super::detach_reuseport_bpf(self.udp.socket())
    }
}

impl Link for SharedLink {
    fn local_addr(&self) -> SocketAddr {
        self.udp.local_addr()
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.udp.finalize(packet)
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        self.udp.send_raw(packet)
    }

    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        if !packets.iter().any(|p| self.is_mad_to_own_device(p)) {
            return self.udp.send_batch(packets);
        }
        for p in packets.iter_mut() {
            if !self.send_mad_to_own_device(p)? {
                self.udp.send_batch(std::slice::from_mut(p))?;
            }
        }
        Ok(())
    }

    fn send_batch_from(&self, packets: &mut [OutPacket], payloads: &[&[u8]]) -> io::Result<()> {
        self.udp.send_batch_from(packets, payloads)
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        if self.wait_readable(timeout)? {
            self.recv_ready(1, &mut |d| {
                self.pending.push(d.to_owned());
            })?;
        }
        Ok(self.pending.pop())
    }

    fn qpn_range(&self) -> Option<std::ops::Range<u32>> {
        Some(self.member.qpn_range())
    }

    fn shared_port(&self) -> Option<&Member> {
        Some(&self.member)
    }

    fn hand_over_shared_port(&self) -> io::Result<()> {
        self.member.hand_over(self).map(drop)
    }

    fn carries_multicast(&self) -> bool {
        self.udp.carries_multicast()
    }

    fn join_group(
        &self,
        group: std::net::IpAddr,
    ) -> io::Result<Option<crate::net::multicast::GroupSocket>> {
        self.udp.join_group(group)
    }

    fn pollable(&self) -> bool {
        true
    }

    fn poll_before_sleep(&self) -> Duration {
        self.udp.poll_before_sleep()
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        self.check_membership()?;
        if !self.pending.is_empty() {
            return Ok(true);
        }
        let fds = [
            self.udp.socket().as_raw_fd(),
            self.member.forwarder().as_socket().as_raw_fd(),
        ];
        // A connection request waiting for its listener is looked at again soon, whatever
        // arrives meanwhile (see `unclaimed`).
        let held = !self.member.unclaimed_is_empty();
        let limit = if held {
            unclaimed::RECHECK
        } else {
            LIVENESS_PERIOD
        };
        let ready = batched_io::wait_any_readable(&fds, timeout.min(limit))?;
        // The next receive looks at the forwarding socket only if it was one of them: a
        // receive that finds nothing there costs a blocked waiter a system call per wake.
        if ready & 0b10 != 0 {
            self.forwarder_due.store(true, Ordering::Relaxed);
        }
        Ok(ready != 0 || held)
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        // A polling application calls this millions of times a second, mostly to find
        // nothing: the liveness check (a clock read) and the forwarding socket (a system
        // call) are looked at every few calls, and whenever a wait said something came.
        // A racy load and store: a count lost when two threads receive at once only moves
        // a check by a call, and it spares every call an atomic add.
        let call = self.receive_calls.load(Ordering::Relaxed);
        self.receive_calls
            .store(call.wrapping_add(1), Ordering::Relaxed);
        if call.is_multiple_of(MEMBERSHIP_CHECK_EVERY) {
            self.check_membership()?;
        }
        let forwarder_due = (self.forwarder_due.load(Ordering::Relaxed)
            && self.forwarder_due.swap(false, Ordering::Relaxed))
            || call.is_multiple_of(FORWARDER_CHECK_EVERY);
        // Connection requests whose listener is now known (or whose hold ended).
        if !self.member.unclaimed_is_empty() {
            let released = self.member.release_held();
            self.pending.extend(released);
        }
        let mut total = 0;
        while total < max {
            let Some(d) = self.pending.pop() else {
                break;
            };
            sink(d.view());
            total += 1;
        }
        while forwarder_due && total < max.min(FORWARDED_PER_CALL) {
            match self.member.forwarder().try_recv() {
                Ok(Some(d)) => {
                    let counters = self.member.counters();
                    counters.forwarded_in.fetch_add(1, Ordering::Relaxed);
                    sink(d.view());
                    total += 1;
                }
                Ok(None) => break,
                // A malformed forward: dropped, the next one may be fine.
                Err(e) if e.kind() == io::ErrorKind::InvalidData => continue,
                Err(e) => return Err(e),
            }
        }
        if total < max {
            total += self.udp.recv_ready(max - total, &mut |d| {
                if let Some(d) = self.route(d) {
                    sink(d);
                }
            })?;
        }
        Ok(total)
    }
}

impl Drop for SharedLink {
    fn drop(&mut self) {
        // The socket closes right after: see `Member::hand_over`.
        if let Err(e) = self.member.hand_over(self) {
            tracing::debug!(error = %e, "handing over the shared port failed");
        }
    }
}
