//! Target `rc_pair`: the responder and the completer of two connected RC QPs (the
//! deterministic simulator's `SimPair`) while a forged peer injects packets. The input is a
//! script: post sends (SEND, WRITE, READ, atomics, with or without immediate) and receives
//! on either side, let the simulation run some steps, or inject a packet into one side as if
//! from the other: a packet forged from live traffic or the captures, mutated field by field
//! and given a correct ICRC (see `rc_pair_mutate`).
//!
//! Findings: a panic; the pair still busy after a generous step budget (a livelock); a
//! completion of a WR that was never posted, or two of one WR; a byte changed outside a
//! registered region, or in a region registered for local access only.

use std::collections::BTreeMap;

use arbitrary::{Result, Unstructured};
use softverbs_api::wr::RemoteAddr;
use softverbs_api::{AccessFlags, Mtu, QpAttr, RecvWr, SendWr, Sge};
use softverbs_emu::memory::RdmaBuffer;
use softverbs_emu::sim::{FaultConfig, Side, SimPair, TraceEvent, SIM_PD};
use softverbs_emu::wire::{write_icrc, Psn, RoceRepr};

use crate::rc_pair_mutate::{forge, Region, Victim};

/// Bytes of each region, and of the guard zones around it.
const REGION: usize = 8192;
const GUARD: usize = 256;
const GUARD_BYTE: u8 = 0x5c;
/// What the private region holds, and keeps.
const PRIVATE_BYTE: u8 = 0x3d;
/// Most actions of one input.
const MAX_ACTIONS: usize = 48;
/// Steps by which the pair must have settled after the script: retries are few (2) and
/// the clock is virtual, so a pair still busy after this many is stuck in a loop.
const SETTLE_STEPS: usize = 100_000;
const MTUS: [(Mtu, usize); 5] = [
    (Mtu::Mtu256, 256),
    (Mtu::Mtu512, 512),
    (Mtu::Mtu1024, 1024),
    (Mtu::Mtu2048, 2048),
    (Mtu::Mtu4096, 4096),
];

/// The regions of one side.
#[derive(Clone, Copy)]
struct Regions {
    /// Open to remote write, read and atomics.
    exposed: Region,
    /// Local access: send sources, receive buffers, READ and atomic results.
    local: Region,
    /// Local access, never used by a WR: must never change.
    private: Region,
}

struct Run {
    pair: SimPair,
    regions: [Regions; 2],
    /// WRs posted on each side (A, B) and how many completions each got.
    posted: [BTreeMap<u64, u32>; 2],
    next_wr_id: u64,
    mtu: usize,
    start_psn: Psn,
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(mut run) = Run::new(&mut u) else {
        return;
    };
    for _ in 0..MAX_ACTIONS {
        if u.is_empty() || run.act(&mut u).is_err() {
            break;
        }
    }
    run.finish();
}

fn index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

fn side(u: &mut Unstructured<'_>) -> Result<Side> {
    Ok(if u.arbitrary()? { Side::B } else { Side::A })
}

impl Run {
    fn new(u: &mut Unstructured<'_>) -> Result<Run> {
        let &(mtu, mtu_bytes) = u.choose(&MTUS)?;
        // Near the wrap now and then.
        let start_psn = Psn::new(if u.arbitrary()? {
            0xff_ffff - u.int_in_range(0..=64)?
        } else {
            u.arbitrary()?
        });
        let attrs = QpAttr {
            sq_psn: start_psn.value(),
            rq_psn: start_psn.value(),
            timeout: 10,
            retry_cnt: 2,
            rnr_retry: 2,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..QpAttr::default()
        };
        let mut pair = SimPair::new_rc(0, FaultConfig::none(), mtu, &attrs);
        let remote = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mut regions = |side| Regions {
            exposed: guarded(&mut pair, side, remote, 0),
            local: guarded(&mut pair, side, AccessFlags::LOCAL_WRITE, 0),
            private: guarded(&mut pair, side, AccessFlags::LOCAL_WRITE, PRIVATE_BYTE),
        };
        let regions = [regions(Side::A), regions(Side::B)];
        Ok(Run {
            pair,
            regions,
            posted: [BTreeMap::new(), BTreeMap::new()],
            next_wr_id: 1,
            mtu: mtu_bytes,
            start_psn,
        })
    }

    fn act(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        match u.int_in_range(0..=9u8)? {
            0 | 1 => self.post_send(u),
            2 => self.post_recv(u),
            3 => {
                let steps = u.int_in_range(1..=64)?;
                self.pair.run(steps);
                Ok(())
            }
            4..=8 => self.inject(u),
            _ => {
                self.pair.run(SETTLE_STEPS);
                Ok(())
            }
        }
    }

    fn wr_id(&mut self, side: Side) -> u64 {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        self.posted[index(side)].insert(id, 0);
        id
    }

    fn post_send(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let side = side(u)?;
        let local = self.regions[index(side)].local;
        let peer = self.regions[index(side.other())].exposed;
        let len = u.int_in_range(0..=(3 * self.mtu).min(REGION) as u32)?;
        let offset = u.int_in_range(0..=REGION as u64 - u64::from(len))?;
        let sge = Sge {
            addr: local.addr + offset,
            length: len,
            lkey: local.lkey,
        };
        let rkey = if u.ratio(1, 8)? {
            u.arbitrary()?
        } else {
            peer.rkey
        };
        // Past the end now and then: the responder must NAK it.
        let remote = RemoteAddr {
            remote_addr: peer.addr + u.int_in_range(0..=REGION as u64)?,
            rkey,
        };
        let atomic_sge = Sge {
            addr: local.addr + (offset & !7).min(REGION as u64 - 8),
            length: 8,
            lkey: local.lkey,
        };
        let atomic_remote = RemoteAddr {
            remote_addr: remote.remote_addr & !7,
            ..remote
        };
        let kind = u.int_in_range(0..=6u8)?;
        let imm = u.arbitrary()?;
        let id = self.next_wr_id;
        let wr = match kind {
            0 => SendWr::send(id, vec![sge]),
            1 => SendWr::send_with_imm(id, vec![sge], imm),
            2 => SendWr::write(id, vec![sge], remote),
            3 => SendWr::write_with_imm(id, vec![sge], remote, imm),
            4 => SendWr::read(id, vec![sge], remote),
            5 => {
                SendWr::compare_and_swap(id, atomic_sge, atomic_remote, u.arbitrary()?, imm.into())
            }
            _ => SendWr::fetch_and_add(id, atomic_sge, atomic_remote, u.arbitrary()?),
        };
        if self.pair.post_send(side, &[wr]).is_ok() {
            self.wr_id(side);
        }
        Ok(())
    }

    fn post_recv(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let side = side(u)?;
        let local = self.regions[index(side)].local;
        let len = u.int_in_range(0..=(3 * self.mtu).min(REGION) as u32)?;
        let offset = u.int_in_range(0..=REGION as u64 - u64::from(len))?;
        let wr = RecvWr {
            wr_id: self.next_wr_id,
            sg_list: vec![Sge {
                addr: local.addr + offset,
                length: len,
                lkey: local.lkey,
            }],
        };
        if self.pair.post_recv(side, &[wr]).is_ok() {
            self.wr_id(side);
        }
        Ok(())
    }

    fn inject(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let to = side(u)?;
        let bytes = {
            let victim = self.victim(to);
            forge(u, &victim)?
        };
        let src_port = 0xc000 | u.int_in_range(0..=0x3fffu16)?;
        let mut bytes = bytes;
        if !u.ratio(1, 16)? {
            write_icrc(&SimPair::icrc_context(to, src_port), &mut bytes);
        }
        let _ = self.pair.inject_bytes(to, src_port, &bytes);
        Ok(())
    }

    /// What the forger knows about `to` from the trace.
    fn victim(&self, to: Side) -> Victim<'_> {
        let sent_by = |side: Side| -> Vec<&[u8]> {
            self.pair
                .trace
                .iter()
                .filter_map(|e| match e {
                    TraceEvent::Sent { from, bytes, .. } if *from == side => Some(bytes.as_slice()),
                    _ => None,
                })
                .collect()
        };
        let from_peer = sent_by(to.other());
        let from_victim = sent_by(to);
        let last_request = |packets: &[&[u8]]| {
            packets.iter().rev().find_map(|p| {
                let (r, _) = RoceRepr::parse(p).ok()?;
                r.bth.opcode.info()?.is_request.then_some(r.bth.psn)
            })
        };
        let regions = self.regions[index(to)];
        Victim {
            qpn: match to {
                Side::A => self.pair.a.qp.qpn,
                Side::B => self.pair.b.qp.qpn,
            },
            exposed: regions.exposed,
            private: regions.private,
            mtu: self.mtu,
            request_psn: last_request(&from_peer).map_or(self.start_psn, |p| p.add(1)),
            response_psn: last_request(&from_victim).unwrap_or(self.start_psn),
            from_peer,
            from_victim,
        }
    }

    /// Lets the pair settle and checks what must hold whatever the peer sent.
    fn finish(mut self) {
        self.pair.run(SETTLE_STEPS);
        assert!(
            !self.pair.step(),
            "the pair is still busy after {SETTLE_STEPS} steps"
        );
        for side in [Side::A, Side::B] {
            let completions: Vec<u64> = self
                .pair
                .node(side)
                .completions
                .iter()
                .map(|c| c.wc.wr_id)
                .collect();
            let posted = &mut self.posted[index(side)];
            for id in completions {
                let count = posted
                    .get_mut(&id)
                    .unwrap_or_else(|| panic!("{side:?}: a completion of WR {id}, never posted"));
                *count += 1;
                assert_eq!(*count, 1, "{side:?}: WR {id} completed twice");
            }
            let r = self.regions[index(side)];
            for region in [r.exposed, r.local, r.private] {
                let before = self.pair.read(side, region.addr - GUARD as u64, GUARD);
                let after = self.pair.read(side, region.addr + region.len, GUARD);
                assert!(
                    before.iter().chain(&after).all(|&b| b == GUARD_BYTE),
                    "{side:?}: a byte outside a registered region changed"
                );
            }
            let private = self.pair.read(side, r.private.addr, REGION);
            assert!(
                private.iter().all(|&b| b == PRIVATE_BYTE),
                "{side:?}: a byte of a local-only region changed"
            );
        }
    }
}

/// Registers `REGION` bytes (filled with `fill`) between two guard zones on `side`.
fn guarded(pair: &mut SimPair, side: Side, access: AccessFlags, fill: u8) -> Region {
    let buf = RdmaBuffer::new(GUARD + REGION + GUARD).expect("allocation");
    buf.fill(GUARD_BYTE);
    buf.write(GUARD, &vec![fill; REGION]).expect("in bounds");
    let addr = buf.addr() + GUARD as u64;
    let node = pair.node(side);
    let keys = node
        .mem
        .register(SIM_PD, addr, REGION as u64, access)
        .expect("registration");
    node.buffers.push(buf);
    Region {
        addr,
        len: REGION as u64,
        lkey: keys.lkey,
        rkey: keys.rkey,
    }
}
