//! Seeded fault injection: the fault model ([`FaultConfig`], per mille chances of loss incl.
//! bursts, duplication, reordering and corruption), its PRNG ([`SimRng`]), and
//! [`FaultyLink`], which applies the model to what a real [`Link`] sends.
//!
//! The deterministic simulator (`crate::sim`) applies the same model to its virtual wire with
//! delays on a virtual clock; here there is no clock (net/ never reads one), so reordering is
//! counted in sends: a packet held back goes out after the next few sends, or at the latest
//! when the device next receives, so nothing is held for long.
//!
//! Faults apply to the outgoing direction only, like netem on an interface's egress: a device
//! with faults degrades its own transmissions; give both devices faults to degrade both ways.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::OutPacket;
use super::{InDatagram, Link};

/// A small, fast, seedable PRNG (xorshift64*), so fault injection needs no dependency and a
/// seed means the same thing on every platform.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        (self.next_u64() % 1000) < per_mille as u64
    }

    /// A value in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// What a faulty network does to each packet of one direction. Probabilities are per mille.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Independent loss.
    pub loss_per_mille: u32,
    /// Chance that a loss starts a burst ...
    pub burst_per_mille: u32,
    /// ... of up to this many further packets lost.
    pub burst_max: u32,
    /// Duplication (the copy arrives later).
    pub dup_per_mille: u32,
    /// Chance that a packet is held back behind later ones (by extra delay in the simulator,
    /// by a number of later sends in [`FaultyLink`]).
    pub reorder_per_mille: u32,
    /// Corruption of one random bit, after the ICRC was written (the receiver's ICRC check
    /// must catch it).
    pub corrupt_per_mille: u32,
}

impl FaultConfig {
    /// No faults.
    pub fn none() -> Self {
        Self::default()
    }

    /// The reliability bar of DESIGN.md: 20% loss with bursts, 20% duplication, reordering,
    /// 2% corruption.
    pub fn harsh() -> Self {
        FaultConfig {
            loss_per_mille: 200,
            burst_per_mille: 100,
            burst_max: 4,
            dup_per_mille: 200,
            reorder_per_mille: 100,
            corrupt_per_mille: 20,
        }
    }
}

/// What [`FaultyLink`] did, counted since it was created; shared with whoever holds the
/// [`FaultSetting`] so tests can check that faults really happened.
#[derive(Debug, Default)]
pub struct FaultCounters {
    /// Datagrams handed to the underlying link (originals, duplicates and released ones).
    pub sent: AtomicU64,
    /// Packets dropped (independently or in a burst).
    pub dropped: AtomicU64,
    /// Packets sent twice.
    pub duplicated: AtomicU64,
    /// Packets held back behind later ones.
    pub reordered: AtomicU64,
    /// Datagrams sent with one bit flipped (a duplicate of a corrupted packet counts again:
    /// each is one ICRC error at the receiver).
    pub corrupted: AtomicU64,
}

/// A copy of [`FaultCounters`] at one moment, for comparisons and messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// See [`FaultCounters::sent`].
    pub sent: u64,
    /// See [`FaultCounters::dropped`].
    pub dropped: u64,
    /// See [`FaultCounters::duplicated`].
    pub duplicated: u64,
    /// See [`FaultCounters::reordered`].
    pub reordered: u64,
    /// See [`FaultCounters::corrupted`].
    pub corrupted: u64,
}

impl FaultCounters {
    /// The current values.
    pub fn snapshot(&self) -> FaultCounts {
        FaultCounts {
            sent: self.sent.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            duplicated: self.duplicated.load(Ordering::Relaxed),
            reordered: self.reordered.load(Ordering::Relaxed),
            corrupted: self.corrupted.load(Ordering::Relaxed),
        }
    }
}

/// Fault injection as a setting of a device: the model, its seed, and the counters the
/// device's [`FaultyLink`] will update. Clones share the counters, so keep a clone (or the
/// `Arc`) to read them once the device is open.
#[derive(Debug, Clone)]
pub struct FaultSetting {
    /// What to do to the device's outgoing packets.
    pub config: FaultConfig,
    /// Seed of the fault PRNG: the same seed and the same sequence of sends give the same
    /// faults.
    pub seed: u64,
    /// What the link did.
    pub counters: Arc<FaultCounters>,
}

/// Why a fault specification (see [`FaultSetting::parse`]) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault specification {spec:?}: {reason}")]
pub struct FaultSpecError {
    /// The whole specification.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The keys of a fault specification, for error messages.
const SPEC_KEYS: &str = "loss, burst, burst_max, dup, reorder, corrupt, seed";

impl FaultSetting {
    /// `config` with `seed` and fresh counters.
    pub fn new(config: FaultConfig, seed: u64) -> FaultSetting {
        FaultSetting {
            config,
            seed,
            counters: Arc::default(),
        }
    }

    /// Parses `key=value` pairs separated by commas, e.g.
    /// `loss=100,burst=50,burst_max=4,dup=50,reorder=50,corrupt=10,seed=7`. Chances
    /// (`loss`, `burst`, `dup`, `reorder`, `corrupt`) are per mille, 0 to 1000; `burst_max`
    /// is a packet count; `seed` is decimal or `0x` hex. Missing keys are 0; each key may
    /// appear once.
    pub fn parse(spec: &str) -> Result<FaultSetting, FaultSpecError> {
        let err = |reason: String| FaultSpecError {
            spec: spec.to_string(),
            reason,
        };
        let mut config = FaultConfig::none();
        let mut seed = 0u64;
        let mut seen: Vec<&str> = Vec::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = entry
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| err(format!("{entry:?} is not key=value")))?;
            if seen.contains(&key) {
                return Err(err(format!("{key} given twice")));
            }
            seen.push(key);
            let number = |max: u64| -> Result<u64, FaultSpecError> {
                let parsed = match value
                    .strip_prefix("0x")
                    .or_else(|| value.strip_prefix("0X"))
                {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => value.parse::<u64>(),
                };
                match parsed {
                    Ok(n) if n <= max => Ok(n),
                    Ok(n) => Err(err(format!("{key}={n} is above {max}"))),
                    Err(_) => Err(err(format!("{key}={value:?} is not a number"))),
                }
            };
            // Per mille values never exceed 1000, so the narrowing below cannot truncate.
            let per_mille = || number(1000).map(|n| n as u32);
            match key {
                "loss" => config.loss_per_mille = per_mille()?,
                "burst" => config.burst_per_mille = per_mille()?,
                "burst_max" => config.burst_max = number(u32::MAX as u64)? as u32,
                "dup" => config.dup_per_mille = per_mille()?,
                "reorder" => config.reorder_per_mille = per_mille()?,
                "corrupt" => config.corrupt_per_mille = per_mille()?,
                "seed" => seed = number(u64::MAX)?,
                _ => return Err(err(format!("unknown key {key:?} (known: {SPEC_KEYS})"))),
            }
        }
        Ok(FaultSetting::new(config, seed))
    }
}

/// Most sends a reordered packet is held back for (it goes out after 1 to this many later
/// sends).
pub const REORDER_MAX_SENDS: u64 = 4;
/// Most sends the copy of a duplicated packet is held back for.
pub const DUP_MAX_SENDS: u64 = 4;
/// Most packets held back at once; beyond that a packet chosen for holding goes out at once,
/// so memory stays bounded whatever the traffic.
pub const MAX_HELD_PACKETS: usize = 64;

/// A packet held back, and how many more sends it waits for.
struct Held {
    packet: OutPacket,
    sends_left: u64,
}

/// The mutable part of a [`FaultyLink`].
struct FaultState {
    config: FaultConfig,
    rng: SimRng,
    /// Further packets the current loss burst drops.
    burst_left: u32,
    held: VecDeque<Held>,
}

impl FaultState {
    /// Counts one send against every held packet; returns those whose wait is over, in the
    /// order they were held.
    fn count_send(&mut self) -> Vec<OutPacket> {
        let mut due = Vec::new();
        let mut kept = VecDeque::with_capacity(self.held.len());
        for mut h in self.held.drain(..) {
            h.sends_left -= 1;
            if h.sends_left == 0 {
                due.push(h.packet);
            } else {
                kept.push_back(h);
            }
        }
        self.held = kept;
        due
    }

    /// Holds `packet` back for `sends` later sends; gives it back if too many are held.
    fn hold(&mut self, packet: OutPacket, sends: u64) -> Option<OutPacket> {
        if self.held.len() >= MAX_HELD_PACKETS {
            return Some(packet);
        }
        self.held.push_back(Held {
            packet,
            sends_left: sends,
        });
        None
    }

    /// Decides the fate of `packet` (ICRC written): pushes what goes out now onto `now`,
    /// holds back what goes out later, counts what it did.
    fn apply(&mut self, packet: &OutPacket, now: &mut Vec<OutPacket>, counters: &FaultCounters) {
        let f = self.config;
        if self.burst_left > 0 {
            self.burst_left -= 1;
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.rng.chance(f.loss_per_mille) {
            if f.burst_max > 0 && self.rng.chance(f.burst_per_mille) {
                self.burst_left = 1 + self.rng.below(f.burst_max as u64) as u32;
            }
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut packet = packet.clone();
        let mut corrupted = false;
        if !packet.bytes.is_empty() && self.rng.chance(f.corrupt_per_mille) {
            let i = self.rng.below(packet.bytes.len() as u64) as usize;
            packet.bytes[i] ^= 1 << self.rng.below(8);
            corrupted = true;
            counters.corrupted.fetch_add(1, Ordering::Relaxed);
        }
        if self.rng.chance(f.dup_per_mille) {
            counters.duplicated.fetch_add(1, Ordering::Relaxed);
            if corrupted {
                counters.corrupted.fetch_add(1, Ordering::Relaxed);
            }
            let sends = 1 + self.rng.below(DUP_MAX_SENDS);
            if let Some(copy) = self.hold(packet.clone(), sends) {
                now.push(copy);
            }
        }
        if self.rng.chance(f.reorder_per_mille) {
            let sends = 1 + self.rng.below(REORDER_MAX_SENDS);
            match self.hold(packet, sends) {
                None => {
                    counters.reordered.fetch_add(1, Ordering::Relaxed);
                }
                Some(p) => now.insert(0, p),
            }
        } else {
            // The original goes before a copy pushed above.
            now.insert(0, packet);
        }
    }
}

/// A [`Link`] that applies a [`FaultConfig`] to what it sends, then passes it to another link.
/// Receiving is passed through unchanged (apart from releasing held packets first).
pub struct FaultyLink {
    inner: Box<dyn Link>,
    state: Mutex<FaultState>,
    counters: Arc<FaultCounters>,
}

impl FaultyLink {
    /// Wraps `inner` with the faults of `setting`, counting into `setting.counters`.
    pub fn new(inner: Box<dyn Link>, setting: &FaultSetting) -> FaultyLink {
        FaultyLink {
            inner,
            state: Mutex::new(FaultState {
                config: setting.config,
                rng: SimRng::new(setting.seed),
                burst_left: 0,
                held: VecDeque::new(),
            }),
            counters: Arc::clone(&setting.counters),
        }
    }

    /// What this link did so far.
    pub fn counters(&self) -> Arc<FaultCounters> {
        Arc::clone(&self.counters)
    }

    /// Sends `packets` in order through the inner link; returns the first error (a later
    /// packet is still tried: one failure must not hold back the others).
    fn send_all(&self, packets: &[OutPacket]) -> io::Result<()> {
        let mut result = Ok(());
        for p in packets {
            let sent = self.inner.send_raw(p);
            if sent.is_ok() {
                self.counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            if result.is_ok() {
                result = sent;
            }
        }
        result
    }
}

impl Link for FaultyLink {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn qpn_range(&self) -> Option<std::ops::Range<u32>> {
        self.inner.qpn_range()
    }

    fn shared_port(&self) -> Option<&crate::net::shared_port::member::Member> {
        self.inner.shared_port()
    }

    fn hand_over_shared_port(&self) -> std::io::Result<()> {
        self.inner.hand_over_shared_port()
    }

    fn carries_multicast(&self) -> bool {
        self.inner.carries_multicast()
    }

    fn join_group(
        &self,
        group: std::net::IpAddr,
    ) -> io::Result<Option<crate::net::multicast::GroupSocket>> {
        self.inner.join_group(group)
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        self.inner.finalize(packet)
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        // Decide under the lock (the PRNG and the held queue are shared by every sending
        // thread), send outside it so that one slow send does not stall the others.
        let mut now = Vec::with_capacity(2);
        {
            let mut state = self.state.lock();
            let due = state.count_send();
            state.apply(packet, &mut now, &self.counters);
            // Released packets go after this one: they were overtaken by it.
            now.extend(due);
        }
        self.send_all(&now)
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        // A device receives at least every few milliseconds (its engine loop), so releasing
        // here bounds how long a packet is held even when nothing else is sent.
        let held: Vec<OutPacket> = self.state.lock().held.drain(..).map(|h| h.packet).collect();
        // A failed release is a lost datagram, which the transport recovers from; it must
        // not look like a receive error.
        let _ = self.send_all(&held);
        self.inner.recv(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::channel::ChannelNetwork;
    use std::net::{IpAddr, Ipv4Addr};

    fn addr(n: u8) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)), 4791)
    }

    /// A packet whose first 4 bytes number it, plus room for the ICRC.
    fn packet(n: u32) -> OutPacket {
        let mut bytes = vec![0u8; 40];
        bytes[..4].copy_from_slice(&n.to_be_bytes());
        OutPacket {
            dst_ip: addr(2).ip(),
            udp_dst_port: 4791,
            udp_src_port: 4791,
            bytes,
            payload: None,
        }
    }

    /// Sends packets 0..n from a link with `config`/`seed` to a plain endpoint; returns what
    /// arrived (numbers and whether the bytes were unchanged) and the counters.
    fn run(config: FaultConfig, seed: u64, n: u32) -> (Vec<(u32, bool)>, FaultCounts) {
        let net = ChannelNetwork::new();
        let setting = FaultSetting::new(config, seed);
        let link = FaultyLink::new(Box::new(net.attach(addr(1)).unwrap()), &setting);
        let rx = net.attach(addr(2)).unwrap();
        let mut expected = Vec::new();
        for i in 0..n {
            let mut p = packet(i);
            link.send(&mut p).unwrap();
            expected.push(p.bytes);
        }
        // Releases whatever is still held back.
        assert_eq!(link.recv(Duration::from_millis(1)).unwrap(), None);
        let mut got = Vec::new();
        while let Some(d) = rx.recv(Duration::from_millis(1)).unwrap() {
            let mut num = [0u8; 4];
            num.copy_from_slice(&d.payload[..4]);
            let i = u32::from_be_bytes(num);
            // A corrupted number cannot be matched with its packet: count it as changed.
            let intact = expected.get(i as usize) == Some(&d.payload);
            got.push((i, intact));
        }
        (got, setting.counters.snapshot())
    }

    #[test]
    fn no_faults_passes_everything_in_order() {
        let (got, c) = run(FaultConfig::none(), 1, 200);
        assert_eq!(got, (0..200).map(|i| (i, true)).collect::<Vec<_>>());
        assert_eq!(
            c,
            FaultCounts {
                sent: 200,
                ..FaultCounts::default()
            }
        );
    }

    #[test]
    fn each_fault_happens_at_roughly_its_rate_and_is_counted() {
        let config = FaultConfig {
            loss_per_mille: 100,
            burst_per_mille: 0,
            burst_max: 0,
            dup_per_mille: 100,
            reorder_per_mille: 100,
            corrupt_per_mille: 50,
        };
        let (got, c) = run(config, 42, 5000);
        // Counted faults match what arrived.
        assert_eq!(got.len() as u64, c.sent);
        assert_eq!(c.sent, 5000 - c.dropped + c.duplicated);
        assert_eq!(got.iter().filter(|g| !g.1).count() as u64, c.corrupted);
        // Rates near their settings (5000 draws: well within these bounds).
        for (what, n, per_mille) in [
            ("dropped", c.dropped, 100),
            ("duplicated", c.duplicated, 90),
            ("reordered", c.reordered, 90),
        ] {
            let expect = 5000 * per_mille / 1000;
            assert!(
                n > expect * 7 / 10 && n < expect * 13 / 10,
                "{what}: {n}, expected about {expect} in {c:?}"
            );
        }
        assert!(c.corrupted > 100, "{c:?}");
        // Reordering really reorders, and only by a few places.
        let intact: Vec<u32> = got.iter().filter(|g| g.1).map(|g| g.0).collect();
        let inversions = intact.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(inversions > 100, "{inversions} inversions");
        let mut highest = 0;
        for &i in &intact {
            highest = highest.max(i);
            assert!(
                highest - i <= (REORDER_MAX_SENDS + DUP_MAX_SENDS) as u32,
                "packet {i} arrived after {highest}"
            );
        }
    }

    #[test]
    fn bursts_drop_consecutive_packets() {
        let config = FaultConfig {
            loss_per_mille: 50,
            burst_per_mille: 1000,
            burst_max: 4,
            ..FaultConfig::none()
        };
        let (got, c) = run(config, 3, 2000);
        let numbers: Vec<u32> = got.iter().map(|g| g.0).collect();
        let longest_gap = numbers.windows(2).map(|w| w[1] - w[0] - 1).max().unwrap();
        assert!(longest_gap >= 2, "no burst seen");
        // Every loss starts a burst of at most 4 more, and bursts can chain.
        assert!(c.dropped > 2000 * 50 / 1000, "{c:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let config = FaultConfig::harsh();
        assert_eq!(run(config, 9, 500), run(config, 9, 500));
        assert_ne!(run(config, 9, 500).0, run(config, 10, 500).0);
    }

    #[test]
    fn corruption_happens_after_the_icrc() {
        let config = FaultConfig {
            corrupt_per_mille: 1000,
            ..FaultConfig::none()
        };
        let net = ChannelNetwork::new();
        let setting = FaultSetting::new(config, 5);
        let link = FaultyLink::new(Box::new(net.attach(addr(1)).unwrap()), &setting);
        let rx = net.attach(addr(2)).unwrap();
        let mut p = packet(7);
        link.send(&mut p).unwrap();
        // The caller's packet got the correct ICRC; exactly one bit differs on the wire.
        let d = rx.recv(Duration::from_millis(10)).unwrap().unwrap();
        let mut reference = packet(7);
        // Same local address on another network: the same IP header, so the same ICRC.
        let twin = ChannelNetwork::new().attach(addr(1)).unwrap();
        twin.finalize(&mut reference).unwrap();
        assert_eq!(p.bytes, reference.bytes);
        let flipped: u32 = d
            .payload
            .iter()
            .zip(&p.bytes)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 1);
        assert_eq!(setting.counters.snapshot().corrupted, 1);
    }

    #[test]
    fn held_packets_are_bounded_and_released_by_recv() {
        let config = FaultConfig {
            reorder_per_mille: 1000,
            ..FaultConfig::none()
        };
        let net = ChannelNetwork::new();
        let setting = FaultSetting::new(config, 11);
        let link = FaultyLink::new(Box::new(net.attach(addr(1)).unwrap()), &setting);
        let rx = net.attach(addr(2)).unwrap();
        link.send(&mut packet(0)).unwrap();
        assert_eq!(rx.recv(Duration::from_millis(1)).unwrap(), None);
        assert_eq!(link.recv(Duration::from_millis(1)).unwrap(), None);
        assert!(rx.recv(Duration::from_millis(10)).unwrap().is_some());
        for i in 0..1000 {
            link.send(&mut packet(i)).unwrap();
            assert!(link.state.lock().held.len() <= MAX_HELD_PACKETS);
        }
    }

    #[test]
    fn parses_fault_specifications() {
        let s = FaultSetting::parse(
            "loss=100, burst=50,burst_max=4,dup=50,reorder=50,corrupt=10,seed=7,",
        )
        .unwrap();
        assert_eq!(
            s.config,
            FaultConfig {
                loss_per_mille: 100,
                burst_per_mille: 50,
                burst_max: 4,
                dup_per_mille: 50,
                reorder_per_mille: 50,
                corrupt_per_mille: 10,
            }
        );
        assert_eq!(s.seed, 7);
        assert_eq!(FaultSetting::parse("seed=0xFF").unwrap().seed, 255);
        let empty = FaultSetting::parse("").unwrap();
        assert_eq!((empty.config, empty.seed), (FaultConfig::none(), 0));
        assert_eq!(
            FaultSetting::parse("loss=1000")
                .unwrap()
                .config
                .loss_per_mille,
            1000
        );
        for bad in [
            "loss",
            "loss=",
            "loss=1001",
            "loss=-1",
            "loss=10%",
            "los=10",
            "loss=1,loss=2",
            "seed=0xZZ",
            "burst_max=4294967296",
            "=5",
        ] {
            let e = FaultSetting::parse(bad).unwrap_err();
            assert_eq!(e.spec, bad);
            assert!(!e.reason.is_empty());
        }
        assert!(FaultSetting::parse("what=1")
            .unwrap_err()
            .to_string()
            .contains("known: loss"));
    }

    #[test]
    fn clones_share_counters() {
        let s = FaultSetting::new(FaultConfig::none(), 0);
        let c = s.clone();
        s.counters.dropped.fetch_add(3, Ordering::Relaxed);
        assert_eq!(c.counters.snapshot().dropped, 3);
    }
}
