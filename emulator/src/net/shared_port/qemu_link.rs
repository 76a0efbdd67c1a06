//! A qemu socket link (the rxe lab's device: whole Ethernet frames to and from qemu's
//! socket netdev over one UDP socket on 127.0.0.1, see `net::qemu_socket`) shared by
//! several processes: each binds the frames socket with `SO_REUSEPORT` as the face of its
//! [`Member`], and the frame steering program hands each frame to the process owning the
//! QPN in its BTH.
//!
//! Why it differs from the UDP face:
//! - the socket is **not connected** to qemu: once a member of a group is connected, the
//!   kernel picks the socket by address score and ignores the steering program (measured,
//!   see docs/shared-devices.md); frames not from qemu's address are dropped here instead;
//! - every member runs its own Ethernet station, with the same MAC and IP: the guest sees
//!   one station. ARP and other non-IPv4 frames fall back to the kernel's hash, which
//!   hands all of them to one member (qemu always sends from one port), so the member that
//!   gets one also passes it to every other member: each station learns the guest's MAC
//!   and answers its requests (the guest then gets one identical reply per member);
//! - all members send into one qemu socket buffer, so each paces at the configured rate
//!   divided by the members of the last probe round.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::super::batched_io;
use super::super::ethernet::EthernetStation;
use super::super::pacer::Pacer;
use super::super::qemu_socket::{
    pace_rate, send_paced, MAX_FRAME_BYTES, PACE_BURST_BYTES, RECV_BUFFER_BYTES,
};
use super::super::{DatagramView, InDatagram, Link, OutPacket};
use super::member::{Member, ProbeFace, Route, LIVENESS_PERIOD};
use super::probe::Probe;
use super::registry::Registry;
use super::steering::{BpfInsn, Framing};
use super::unclaimed;

/// Frames (or forwarded datagrams) taken per look at a socket, so that one busy socket
/// does not starve the other.
const TAKEN_PER_LOOK: usize = 64;

/// What the frames face did beside what [`Member`] counts.
#[derive(Debug, Default)]
pub struct FramesCounters {
    /// Frames that did not come from qemu's address (nor were our probes): dropped.
    pub from_strangers: AtomicU64,
    /// Non-IPv4 frames (ARP) this member passed on to the others.
    pub passed_to_all: AtomicU64,
}

/// A member's link of a shared qemu socket device.
pub struct SharedQemuLink {
    socket: UdpSocket,
    /// The address every member binds (qemu's `udp=`); our probes come from it.
    frames_local: SocketAddr,
    /// qemu's address (its `localaddr=`): the only sender of frames.
    frames_peer: SocketAddr,
    ip: Ipv4Addr,
    local: SocketAddr,
    station: Mutex<EthernetStation>,
    member: Member,
    /// Datagrams received and not yet handed out (probe rounds, several per frame look).
    pending: Mutex<VecDeque<InDatagram>>,
    /// Receive buffer, reused: only the device's engine thread receives.
    recv_buf: Mutex<Vec<u8>>,
    pacer: Mutex<Pacer>,
    /// The configured rate, before sharing it.
    rate_bytes_per_s: u64,
    counters: FramesCounters,
}

impl SharedQemuLink {
    /// Joins the processes sharing the qemu socket link whose frames socket is
    /// `frames_local` (qemu at `frames_peer`), standing on the segment as `ip`:`udp_port`
    /// with `mac` like every member. `InvalidInput` unless `ip` is IPv4.
    pub fn join(
        frames_local: SocketAddr,
        frames_peer: SocketAddr,
        mac: [u8; 6],
        ip: IpAddr,
        udp_port: u16,
    ) -> io::Result<SharedQemuLink> {
        let registry = Registry::for_qemu_frames(frames_local)?;
        SharedQemuLink::join_registry(registry, frames_local, frames_peer, mac, ip, udp_port)
    }

    /// [`SharedQemuLink::join`] with the registry in a given place (tests).
    pub fn join_registry(
        registry: Registry,
        frames_local: SocketAddr,
        frames_peer: SocketAddr,
        mac: [u8; 6],
        ip: IpAddr,
        udp_port: u16,
    ) -> io::Result<SharedQemuLink> {
        let IpAddr::V4(ip) = ip else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a qemu socket link carries IPv4 only",
            ));
        };
        // The forwarding sockets are named after the frames address, as the registry is.
        let (member, held) = Member::claim(registry, frames_local)?;
        let socket = bind_frames_socket(frames_local)?;
        let station = EthernetStation::new(mac, ip, udp_port);
        let rate_bytes_per_s = pace_rate();
        let link = SharedQemuLink {
            socket,
            frames_local,
            frames_peer,
            ip,
            local: station.local_addr(),
            station: Mutex::new(station),
            member,
            pending: Mutex::new(VecDeque::new()),
            recv_buf: Mutex::new(vec![0u8; MAX_FRAME_BYTES]),
            pacer: Mutex::new(Pacer::new(rate_bytes_per_s, PACE_BURST_BYTES)),
            rate_bytes_per_s,
            counters: FramesCounters::default(),
        };
        let members = link.member.start(&held, &link)?;
        link.share_pacing(members.len());
        Ok(link)
    }

    /// What the frames face did.
    pub fn frames_counters(&self) -> &FramesCounters {
        &self.counters
    }

    /// The rate this member paces its frames to now (bytes per second, 0: unpaced).
    pub fn pace_rate_bytes_per_s(&self) -> u64 {
        self.pacer.lock().rate_bytes_per_s()
    }

    /// The frames socket, for tests that attach programs of their own.
    #[cfg(test)]
    pub(crate) fn socket_for_tests(&self) -> &UdpSocket {
        &self.socket
    }

    /// Paces at the configured rate (and burst) divided among `members`.
    fn share_pacing(&self, members: usize) {
        let members = members.max(1) as u64;
        self.pacer.lock().set_rate(
            self.rate_bytes_per_s / members,
            (PACE_BURST_BYTES / members).max(MAX_FRAME_BYTES as u64 / 16),
        );
    }

    fn send_frames(&self, frames: &[Vec<u8>]) -> io::Result<()> {
        send_paced(&self.socket, Some(self.frames_peer), &self.pacer, frames)
    }

    /// Takes in one frame from the frames socket.
    fn take_frame(&self, frame: &[u8], src: SocketAddr) -> io::Result<()> {
        // Every member binds `frames_local`, so a member's probe comes from it.
        if src == self.frames_local {
            if let Some(probe) = Probe::parse_frame(frame) {
                self.member.answer_probe(probe);
                self.share_pacing(usize::from(probe.members));
                return Ok(());
            }
        }
        if src != self.frames_peer {
            self.counters.from_strangers.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if frame.get(12..14) != Some(&[0x08, 0x00]) {
            // Forwarded "from qemu's address": how the receiver tells a frame from a
            // datagram, which comes from a RoCE peer's address.
            let view = DatagramView {
                src: self.frames_peer,
                dst: self.frames_local,
                payload: frame,
                ipv4_identification: None,
            };
            if self.member.forward_to_all(view) > 0 {
                self.counters.passed_to_all.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.station_receive(frame)
    }

    /// The station's part of a frame: replies out, a datagram routed.
    fn station_receive(&self, frame: &[u8]) -> io::Result<()> {
        let outcome = self.station.lock().receive(frame);
        self.send_frames(&outcome.replies)?;
        if let Some(d) = outcome.datagram {
            if self.member.route(d.view()) == Route::Here {
                self.pending.lock().push_back(d);
            }
        }
        Ok(())
    }

    /// Takes what other members passed on: datagrams for this member, and frames every
    /// member's station sees.
    fn take_forwarded(&self) -> io::Result<()> {
        for _ in 0..TAKEN_PER_LOOK {
            match self.member.forwarder().try_recv() {
                Ok(Some(mut d)) => {
                    let counters = self.member.counters();
                    counters.forwarded_in.fetch_add(1, Ordering::Relaxed);
                    if d.src == self.frames_peer {
                        self.station_receive(&d.payload)?;
                    } else {
                        // The forwarder names the frames address; the datagram was for us.
                        d.dst = self.local;
                        self.pending.lock().push_back(d);
                    }
                }
                Ok(None) => break,
                // A malformed forward: dropped, the next one may be fine.
                Err(e) if e.kind() == io::ErrorKind::InvalidData => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn check_membership(&self) -> io::Result<()> {
        if let Some(members) = self.member.check_membership(self)? {
            self.share_pacing(members.len());
        }
        Ok(())
    }
}

/// The frames socket of a member: `SO_REUSEPORT`, not connected, non-blocking.
fn bind_frames_socket(frames_local: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(frames_local),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    socket.set_reuse_port(true)?;
    // Best effort: without privilege the kernel caps it at net.core.rmem_max.
    if super::super::socket_options::set_recv_buffer_force(&socket, RECV_BUFFER_BYTES).is_err() {
        let _ = socket.set_recv_buffer_size(RECV_BUFFER_BYTES);
    }
    socket.bind(&SockAddr::from(frames_local))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

impl ProbeFace for SharedQemuLink {
    fn framing(&self) -> Framing {
        Framing::EthernetFrame
    }

    fn send_probe(&self, probe: Probe) -> io::Result<()> {
        let frame = probe.to_frame(self.ip, self.local.port());
        self.socket.send_to(&frame, self.frames_local).map(drop)
    }

    fn take_ready(&self) -> io::Result<usize> {
        let mut buf = self.recv_buf.lock();
        let mut taken = 0;
        for _ in 0..TAKEN_PER_LOOK {
            let (len, src) = match self.socket.recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP error of an earlier send (qemu not there yet): nothing to read.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.take_frame(&buf[..len], src)?;
            taken += 1;
        }
        Ok(taken)
    }

    fn attach(&self, program: &[BpfInsn]) -> io::Result<()> {
        super::attach_reuseport_cbpf(&self.socket, program)
    }

    fn detach(&self) -> io::Result<()> {
        super::detach_reuseport_bpf(&self.socket)
    }
}

impl Link for SharedQemuLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A group's frames arrive with the others: the station takes them in.
    fn carries_multicast(&self) -> bool {
        true
    }

    fn join_group(
        &self,
        _group: std::net::IpAddr,
    ) -> io::Result<Option<crate::net::multicast::GroupSocket>> {
        Ok(None)
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.station.lock().finalize(packet)
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        let frames = self.station.lock().frame(packet, Instant::now())?;
        self.send_frames(&frames)
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_membership()?;
            if let Some(d) = self.pending.lock().pop_front() {
                return Ok(Some(d));
            }
            self.take_forwarded()?;
            self.take_ready()?;
            let released = self.member.release_held();
            self.pending.lock().extend(released);
            if let Some(d) = self.pending.lock().pop_front() {
                return Ok(Some(d));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let fds = [
                self.socket.as_raw_fd(),
                self.member.forwarder().as_socket().as_raw_fd(),
            ];
            // A request waiting for its listener is looked at again soon (`unclaimed`).
            let limit = if self.member.unclaimed_is_empty() {
                LIVENESS_PERIOD
            } else {
                unclaimed::RECHECK
            };
            batched_io::wait_any_readable(&fds, left.min(limit))?;
        }
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
}

impl Drop for SharedQemuLink {
    fn drop(&mut self) {
        // The frames socket closes right after: see `Member::hand_over`.
        if let Err(e) = self.member.hand_over(self) {
            tracing::debug!(error = %e, "handing over the shared frames socket failed");
        }
    }
}
