//! A mixed RC workload with an oracle: SEND, SEND_WITH_IMM, RDMA WRITE (with and without
//! immediate), RDMA READ, CMP_AND_SWP, FETCH_AND_ADD, ATOMIC WRITE and FLUSH in both
//! directions at once, some fenced. The oracle checks every destination byte, that atomics
//! executed exactly once and in order (each returned original value is the expected
//! prefix), and that every WR got exactly one completion, in order, with the right fields.
//! Used by the tests and by `softverbs sim`.

use softverbs_api::wr::{FlushParams, RemoteAddr};
use softverbs_api::{
    AccessFlags, Mtu, QpAttr, RecvWr, SendFlags, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

use super::{FaultConfig, Side, SimPair, SimRng};
use crate::transport::CompletionTarget;

const SLOT: usize = 4096;
const OPS: usize = 24;
const COUNTERS: usize = 4;

/// QP attributes of the workload: PSNs that wrap during the run, a short ACK timeout,
/// infinite retries (faults stop in the end, so everything must complete).
pub fn attrs() -> QpAttr {
    QpAttr {
        sq_psn: 0xff_ff00, // wraps during the run
        rq_psn: 0xff_ff00,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..QpAttr::default()
    }
}

/// The regions of one side.
struct Regions {
    /// Outgoing data (SEND / WRITE sources), and where READ results and atomic originals land.
    local: (u64, u32),
    /// Where the peer WRITEs to and READs from.
    exposed: (u64, u32),
    /// Receive buffers.
    recv: (u64, u32),
    /// 8-byte counters for atomics.
    counters: (u64, u32, u32),
}

fn regions(p: &mut SimPair, side: Side) -> Regions {
    let lw = AccessFlags::LOCAL_WRITE;
    let remote =
        lw | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::FLUSH_GLOBAL;
    let (la, ll, _) = p.register(side, SLOT * OPS, lw);
    let (ea, _, er) = p.register(side, SLOT * OPS, remote);
    let (ra, rl, _) = p.register(side, SLOT * OPS, lw);
    let (ca, cl, cr) = p.register(side, 8 * COUNTERS, lw | AccessFlags::REMOTE_ATOMIC);
    Regions {
        local: (la, ll),
        exposed: (ea, er),
        recv: (ra, rl),
        counters: (ca, cl, cr),
    }
}

/// What one WR should produce.
enum Expect {
    /// Bytes at the peer's address (SEND: in a receive buffer; WRITE: in the exposed region).
    PeerBytes { addr: u64, data: Vec<u8> },
    /// Bytes at our own address (READ results).
    LocalBytes { addr: u64, data: Vec<u8> },
    /// An atomic's returned original value at our address.
    Original { addr: u64, value: u64 },
    /// Only a successful completion (FLUSH).
    Nothing,
}

struct Planned {
    wr: SendWr,
    expect: Expect,
    /// The receive completion it causes at the peer: (opcode, byte_len, imm).
    recv: Option<(WcOpcode, u32, Option<u32>)>,
}

fn plan(
    rng: &mut SimRng,
    me: &Regions,
    peer: &Regions,
    peer_mem: &mut Vec<(u64, Vec<u8>)>,
    counters: &mut [u64; COUNTERS],
) -> Vec<Planned> {
    let mut out = Vec::new();
    for m in 0..OPS {
        let slot = (m * SLOT) as u64;
        let len = match rng.below(5) {
            0 => rng.below(4) as usize,
            _ => rng.below(SLOT as u64 + 1) as usize,
        };
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let local_sge = Sge {
            addr: me.local.0 + slot,
            length: len as u32,
            lkey: me.local.1,
        };
        let op = rng.below(9);
        let mut wr = SendWr::send(m as u64, vec![local_sge]);
        let imm = rng.next_u64() as u32;
        let planned = match op {
            0 | 1 => {
                if op == 1 {
                    wr.opcode = WrOpcode::SendWithImm;
                    wr.imm_data = imm;
                }
                Planned {
                    wr,
                    expect: Expect::PeerBytes {
                        addr: 0,
                        data: data.clone(),
                    },
                    recv: Some((WcOpcode::Recv, len as u32, (op == 1).then_some(imm))),
                }
            }
            2 | 3 => {
                wr.opcode = if op == 3 {
                    WrOpcode::RdmaWriteWithImm
                } else {
                    WrOpcode::RdmaWrite
                };
                wr.imm_data = imm;
                wr.remote = RemoteAddr {
                    remote_addr: peer.exposed.0 + slot,
                    rkey: peer.exposed.1,
                };
                Planned {
                    wr,
                    expect: Expect::PeerBytes {
                        addr: peer.exposed.0 + slot,
                        data: data.clone(),
                    },
                    recv: (op == 3).then_some((WcOpcode::RecvRdmaWithImm, len as u32, Some(imm))),
                }
            }
            4 => {
                // READ what the peer has in its exposed slot: put known bytes there first.
                wr.opcode = WrOpcode::RdmaRead;
                wr.remote = RemoteAddr {
                    remote_addr: peer.exposed.0 + slot,
                    rkey: peer.exposed.1,
                };
                peer_mem.push((peer.exposed.0 + slot, data.clone()));
                Planned {
                    wr,
                    expect: Expect::LocalBytes {
                        addr: me.local.0 + slot,
                        data,
                    },
                    recv: None,
                }
            }
            7 => {
                // ATOMIC WRITE: 8 bytes from our slot to the peer's exposed slot.
                let value: Vec<u8> = data
                    .iter()
                    .copied()
                    .chain(std::iter::repeat(0x5a))
                    .take(8)
                    .collect();
                wr.opcode = WrOpcode::AtomicWrite;
                wr.sg_list = vec![Sge {
                    addr: me.local.0 + slot,
                    length: 8,
                    lkey: me.local.1,
                }];
                wr.remote = RemoteAddr {
                    remote_addr: peer.exposed.0 + slot,
                    rkey: peer.exposed.1,
                };
                Planned {
                    wr,
                    expect: Expect::PeerBytes {
                        addr: peer.exposed.0 + slot,
                        data: value,
                    },
                    recv: None,
                }
            }
            8 => {
                // FLUSH of (part of) the peer's exposed slot: completes, changes nothing.
                wr.opcode = WrOpcode::Flush;
                wr.sg_list = Vec::new();
                wr.remote = RemoteAddr {
                    remote_addr: peer.exposed.0 + slot,
                    rkey: peer.exposed.1,
                };
                wr.flush = FlushParams {
                    length: len as u32,
                    placement_type: FlushParams::GLOBAL,
                    selectivity_level: if rng.chance(500) {
                        FlushParams::WHOLE_REGION
                    } else {
                        FlushParams::RANGE
                    },
                };
                Planned {
                    wr,
                    expect: Expect::Nothing,
                    recv: None,
                }
            }
            _ => {
                let k = rng.below(COUNTERS as u64) as usize;
                let addr = peer.counters.0 + 8 * k as u64;
                let before = counters[k];
                wr.sg_list = vec![Sge {
                    addr: me.local.0 + slot,
                    length: 8,
                    lkey: me.local.1,
                }];
                wr.remote = RemoteAddr {
                    remote_addr: addr,
                    rkey: peer.counters.2,
                };
                if op == 5 {
                    wr.opcode = WrOpcode::AtomicFetchAndAdd;
                    wr.compare_add = rng.next_u64() >> 8;
                    counters[k] = before.wrapping_add(wr.compare_add);
                } else {
                    wr.opcode = WrOpcode::AtomicCmpAndSwp;
                    wr.compare_add = before;
                    wr.swap = rng.next_u64();
                    counters[k] = wr.swap;
                }
                Planned {
                    wr,
                    expect: Expect::Original {
                        addr: me.local.0 + slot,
                        value: before,
                    },
                    recv: None,
                }
            }
        };
        let mut planned = planned;
        if rng.chance(200) {
            planned.wr.send_flags |= SendFlags::FENCE;
        }
        out.push(planned);
    }
    out
}

/// Runs the mixed workload for `seed` under `faults` and checks it against the oracle;
/// `Err` describes the first violation (and names the seed, so it can be replayed).
pub fn run_mixed(seed: u64, faults: FaultConfig) -> Result<SimPair, String> {
    let mut rng = SimRng::new(seed ^ 0x5EED);
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.below(3) as usize];
    let mut p = SimPair::new_rc(seed, faults, mtu, &attrs());
    let ra = regions(&mut p, Side::A);
    let rb = regions(&mut p, Side::B);
    let mut plans = Vec::new();
    for (me, peer, side) in [(&ra, &rb, Side::A), (&rb, &ra, Side::B)] {
        let mut peer_mem = Vec::new();
        let mut counters = [0u64; COUNTERS];
        let planned = plan(&mut rng, me, peer, &mut peer_mem, &mut counters);
        let peer_side = if side == Side::A { Side::B } else { Side::A };
        for (addr, bytes) in peer_mem {
            p.write(peer_side, addr, &bytes);
        }
        // Source bytes for SEND / WRITE.
        for (m, pl) in planned.iter().enumerate() {
            if let Expect::PeerBytes { data, .. } = &pl.expect {
                p.write(side, me.local.0 + (m * SLOT) as u64, data);
            }
        }
        // One receive WQE per message that consumes one, in order, each its own slot.
        let recvs: Vec<RecvWr> = planned
            .iter()
            .filter(|pl| pl.recv.is_some())
            .enumerate()
            .map(|(j, _)| RecvWr {
                wr_id: 1000 + j as u64,
                sg_list: vec![Sge {
                    addr: peer.recv.0 + (j * SLOT) as u64,
                    length: SLOT as u32,
                    lkey: peer.recv.1,
                }],
            })
            .collect();
        p.post_recv(peer_side, &recvs)
            .map_err(|e| format!("seed {seed}: post_recv {e}"))?;
        plans.push((side, planned, counters));
    }
    for (side, planned, _) in &plans {
        let wrs: Vec<SendWr> = planned.iter().map(|pl| pl.wr.clone()).collect();
        p.post_send(*side, &wrs)
            .map_err(|e| format!("seed {seed}: post_send {e}"))?;
    }
    p.run(3_000_000);
    p.heal();
    p.run(3_000_000);

    for (side, planned, counters) in &plans {
        let peer_side = if *side == Side::A { Side::B } else { Side::A };
        let peer = if *side == Side::A { &rb } else { &ra };
        let sends: Vec<_> = p
            .node(*side)
            .completions
            .iter()
            .filter(|c| c.target == CompletionTarget::Send)
            .map(|c| c.wc)
            .collect();
        if sends.len() != planned.len() {
            return Err(format!(
                "seed {seed}: {side:?} got {} send completions for {} WRs: {:?}",
                sends.len(),
                planned.len(),
                sends
                    .iter()
                    .map(|w| (w.wr_id, w.status))
                    .collect::<Vec<_>>()
            ));
        }
        let mut recv_index = 0usize;
        let recvs: Vec<_> = p
            .node(peer_side)
            .completions
            .iter()
            .filter(|c| c.target == CompletionTarget::Recv)
            .map(|c| c.wc)
            .collect();
        for (m, pl) in planned.iter().enumerate() {
            let wc = sends[m];
            let want_len = match pl.wr.opcode {
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => {
                    8
                }
                WrOpcode::Flush => pl.wr.flush.length,
                _ => pl.wr.total_length() as u32,
            };
            if wc.wr_id != m as u64 || wc.status != WcStatus::Success || wc.byte_len != want_len {
                return Err(format!(
                    "seed {seed}: {side:?} WR {m} ({:?}) completed as {wc:?}",
                    pl.wr.opcode
                ));
            }
            match &pl.expect {
                Expect::PeerBytes { addr, data } => {
                    let at = if pl.wr.opcode == WrOpcode::Send
                        || pl.wr.opcode == WrOpcode::SendWithImm
                    {
                        peer.recv.0 + (recv_index * SLOT) as u64
                    } else {
                        *addr
                    };
                    if &p.read(peer_side, at, data.len()) != data {
                        return Err(format!(
                            "seed {seed}: {side:?} WR {m} ({:?}): destination bytes differ",
                            pl.wr.opcode
                        ));
                    }
                }
                Expect::LocalBytes { addr, data } => {
                    if &p.read(*side, *addr, data.len()) != data {
                        return Err(format!("seed {seed}: {side:?} READ {m}: bytes differ"));
                    }
                }
                Expect::Nothing => {}
                Expect::Original { addr, value } => {
                    let got = u64::from_ne_bytes(p.read(*side, *addr, 8).try_into().unwrap());
                    if got != *value {
                        return Err(format!("seed {seed}: {side:?} atomic {m} returned {got:#x}, want {value:#x} (executed twice or out of order?)"));
                    }
                }
            }
            if let Some((opcode, byte_len, imm)) = pl.recv {
                let Some(r) = recvs.get(recv_index) else {
                    return Err(format!(
                        "seed {seed}: missing receive completion for {side:?} WR {m}"
                    ));
                };
                let imm_ok = r.wc_flags.contains(WcFlags::WITH_IMM) == imm.is_some()
                    && imm.is_none_or(|i| i == r.imm_data);
                if r.wr_id != 1000 + recv_index as u64
                    || r.status != WcStatus::Success
                    || r.opcode != opcode
                    || r.byte_len != byte_len
                    || !imm_ok
                {
                    return Err(format!("seed {seed}: receive completion {recv_index} for {side:?} WR {m} is {r:?}, want {opcode:?} {byte_len} {imm:?}"));
                }
                recv_index += 1;
            }
        }
        if recvs.len() != recv_index {
            return Err(format!(
                "seed {seed}: {} receive completions, want {recv_index}",
                recvs.len()
            ));
        }
        for (k, want) in counters.iter().enumerate() {
            let got = u64::from_ne_bytes(
                p.read(peer_side, peer.counters.0 + 8 * k as u64, 8)
                    .try_into()
                    .unwrap(),
            );
            if got != *want {
                return Err(format!(
                    "seed {seed}: counter {k} at {peer_side:?} is {got:#x}, want {want:#x}"
                ));
            }
        }
    }
    Ok(p)
}
