//! A device's link when several processes share its port: a UDP socket in the port's
//! `SO_REUSEPORT` group, the member's forwarding socket, and its slot in the registry.
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::super::batched_io;
use super::super::udp::UdpLink;
use super::super::{DatagramView, InDatagram, Link, OutPacket};
use super::forward::Forwarder;
use super::mad_route::{qp1_owner, Qp1Owner};
use super::registry::{MemberInfo, MembershipLock, Registry, SlotClaim};
use super::steering::{self, probe_qpn, PROBE_SLOT};

/// How often the members a program steers to are checked for being alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(250);
/// How long a re-probe waits for every member to answer.
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// How long a join waits for other members' membership changes to end: many processes
/// opening a device at once join one after the other, each probe round waiting for every
/// member's engine thread to be scheduled on a loaded machine.
const MEMBERSHIP_WAIT: Duration = Duration::from_secs(30);
/// Bytes of a probe: a BTH-shaped head naming the index, then the round's number.
const PROBE_BYTES: usize = 20;
/// Forwarded datagrams taken per receive call.
const FORWARDED_PER_CALL: usize = 64;
/// Receive calls between two looks at the forwarding socket (without a wait that saw
/// something): bounds the extra delay of a forwarded datagram to a few polls.
const FORWARDER_CHECK_EVERY: u32 = 16;
/// Receive calls between two liveness checks (each reads the clock).
const MEMBERSHIP_CHECK_EVERY: u32 = 64;

/// What port sharing did, for `devices -v` and the tests.
#[derive(Debug, Default)]
pub struct SharedCounters {
    /// Datagrams passed on to the member they were meant for.
    pub forwarded_out: AtomicU64,
    /// Datagrams another member passed on to this one.
    pub forwarded_in: AtomicU64,
    /// Datagrams for a slot no live member holds (or whose forwarding queue was full):
    /// handed to this member's own receive pipeline, which drops them as for an unknown QP.
    pub dropped_for_gone_members: AtomicU64,
    /// Probe rounds this member ran.
    pub probe_rounds: AtomicU64,
    /// Probes this member answered.
    pub probes_answered: AtomicU64,
}

struct State {
    /// What this member published last.
    info: MemberInfo,
    /// The members of the program this member attached last (slot, index).
    steering: Vec<(u8, u32)>,
    /// Datagrams received while this member waited for its own probes.
    pending: VecDeque<InDatagram>,
    last_liveness_check: Instant,
    reprobe_wanted: bool,
}

/// A member's link of a shared device.
pub struct SharedLink {
    udp: UdpLink,
    forwarder: Forwarder,
    registry: Registry,
    claim: SlotClaim,
    state: Mutex<State>,
    counters: SharedCounters,
    /// Receive calls so far (see `recv_ready`).
    receive_calls: AtomicU32,
    /// A wait saw a socket readable: the next receive looks at the forwarding socket.
    forwarder_due: AtomicBool,
}

impl SharedLink {
    /// Joins the processes sharing `ip:port` (the first one creates the group): binds,
    /// claims a slot, and re-probes so that the group's program steers to this member too.
    pub fn join(ip: IpAddr, port: u16) -> io::Result<SharedLink> {
        SharedLink::join_registry(Registry::for_device(ip, port)?, ip, port)
    }

    /// [`SharedLink::join`] with the registry in a given place (tests).
    pub fn join_registry(registry: Registry, ip: IpAddr, port: u16) -> io::Result<SharedLink> {
        let held = registry.lock_membership(MEMBERSHIP_WAIT)?;
        let claim = registry.claim()?;
        let forwarder = Forwarder::bind(SocketAddr::new(ip, port), claim.slot())?;
        let udp = UdpLink::bind_shared(ip, port)?;
        let link = SharedLink {
            udp,
            forwarder,
            registry,
            state: Mutex::new(State {
                info: MemberInfo {
                    pid: std::process::id(),
                    index: None,
                    generation: 0,
                    qps: 0,
                },
                steering: Vec::new(),
                pending: VecDeque::new(),
                last_liveness_check: Instant::now(),
                reprobe_wanted: false,
            }),
            claim,
            counters: SharedCounters::default(),
            receive_calls: AtomicU32::new(0),
            forwarder_due: AtomicBool::new(true),
        };
        link.claim.publish(link.state.lock().info)?;
        link.reprobe(&held)?;
        Ok(link)
    }

    /// The slot this member holds: its QPNs are `slot << 16 | n`.
    pub fn slot(&self) -> u8 {
        self.claim.slot()
    }

    /// The UDP socket, for tests that attach programs of their own.
    #[cfg(test)]
    pub(crate) fn socket_for_tests(&self) -> &std::net::UdpSocket {
        self.udp.socket()
    }

    /// What port sharing did.
    pub fn counters(&self) -> &SharedCounters {
        &self.counters
    }

    /// Publishes this member's QP count (for `devices -v`).
    pub fn publish_qps(&self, qps: u32) -> io::Result<()> {
        let mut state = self.state.lock();
        state.info.qps = qps;
        self.claim.publish(state.info)
    }

    /// One probe round: every live member learns its index, then the program is built
    /// from what they answered and attached. A member that does not answer in time gets no
    /// rule of its own (its datagrams reach it through forwarding).
    fn reprobe(&self, held: &MembershipLock) -> io::Result<()> {
        self.counters.probe_rounds.fetch_add(1, Ordering::Relaxed);
        let generation = self.registry.next_generation(held)?;
        let members = self.registry.members()?;
        let to = self.udp.local_addr();
        for index in 0..members.len().min(usize::from(u8::MAX)) as u8 {
            self.udp.socket().send_to(&probe(index, generation), to)?;
        }
        let started = Instant::now();
        let answered = loop {
            // Our own probe reaches us only through our own receive.
            self.take_ready_into_pending()?;
            let members = self.registry.members()?;
            let answered: Vec<(u8, u32)> = members
                .iter()
                .filter_map(|&(slot, info)| {
                    let info = info.filter(|i| i.generation == generation)?;
                    Some((slot, info.index?))
                })
                .collect();
            if answered.len() == members.len() || started.elapsed() > PROBE_WAIT {
                break answered;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let program = steering::program(&answered).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "no steering program for members",
            )
        })?;
        super::attach_reuseport_cbpf(self.udp.socket(), &program)?;
        let mut state = self.state.lock();
        state.steering = answered;
        state.reprobe_wanted = false;
        Ok(())
    }

    /// Receives what is waiting on the UDP socket, keeping it for the next receive call
    /// (probes are answered on the way).
    fn take_ready_into_pending(&self) -> io::Result<()> {
        let mut got = Vec::new();
        self.udp.recv_ready(64, &mut |d| got.push(d.to_owned()))?;
        for d in got {
            if let Some(d) = self.route(d.view()) {
                self.state.lock().pending.push_back(d.to_owned());
            }
        }
        Ok(())
    }

    /// What to do with a datagram from the UDP socket: `Some` to deliver it here; probes
    /// and other members' datagrams are dealt with and `None` returned.
    fn route<'d>(&self, d: DatagramView<'d>) -> Option<DatagramView<'d>> {
        if let Some((index, generation)) = self.probe_of(&d) {
            self.counters
                .probes_answered
                .fetch_add(1, Ordering::Relaxed);
            let mut state = self.state.lock();
            state.info.index = Some(index);
            state.info.generation = generation;
            let _ = self.claim.publish(state.info);
            return None;
        }
        let owner = match d.payload.get(5).copied() {
            Some(0) if d.payload.get(6..8) == Some(&[0, 1]) => self.qp1_owner(d.payload),
            other => other,
        };
        match owner {
            // QP0, a slot-0xFF QPN that is no probe, or too short to say: this member's.
            None | Some(0) | Some(PROBE_SLOT) => Some(d),
            Some(slot) if slot == self.slot() => Some(d),
            Some(slot) => {
                match self.forwarder.forward(slot, d) {
                    Ok(true) => {
                        self.counters.forwarded_out.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        self.counters
                            .dropped_for_gone_members
                            .fetch_add(1, Ordering::Relaxed);
                        // Steered to a member that is gone: the program is stale.
                        let mut state = self.state.lock();
                        if state.steering.iter().any(|&(s, _)| s == slot) {
                            state.reprobe_wanted = true;
                        }
                        // Delivered here, where no QP has that number: the device's
                        // pipeline drops it and counts an unknown QP, as hardware does.
                        return Some(d);
                    }
                }
                None
            }
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
        let Some(slot) = self.qp1_owner(&packet.bytes) else {
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
        let sent = matches!(self.forwarder.forward(slot, view), Ok(true));
        if sent && slot != self.slot() {
            self.counters.forwarded_out.fetch_add(1, Ordering::Relaxed);
        }
        Ok(sent)
    }

    /// The slot a QP1 datagram goes to (see `mad_route`): `None` (here) when it names no
    /// other live member.
    fn qp1_owner(&self, payload: &[u8]) -> Option<u8> {
        match qp1_owner(payload) {
            Qp1Owner::Service(sid) => {
                let listener = self.registry.listener(sid).ok().flatten();
                listener.map(|(slot, _)| slot)
            }
            Qp1Owner::Slot(slot) => Some(slot),
            Qp1Owner::Here => None,
        }
    }

    /// Enters this member as the listener on CM service `service_id`, so that requests
    /// for it reaching other members come here. `AddrInUse` if another live member
    /// listens on it.
    pub fn listen(&self, service_id: u64) -> io::Result<()> {
        let held = self.registry.lock_membership(MEMBERSHIP_WAIT)?;
        self.registry
            .listen(&held, service_id, self.slot(), std::process::id())
    }

    /// Removes this member's entry for `service_id` (if it has one).
    pub fn unlisten(&self, service_id: u64) -> io::Result<()> {
        let held = self.registry.lock_membership(MEMBERSHIP_WAIT)?;
        self.registry.unlisten(&held, service_id, self.slot())
    }

    /// The index and round a probe names, if `d` is one of our device's probes.
    fn probe_of(&self, d: &DatagramView<'_>) -> Option<(u32, u64)> {
        let p = d.payload;
        let is_probe = p.len() == PROBE_BYTES
            && p[5] == PROBE_SLOT
            && p[6] == 0
            && d.src.ip() == self.udp.local_addr().ip();
        if !is_probe {
            return None;
        }
        let generation = u64::from_be_bytes(p[12..20].try_into().ok()?);
        Some((u32::from(p[7]), generation))
    }

    /// Every [`LIVENESS_PERIOD`]: whether a member the program steers to is gone; if so (or
    /// a forward found one gone), a re-probe when the membership lock is free.
    fn check_membership(&self) -> io::Result<()> {
        let wanted = {
            let mut state = self.state.lock();
            if state.last_liveness_check.elapsed() >= LIVENESS_PERIOD {
                state.last_liveness_check = Instant::now();
                let gone = state
                    .steering
                    .iter()
                    .any(|&(slot, _)| !self.registry.is_held(slot).unwrap_or(true));
                state.reprobe_wanted |= gone;
            }
            state.reprobe_wanted
        };
        if wanted {
            // Another member busy with a change will probe for everyone.
            if let Ok(held) = self.registry.lock_membership(Duration::ZERO) {
                self.reprobe(&held)?;
            }
        }
        Ok(())
    }
}

/// The probe for `index` of round `generation`.
fn probe(index: u8, generation: u64) -> [u8; PROBE_BYTES] {
    let mut p = [0u8; PROBE_BYTES];
    let qpn = probe_qpn(index).to_be_bytes();
    p[5..8].copy_from_slice(&qpn[1..4]);
    p[12..20].copy_from_slice(&generation.to_be_bytes());
    p
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
                self.state.lock().pending.push_back(d.to_owned());
            })?;
        }
        Ok(self.state.lock().pending.pop_front())
    }

    fn qpn_range(&self) -> Option<std::ops::Range<u32>> {
        let base = u32::from(self.slot()) << 16;
        // 0 and 1 of each slot stay unused, as QP0 and QP1 do in slot 0.
        Some(base + 2..base + 0x1_0000)
    }

    fn shared_port(&self) -> Option<&SharedLink> {
        Some(self)
    }

    fn pollable(&self) -> bool {
        true
    }

    fn poll_before_sleep(&self) -> Duration {
        self.udp.poll_before_sleep()
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        self.check_membership()?;
        if !self.state.lock().pending.is_empty() {
            return Ok(true);
        }
        let fds = [
            self.udp.socket().as_raw_fd(),
            self.forwarder.as_socket().as_raw_fd(),
        ];
        let ready = batched_io::wait_any_readable(&fds, timeout.min(LIVENESS_PERIOD))?;
        // The next receive looks at the forwarding socket only if it was one of them: a
        // receive that finds nothing there costs a blocked waiter a system call per wake.
        if ready & 0b10 != 0 {
            self.forwarder_due.store(true, Ordering::Relaxed);
        }
        Ok(ready != 0)
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        // A polling application calls this millions of times a second, mostly to find
        // nothing: the liveness check (a clock read) and the forwarding socket (a system
        // call) are looked at every few calls, and whenever a wait said something came.
        let call = self.receive_calls.fetch_add(1, Ordering::Relaxed);
        if call.is_multiple_of(MEMBERSHIP_CHECK_EVERY) {
            self.check_membership()?;
        }
        let forwarder_due = self.forwarder_due.swap(false, Ordering::Relaxed)
            || call.is_multiple_of(FORWARDER_CHECK_EVERY);
        let mut total = 0;
        while total < max {
            let Some(d) = self.state.lock().pending.pop_front() else {
                break;
            };
            sink(d.view());
            total += 1;
        }
        while forwarder_due && total < max.min(FORWARDED_PER_CALL) {
            match self.forwarder.try_recv() {
                Ok(Some(d)) => {
                    self.counters.forwarded_in.fetch_add(1, Ordering::Relaxed);
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
