//! A deterministic two-endpoint harness for the sans-I/O CM: a virtual clock and a wire
//! that loses, duplicates and reorders MADs from a seed. Shared by the cm_* tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use softverbs_emu::cm::{
    AcceptParams, CmConfig, CmEvent, CmEventKind, CmId, CmManager, CmOutput, ConnectParams,
    QpRequest,
};
use softverbs_emu::wire::cm::{CmMad, PortSpace, MAD_LEN};

/// SplitMix64: the test's own seeded randomness.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Faults per MAD.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    /// Extra random delay up to this many ns (reorders MADs).
    pub jitter_ns: u64,
    /// Probability that a delivered copy has one random byte flipped (the ICRC would catch
    /// this on a real wire; here it probes the CM with hostile input).
    pub corrupt: f64,
}

pub const LATENCY_NS: u64 = 20_000;

/// What an endpoint did with the CM's outputs.
#[derive(Default, Debug)]
pub struct Log {
    pub events: Vec<(u64, CmEvent)>,
    pub qp: Vec<QpRequest>,
    pub sent: Vec<(u64, CmMad)>,
}

impl Log {
    pub fn kinds(&self, id: CmId) -> Vec<&CmEventKind> {
        self.events
            .iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| &e.kind)
            .collect()
    }
}

/// One device: its CM, address and what came out.
pub struct Node {
    pub cm: CmManager,
    pub addr: IpAddr,
    pub log: Log,
    /// Accept every CONNECT_REQUEST with this QP number (None: leave it to the test).
    pub auto_accept_qpn: Option<u32>,
    /// Answer every SIDR request: Some((qpn, qkey)) accepts, None rejects.
    pub auto_sidr: Option<Option<(u32, u32)>>,
    /// Drop everything this node sends (it went silent).
    pub mute: bool,
}

pub struct World {
    pub now_ns: u64,
    pub nodes: [Node; 2],
    /// (delivery time, sequence) -> (destination node, source address, MAD).
    in_flight: BTreeMap<(u64, u64), (usize, IpAddr, Vec<u8>)>,
    seq: u64,
    pub rng: Rng,
    pub faults: Faults,
}

pub fn config(addr: IpAddr, seed: u64) -> CmConfig {
    CmConfig::new(addr, 0x0200_00ff_fe00_0000 | seed, seed)
}

pub fn connect_params(peer: IpAddr, port: u16, qpn: u32) -> ConnectParams {
    ConnectParams {
        peer,
        port_space: PortSpace::Tcp,
        dst_port: port,
        src_port: 40000,
        qpn,
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        private_data: b"hello".to_vec(),
        qp_ack_timeout: None,
        manual_qp: false,
    }
}

pub fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        qpn,
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"welcome".to_vec(),
        qp_ack_timeout: None,
        manual_qp: false,
    }
}

impl World {
    pub fn new(seed: u64, faults: Faults) -> World {
        let a: IpAddr = "127.0.28.1".parse().unwrap();
        let b: IpAddr = "127.0.28.2".parse().unwrap();
        let node = |addr, s| Node {
            cm: CmManager::new(config(addr, s)),
            addr,
            log: Log::default(),
            auto_accept_qpn: None,
            auto_sidr: None,
            mute: false,
        };
        World {
            now_ns: 1_000_000,
            nodes: [node(a, seed * 2 + 1), node(b, seed * 2 + 2)],
            in_flight: BTreeMap::new(),
            seq: 0,
            rng: Rng::new(seed ^ 0x5eed),
            faults,
        }
    }

    pub fn addr(&self, i: usize) -> IpAddr {
        self.nodes[i].addr
    }

    /// Moves every queued output of node `i` to the wire or its log.
    pub fn drain(&mut self, i: usize) {
        while let Some(o) = self.nodes[i].cm.poll_output() {
            match o {
                CmOutput::SendMad { to, mad } => self.transmit(i, to, &mad),
                CmOutput::ModifyQp(q) => self.nodes[i].log.qp.push(q),
                CmOutput::Event(e) => {
                    let accept = match (&e.kind, self.nodes[i].auto_accept_qpn) {
                        (CmEventKind::ConnectRequest { .. }, Some(qpn)) => Some(qpn),
                        _ => None,
                    };
                    self.nodes[i].log.events.push((self.now_ns, e.clone()));
                    let now = self.now_ns;
                    if let Some(qpn) = accept {
                        self.nodes[i]
                            .cm
                            .accept(now, e.id, &accept_params(qpn))
                            .expect("accept");
                    }
                    if let (CmEventKind::SidrRequest { .. }, Some(answer)) =
                        (&e.kind, self.nodes[i].auto_sidr)
                    {
                        let cm = &mut self.nodes[i].cm;
                        match answer {
                            Some((qpn, qkey)) => cm.sidr_accept(now, e.id, qpn, qkey, b"here"),
                            None => cm.sidr_reject(now, e.id, b"no"),
                        }
                        .expect("SIDR answer");
                    }
                }
            }
        }
    }

    fn transmit(&mut self, from: usize, to: IpAddr, mad: &[u8; MAD_LEN]) {
        let parsed = CmMad::parse(mad).expect("the CM emits valid MADs");
        self.nodes[from].log.sent.push((self.now_ns, parsed));
        if self.nodes[from].mute {
            return;
        }
        let Some(dst) = self.nodes.iter().position(|n| n.addr == to) else {
            return;
        };
        let copies = if self.rng.chance(self.faults.loss) {
            0
        } else if self.rng.chance(self.faults.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if self.faults.jitter_ns > 0 {
                self.rng.next() % self.faults.jitter_ns
            } else {
                0
            };
            self.seq += 1;
            let src = self.nodes[from].addr;
            let mut bytes = mad.to_vec();
            if self.rng.chance(self.faults.corrupt) {
                let at = (self.rng.next() % MAD_LEN as u64) as usize;
                bytes[at] ^= 1 << (self.rng.next() % 8);
            }
            self.in_flight.insert(
                (self.now_ns + LATENCY_NS + jitter, self.seq),
                (dst, src, bytes),
            );
        }
    }

    /// Runs until nothing is in flight and no deadline is before `until_ns`.
    pub fn run_until(&mut self, until_ns: u64) {
        for _ in 0..1_000_000 {
            self.drain(0);
            self.drain(1);
            let wire = self.in_flight.keys().next().map(|k| k.0);
            let timers = self
                .nodes
                .iter()
                .filter_map(|n| n.cm.next_deadline_ns())
                .min();
            let Some(next) = [wire, timers].into_iter().flatten().min() else {
                return;
            };
            if next > until_ns {
                self.now_ns = self.now_ns.max(until_ns);
                return;
            }
            self.now_ns = self.now_ns.max(next);
            if wire == Some(next) {
                let key = *self.in_flight.keys().next().unwrap();
                let (dst, src, mad) = self.in_flight.remove(&key).unwrap();
                let now = self.now_ns;
                let parsed = self.nodes[dst].cm.handle_mad(now, src, &mad);
                assert!(
                    parsed.is_ok() || self.faults.corrupt > 0.0,
                    "the CM rejected its own MAD: {parsed:?}"
                );
            } else {
                let now = self.now_ns;
                for n in &mut self.nodes {
                    if n.cm.next_deadline_ns().is_some_and(|d| d <= now) {
                        n.cm.handle_timeout(now);
                    }
                }
            }
        }
        panic!("harness did not settle");
    }

    /// Runs until quiet (bounded to a virtual hour).
    pub fn settle(&mut self) {
        let limit = self.now_ns + 3_600_000_000_000;
        self.run_until(limit);
    }
}

/// Whether `k` ends a connection attempt.
pub fn is_terminal(k: &CmEventKind) -> bool {
    matches!(
        k,
        CmEventKind::Established { .. }
            | CmEventKind::Rejected(_)
            | CmEventKind::Unreachable
            | CmEventKind::ConnectError
    )
}
