//! One process's membership of a shared device, whatever its datagrams look like: its slot
//! in the registry, its forwarding socket, the probe rounds that tell each member its index
//! in the port group and build the steering program, the liveness checks that start a new
//! round when a member has gone, and where each received datagram belongs (this member, or
//! another one it is forwarded to).
//!
//! The sockets are the faces' (`link` for a UDP port, `qemu_link` for a qemu socket link's
//! frames socket): a probe round talks to them through [`ProbeFace`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::super::{DatagramView, InDatagram};
use super::forward::Forwarder;
use super::mad_route::{qp1_owner, Qp1Owner};
use super::probe::Probe;
use super::registry::{MemberInfo, MembershipLock, Registry, SlotClaim};
use super::round_plan::{has_left, last_round, plan, Round};
use super::steering::{self, BpfInsn, Framing, PROBE_SLOT};
use super::unclaimed::{Release, Unclaimed};

/// How often the members a program steers to are checked for being alive.
pub const LIVENESS_PERIOD: Duration = Duration::from_millis(250);
/// How long a re-probe waits for every member to answer.
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// How long a hand-over's round waits: a process that is ending must not wait long for
/// others that are ending too (a member that does not answer gets no rule, and its
/// datagrams are forwarded).
const HAND_OVER_PROBE_WAIT: Duration = Duration::from_millis(100);
/// How long a join waits for other members' membership changes to end: many processes
/// opening a device at once join one after the other, each probe round waiting for every
/// member's engine thread to be scheduled on a loaded machine.
pub const MEMBERSHIP_WAIT: Duration = Duration::from_secs(30);
/// How often a member that answered another's hand-over looks whether it is gone yet.
const LEAVER_LOOK: Duration = Duration::from_millis(1);
/// How long a hand-over waits for another member's membership change to end.
const HAND_OVER_WAIT: Duration = Duration::from_millis(500);
/// Most receive calls a hand-over empties its socket with (each takes what is queued, up to
/// a batch): bounds the work of a member leaving while a peer floods it.
const HAND_OVER_DRAINS: usize = 64;

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
    /// Probe rounds this member completed (counted once their program is attached).
    pub probe_rounds: AtomicU64,
    /// Probes this member answered.
    pub probes_answered: AtomicU64,
    /// Connection requests held for a listener not yet in the listen table.
    pub requests_held: AtomicU64,
}

/// What a probe round needs of the member's socket.
pub trait ProbeFace {
    /// What the group's sockets receive.
    fn framing(&self) -> Framing;
    /// Sends `probe` into the port group, in the face's framing.
    fn send_probe(&self, probe: Probe) -> io::Result<()>;
    /// Receives what is waiting on the socket, keeping datagrams for the next receive call
    /// and answering probes (with [`Member::answer_probe`]) on the way. Returns how many
    /// datagrams it received (0: the socket was empty).
    fn take_ready(&self) -> io::Result<usize>;
    /// Attaches `program` as the group's steering program.
    fn attach(&self, program: &[BpfInsn]) -> io::Result<()>;
    /// Detaches the group's steering program, if any.
    fn detach(&self) -> io::Result<()>;
}

/// Where a received datagram belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this member's receive pipeline.
    Here,
    /// Passed on to the member it names.
    Forwarded,
    /// A connection request kept until its listener is known (see `unclaimed.rs`).
    Held,
}

struct State {
    /// What this member published last. Once `info.left` is set (by [`Member::hand_over`])
    /// this member never probes again, which would steer to it once more.
    info: MemberInfo,
    /// The members (slot, index) of the newest round this member knows the map of: its
    /// own last round's, or another member's newer one read from the registry (see
    /// `check_membership`). The liveness checks watch these.
    steering: Vec<(u8, u32)>,
    /// The round `steering` is the map of.
    steering_generation: u64,
    /// How many members the newest round this member answered probed.
    newest_round_size: usize,
    /// The last round attached a program (it detached it when this member was alone).
    steered: bool,
    last_liveness_check: Instant,
    reprobe_wanted: bool,
    /// Members that handed over and still hold their slots (slot, the round that told
    /// this member so: their hand-over, or a round of its own that found them): watched
    /// every [`LEAVER_LOOK`] until one is gone, then a re-probe steers directly again to
    /// the member its close moved (meanwhile it takes the hash or is forwarded to, see
    /// [`plan`]).
    leavers: Vec<(u8, u64)>,
    /// When the leavers were last looked at.
    leavers_looked: Instant,
}

/// One member of a shared device (see the module docs).
pub struct Member {
    forwarder: Forwarder,
    registry: Registry,
    claim: SlotClaim,
    state: Mutex<State>,
    counters: SharedCounters,
    unclaimed: Unclaimed,
}

impl Member {
    /// Claims a slot in `registry` and binds the slot's forwarding socket, named after
    /// `device` (the address the group's sockets are bound to). Returns the membership lock,
    /// held until the face has bound its socket and called [`Member::start`].
    pub fn claim(registry: Registry, device: SocketAddr) -> io::Result<(Member, MembershipLock)> {
        let held = registry.lock_membership(MEMBERSHIP_WAIT)?;
        let claim = registry.claim()?;
        let forwarder = Forwarder::bind(device, claim.slot())?;
        let member = Member {
            forwarder,
            registry,
            state: Mutex::new(State {
                info: MemberInfo {
                    pid: std::process::id(),
                    index: None,
                    generation: 0,
                    qps: 0,
                    left: false,
                },
                steering: Vec::new(),
                steering_generation: 0,
                newest_round_size: 0,
                steered: false,
                last_liveness_check: Instant::now(),
                reprobe_wanted: false,
                leavers: Vec::new(),
                leavers_looked: Instant::now(),
            }),
            claim,
            counters: SharedCounters::default(),
            unclaimed: Unclaimed::default(),
        };
        Ok((member, held))
    }

    /// Publishes this member and runs the probe round that steers to it too. Returns the
    /// members the round found (slot, index).
    pub fn start(&self, held: &MembershipLock, face: &dyn ProbeFace) -> io::Result<Vec<(u8, u32)>> {
        self.claim.publish(self.state.lock().info)?;
        Ok(self.reprobe(held, face, None, PROBE_WAIT)?.members)
    }

    /// The slot this member holds: its QPNs are `slot << 16 | n`.
    pub fn slot(&self) -> u8 {
        self.claim.slot()
    }

    /// What port sharing did.
    pub fn counters(&self) -> &SharedCounters {
        &self.counters
    }

    /// The forwarding socket (to wait on beside the face's socket, and to read).
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }

    /// Publishes this member's QP count (for `devices -v`).
    pub fn publish_qps(&self, qps: u32) -> io::Result<()> {
        let mut state = self.state.lock();
        state.info.qps = qps;
        self.claim.publish(state.info)
    }

    /// The QP numbers this member hands out: those of its slot.
    pub fn qpn_range(&self) -> std::ops::Range<u32> {
        let base = u32::from(self.slot()) << 16;
        // 0 and 1 of each slot stay unused, as QP0 and QP1 do in slot 0.
        base + 2..base + 0x1_0000
    }

    /// One probe round: every live member learns its index, then the program is built
    /// from what they answered and attached. A member that does not answer in time gets no
    /// rule of its own (its datagrams reach it through forwarding). Returns the members
    /// that answered (slot, index), with the group's size as the round saw it.
    ///
    /// A member alone in the group detaches the program instead: the kernel then hands it
    /// every datagram without running one, which it otherwise runs for each datagram the
    /// port receives (0.10 us of each half round trip of a raw loopback ping-pong, `cargo
    /// run --release -p softverbs-tools --example socket_setup`; 0.06 us of `softverbs perf
    /// send_lat`'s). So a round of a growing group first puts back the last round's rules
    /// with the probe rule: without a program the kernel would hash every probe to the same
    /// socket.
    fn reprobe(
        &self,
        held: &MembershipLock,
        face: &dyn ProbeFace,
        leaving: Option<u8>,
        wait: Duration,
    ) -> io::Result<Round> {
        let members = self.registry.members()?;
        let staying: Vec<_> = members.iter().copied().filter(|m| !has_left(m)).collect();
        if members.len() > 1 {
            let closing = members.len() - staying.len();
            let (rules, fallback) = plan(&last_round(&staying), members.len(), closing);
            face.attach(&steering_program(face, &rules, fallback)?)?;
        }
        let generation = self.registry.next_generation(held)?;
        let probed = members.len().min(usize::from(u8::MAX));
        for index in 0..probed as u8 {
            face.send_probe(Probe {
                index,
                generation,
                members: probed as u16,
                leaving,
            })?;
        }
        let started = Instant::now();
        let answered = loop {
            // Our own probe reaches us only through our own receive.
            face.take_ready()?;
            let members = self.registry.members()?;
            // A member that handed over may be past answering (its process ending): its
            // socket is probed, its answer not awaited.
            let staying: Vec<_> = members.iter().filter(|m| !has_left(m)).collect();
            let answered: Vec<(u8, u32)> = staying
                .iter()
                .filter_map(|&&(slot, info)| {
                    let info = info.filter(|i| i.generation == generation)?;
                    Some((slot, info.index?))
                })
                .collect();
            if answered.len() == staying.len() || started.elapsed() > wait {
                break (answered, members.len(), staying.len());
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let (answered, live, staying) = answered;
        let round = Round::settled(answered, probed, staying);
        let alone = live == 1 && matches!(round.members[..], [(slot, _)] if slot == self.slot());
        // A kernel without SO_DETACH_REUSEPORT_BPF (before 5.8) keeps a program.
        let steered = !(alone && face.detach().is_ok());
        if steered {
            let (rules, fallback) = plan(&round.members, round.sockets, round.closing);
            face.attach(&steering_program(face, &rules, fallback)?)?;
        }
        let mut state = self.state.lock();
        state.steering = round.members.clone();
        state.steering_generation = generation;
        state.steered = steered;
        // A socket that closed during the round may have moved the last member after it
        // answered: the program sends that member through the fallback until a round
        // that sees the group as it is now.
        state.reprobe_wanted = live < probed;
        // Members still closing: this round's rules skip some; watch for them to go.
        for &(slot, _) in members.iter().filter(|m| has_left(m)) {
            if slot != self.slot() && !state.leavers.iter().any(|&(s, _)| s == slot) {
                state.leavers.push((slot, generation));
            }
        }
        // Counted once the program is in place: whoever waits for a round (the tests) then
        // sees its steering, not the interim one of its probes.
        self.counters.probe_rounds.fetch_add(1, Ordering::Relaxed);
        Ok(round)
    }

    /// Before this member's socket closes (its device closed, or its process exiting, see
    /// `engine::exit_hook`): under the registry's lock, a probe round finds every member's
    /// index as it is now, then a program is attached that steers nothing more to this
    /// member: the others stay where they are, and what names no member (QP1, a gone slot)
    /// goes to one of them rather than to the kernel's hash; then what was already queued
    /// on the socket is received, another member's passed on to it. Without this, whatever
    /// the kernel put in a socket that was closing was lost: datagrams hashed to it (the
    /// fallback of a program made stale by an earlier departure), which RC only recovered
    /// seconds later by retransmission. The round's probes name this member, and it
    /// publishes `left` at the end, so that the others watch for it to be gone and re-probe
    /// then (`State::leavers`), and rounds meanwhile neither wait for it nor steer to it:
    /// after the close the kernel moves the group's last socket into this one's index, and
    /// until that re-probe that member's datagrams take the hash. Returns whether a program
    /// was attached (not when this member is alone, or has handed over already).
    pub fn hand_over(&self, face: &dyn ProbeFace) -> io::Result<bool> {
        {
            let state = self.state.lock();
            // A forked child's copy of its parent's membership is not its own to end.
            if state.info.left || state.info.pid != std::process::id() {
                return Ok(false);
            }
        }
        let held = self.registry.lock_membership(HAND_OVER_WAIT)?;
        // The published indices may be stale: a member that left moved the last one.
        let round = self.reprobe(&held, face, Some(self.slot()), HAND_OVER_PROBE_WAIT)?;
        // Published below, once nothing more is steered here.
        self.state.lock().info.left = true;
        let others: Vec<(u8, u32)> = round
            .members
            .iter()
            .copied()
            .filter(|&(slot, _)| slot != self.slot())
            .collect();
        if others.is_empty() {
            return Ok(false);
        }
        let (rules, fallback) = plan(&others, round.sockets, round.closing + 1);
        face.attach(&steering_program(face, &rules, fallback)?)?;
        for _ in 0..HAND_OVER_DRAINS {
            if face.take_ready()? == 0 {
                break;
            }
        }
        // Rounds until the socket closes probe it but neither wait for it nor steer to it.
        let state = self.state.lock();
        self.claim.publish(state.info)?;
        Ok(true)
    }

    /// Whether the group's steering program is attached (false while this member is alone
    /// in the group, see [`Member::reprobe`]).
    pub fn steered(&self) -> bool {
        self.state.lock().steered
    }

    /// Takes in a probe steered to this member: publishes the index it names.
    pub fn answer_probe(&self, probe: Probe) {
        self.counters
            .probes_answered
            .fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock();
        state.info.index = Some(u32::from(probe.index));
        state.info.generation = probe.generation;
        state.newest_round_size = usize::from(probe.members);
        if let Some(slot) = probe.leaving.filter(|&slot| slot != self.claim.slot()) {
            if !state.leavers.iter().any(|&(s, _)| s == slot) {
                state.leavers.push((slot, probe.generation));
            }
        }
        let _ = self.claim.publish(state.info);
    }

    /// Where datagram `d` (no probe) belongs, by the slot in its destination QPN's top byte
    /// (QP1 by `mad_route`); a datagram for another live member is forwarded to it here.
    pub fn route(&self, d: DatagramView<'_>) -> Route {
        let owner = match d.payload.get(5).copied() {
            Some(0) if d.payload.get(6..8) == Some(&[0, 1]) => match qp1_owner(d.payload) {
                Qp1Owner::Service(sid) => match self.listener(sid) {
                    Some(slot) => Some(slot),
                    None if self.unclaimed.hold(sid, d) => {
                        self.counters.requests_held.fetch_add(1, Ordering::Relaxed);
                        return Route::Held;
                    }
                    None => None,
                },
                Qp1Owner::Slot(slot) => Some(slot),
                Qp1Owner::Here => None,
            },
            other => other,
        };
        match owner {
            // QP0, a slot-0xFF QPN that is no probe, or too short to say: this member's.
            None | Some(0) | Some(PROBE_SLOT) => Route::Here,
            Some(slot) if slot == self.slot() => Route::Here,
            Some(slot) => {
                if matches!(self.forwarder.forward(slot, d), Ok(true)) {
                    self.counters.forwarded_out.fetch_add(1, Ordering::Relaxed);
                    return Route::Forwarded;
                }
                self.counters
                    .dropped_for_gone_members
                    .fetch_add(1, Ordering::Relaxed);
                // Steered to a member that is gone: the program is stale.
                let mut state = self.state.lock();
                if state.steering.iter().any(|&(s, _)| s == slot) {
                    state.reprobe_wanted = true;
                }
                // Delivered here, where no QP has that number: the device's pipeline drops
                // it and counts an unknown QP, as hardware does.
                Route::Here
            }
        }
    }

    /// The slot of the member listening on CM service `sid`, if the listen table names one.
    fn listener(&self, sid: u64) -> Option<u8> {
        self.registry
            .listener(sid)
            .ok()
            .flatten()
            .map(|(slot, _)| slot)
    }

    /// True when no request waits for its listener (one atomic load).
    pub fn unclaimed_is_empty(&self) -> bool {
        self.unclaimed.is_empty()
    }

    /// Requests held for a listener (see `unclaimed.rs`) whose listener is now known, or
    /// whose hold ended: passed on to it, or returned to be delivered here.
    pub fn release_held(&self) -> Vec<InDatagram> {
        if self.unclaimed.is_empty() {
            return Vec::new();
        }
        let mut here = Vec::new();
        for r in self
            .unclaimed
            .release(Instant::now(), self.slot(), |sid| self.listener(sid))
        {
            match r {
                Release::Here(d) => here.push(d),
                Release::To(slot, d) => {
                    if !self.forward(slot, d.view()) {
                        here.push(d);
                    }
                }
            }
        }
        here
    }

    /// Passes `d` on to member `slot`; true if it went (counted as forwarded when `slot`
    /// is another member's).
    pub fn forward(&self, slot: u8, d: DatagramView<'_>) -> bool {
        let sent = matches!(self.forwarder.forward(slot, d), Ok(true));
        if sent && slot != self.slot() {
            self.counters.forwarded_out.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Passes `d` on to every other live member (frames every member's station must see:
    /// ARP); returns how many it reached. Reads the registry, so only for rare datagrams.
    pub fn forward_to_all(&self, d: DatagramView<'_>) -> usize {
        let Ok(members) = self.registry.members() else {
            return 0;
        };
        members
            .iter()
            .filter(|&&(slot, _)| slot != self.slot())
            .filter(|&&(slot, _)| self.forward(slot, d))
            .count()
    }

    /// The slot a QP1 datagram goes to (see `mad_route`): `None` (here) when it names no
    /// other live member.
    pub fn qp1_owner(&self, payload: &[u8]) -> Option<u8> {
        match qp1_owner(payload) {
            Qp1Owner::Service(sid) => self.listener(sid),
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

    /// Every [`LIVENESS_PERIOD`]: whether a member the program steers to is gone; if so (or
    /// a forward found one gone), a re-probe when the membership lock is free. Returns the
    /// members of the new program when there was a round.
    ///
    /// A round another member ran (a join, a hand-over) is learnt from the registry at the
    /// next check: fewer members alive than it probed means one has gone since; otherwise
    /// its map is the one watched from then on. Without this, a member whose last own round
    /// was older never noticed the departure of one that joined after it.
    pub fn check_membership(&self, face: &dyn ProbeFace) -> io::Result<Option<Vec<(u8, u32)>>> {
        let (wanted, newer_round) = {
            let mut state = self.state.lock();
            if state.info.left {
                return Ok(None);
            }
            let mut newer_round = None;
            if !state.leavers.is_empty() && state.leavers_looked.elapsed() >= LEAVER_LOOK {
                state.leavers_looked = Instant::now();
                let newest = state.info.generation;
                let mut gone = false;
                state.leavers.retain(|&(slot, round)| {
                    if round < newest {
                        // A round since (another member's) took it into account: that
                        // member watches it now.
                        return false;
                    }
                    let held = self.registry.is_held(slot).unwrap_or(true);
                    gone |= !held;
                    held
                });
                state.reprobe_wanted |= gone;
            }
            if state.last_liveness_check.elapsed() >= LIVENESS_PERIOD {
                state.last_liveness_check = Instant::now();
                let gone = state
                    .steering
                    .iter()
                    .any(|&(slot, _)| !self.registry.is_held(slot).unwrap_or(true));
                state.reprobe_wanted |= gone;
                if state.info.generation > state.steering_generation {
                    newer_round = Some((state.info.generation, state.newest_round_size));
                }
            }
            (state.reprobe_wanted, newer_round)
        };
        let mut wanted = wanted;
        if let (false, Some((generation, probed))) = (wanted, newer_round) {
            let live = self.registry.members()?;
            let mut state = self.state.lock();
            if live.len() < probed {
                state.reprobe_wanted = true;
                wanted = true;
            } else {
                state.steering = last_round(&live);
                state.steering_generation = generation;
            }
        }
        if wanted {
            // Another member busy with a change will probe for everyone.
            if let Ok(held) = self.registry.lock_membership(Duration::ZERO) {
                return Ok(Some(self.reprobe(&held, face, None, PROBE_WAIT)?.members));
            }
        }
        Ok(None)
    }
}

/// The steering program with `rules` (slot, index) on `face`'s framing, what names no
/// rule going to index `fallback`.
fn steering_program(
    face: &dyn ProbeFace,
    rules: &[(u8, u32)],
    fallback: u32,
) -> io::Result<Vec<BpfInsn>> {
    steering::program_falling_back(face.framing(), rules, fallback).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "no steering program for members",
        )
    })
}
