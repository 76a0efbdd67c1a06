//! How `rc_pair` forges a packet: a template (a packet one of the simulated QPs really
//! sent, or an RC packet of the kernel-rxe captures), retargeted at the victim QP and near
//! the PSNs it expects, then field mutations that keep the packet well-formed (an opcode
//! change brings the headers the new opcode needs), then perhaps raw byte flips and a cut.
//! The caller writes the ICRC afterwards, so the mutations get past it.

use arbitrary::{Result, Unstructured};
use softverbs_emu::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, FethRepr, HeaderSet, Opcode, Psn,
    RethRepr, RoceRepr, Transport,
};

use crate::captures::rc_templates;

/// A registered region of the victim: address and keys.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// What the forger knows about the victim and the traffic so far.
pub struct Victim<'t> {
    /// The victim's QP number.
    pub qpn: u32,
    /// Its region open to remote access.
    pub exposed: Region,
    /// A region it registered for local access only.
    pub private: Region,
    /// The path MTU in bytes.
    pub mtu: usize,
    /// The PSN the victim's responder expects next (about).
    pub request_psn: Psn,
    /// The PSN of the last request the victim sent (what responses answer).
    pub response_psn: Psn,
    /// Packets the peer sent (newest last).
    pub from_peer: Vec<&'t [u8]>,
    /// Packets the victim sent (newest last).
    pub from_victim: Vec<&'t [u8]>,
}

/// A packet under mutation, owning its payload.
struct Forged {
    bth: BthRepr,
    reth: Option<RethRepr>,
    aeth: Option<AethRepr>,
    immdt: Option<u32>,
    ieth: Option<u32>,
    deth: Option<DethRepr>,
    atomic_eth: Option<AtomicEthRepr>,
    atomic_ack_eth: Option<AtomicAckEthRepr>,
    feth: Option<FethRepr>,
    payload: Vec<u8>,
}

impl Forged {
    fn from_repr(r: &RoceRepr<'_>) -> Forged {
        Forged {
            bth: r.bth,
            reth: r.reth,
            aeth: r.aeth,
            immdt: r.immdt,
            ieth: r.ieth,
            deth: r.deth,
            atomic_eth: r.atomic_eth,
            atomic_ack_eth: r.atomic_ack_eth,
            feth: r.feth,
            payload: r.payload.to_vec(),
        }
    }

    fn repr(&self) -> RoceRepr<'_> {
        RoceRepr {
            bth: self.bth,
            reth: self.reth,
            aeth: self.aeth,
            immdt: self.immdt,
            ieth: self.ieth,
            deth: self.deth,
            atomic_eth: self.atomic_eth,
            atomic_ack_eth: self.atomic_ack_eth,
            feth: self.feth,
            payload: &self.payload,
        }
    }
}

/// Forges one packet from the fuzzer's choices (BTH .. ICRC, the ICRC not yet written).
pub fn forge(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<Vec<u8>> {
    let (template, live) = match u.int_in_range(0..=3u8)? {
        0 | 1 if !v.from_peer.is_empty() => (pick_recent(u, &v.from_peer)?, true),
        2 if !v.from_victim.is_empty() => (pick_recent(u, &v.from_victim)?, true),
        _ => (u.choose(rc_templates())?.as_slice(), false),
    };
    let template = template.to_vec();
    let Ok((repr, _)) = RoceRepr::parse(&template) else {
        return Ok(template);
    };
    let mut f = Forged::from_repr(&repr);
    if !live {
        // A captured packet belongs to another connection: aim it at the victim.
        f.bth.dest_qp = v.qpn;
        rebase_psn(u, v, &mut f)?;
    } else if f.bth.dest_qp != v.qpn {
        // The victim's own packet, reflected back at it.
        f.bth.dest_qp = v.qpn;
    }
    for _ in 0..u.int_in_range(0..=6u8)? {
        mutate(u, v, &mut f)?;
    }
    let mut bytes = f.repr().to_vec().unwrap_or(template);
    if u.ratio(1, 4)? {
        for _ in 0..u.int_in_range(1..=3u8)? {
            if bytes.is_empty() {
                break;
            }
            let at = u.choose_index(bytes.len())?;
            bytes[at] ^= u.int_in_range(1..=255u8)?;
        }
    }
    if u.ratio(1, 16)? {
        let keep = u.int_in_range(0..=bytes.len())?;
        bytes.truncate(keep);
    }
    Ok(bytes)
}

fn pick_recent<'t>(u: &mut Unstructured<'_>, packets: &[&'t [u8]]) -> Result<&'t [u8]> {
    let back = u.int_in_range(0..=packets.len().min(16) - 1)?;
    Ok(packets[packets.len() - 1 - back])
}

fn rebase_psn(u: &mut Unstructured<'_>, v: &Victim<'_>, f: &mut Forged) -> Result<()> {
    let request = f.bth.opcode.info().is_some_and(|i| i.is_request);
    let base = if request {
        v.request_psn
    } else {
        v.response_psn
    };
    let delta = i32::from(u.int_in_range(-64..=64i8)?);
    f.bth.psn = Psn::new(base.value().wrapping_add_signed(delta) & 0xff_ffff);
    Ok(())
}

fn mutate(u: &mut Unstructured<'_>, v: &Victim<'_>, f: &mut Forged) -> Result<()> {
    match u.int_in_range(0..=9u8)? {
        0 => change_opcode(u, v, f)?,
        1 => rebase_psn(u, v, f)?,
        2 => {
            f.bth.solicited = u.arbitrary()?;
            f.bth.ack_req = u.arbitrary()?;
            f.bth.mig_req = u.arbitrary()?;
        }
        3 if f.reth.is_some() => f.reth = Some(reth(u, v)?),
        4 if f.aeth.is_some() => f.aeth = Some(aeth(u)?),
        5 if f
            .bth
            .opcode
            .info()
            .is_some_and(|i| i.has_payload && i.fixed_payload_len.is_none()) =>
        {
            let len = u.int_in_range(0..=2 * v.mtu + 8)?;
            let byte = u.arbitrary()?;
            f.payload = vec![byte; len];
        }
        6 if f.atomic_eth.is_some() => f.atomic_eth = Some(atomic_eth(u, v)?),
        7 => {
            if f.immdt.is_some() {
                f.immdt = Some(u.arbitrary()?);
            }
            if f.ieth.is_some() {
                f.ieth = Some(rkey(u, v)?);
            }
            if f.atomic_ack_eth.is_some() {
                f.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig: u.arbitrary()?,
                });
            }
        }
        8 => {
            let any_pkey = u.arbitrary()?;
            f.bth.pkey = *u.choose(&[0xffff, 0x7fff, 0, any_pkey])?;
            let any_tver = u.arbitrary::<u8>()? & 0xf;
            f.bth.tver = *u.choose(&[0, any_tver])?;
        }
        9 => f.bth.dest_qp = u.arbitrary::<u32>()? & 0xff_ffff,
        _ => {}
    }
    Ok(())
}

/// A new opcode (mostly RC), with the headers it carries taken over from the old packet
/// where it had them and made up where not, and a payload it may have.
fn change_opcode(u: &mut Unstructured<'_>, v: &Victim<'_>, f: &mut Forged) -> Result<()> {
    let any = u.ratio(1, 8)?;
    let choices: Vec<_> = Opcode::all()
        .filter(|i| any || i.transport == Transport::Rc)
        .collect();
    let info = *u.choose(&choices)?;
    f.bth.opcode = info.opcode;
    let needs = |h| info.headers.contains(h);
    f.reth = keep_or(needs(HeaderSet::RETH), f.reth, || reth(u, v))?;
    f.aeth = keep_or(needs(HeaderSet::AETH), f.aeth, || aeth(u))?;
    f.immdt = keep_or(needs(HeaderSet::IMMDT), f.immdt, || u.arbitrary())?;
    f.ieth = keep_or(needs(HeaderSet::IETH), f.ieth, || rkey(u, v))?;
    f.deth = keep_or(needs(HeaderSet::DETH), f.deth, || {
        Ok(DethRepr {
            qkey: u.arbitrary()?,
            src_qp: u.arbitrary::<u32>()? & 0xff_ffff,
        })
    })?;
    f.atomic_eth = keep_or(needs(HeaderSet::ATOMIC_ETH), f.atomic_eth, || {
        atomic_eth(u, v)
    })?;
    f.atomic_ack_eth = keep_or(needs(HeaderSet::ATOMIC_ACK_ETH), f.atomic_ack_eth, || {
        Ok(AtomicAckEthRepr {
            orig: u.arbitrary()?,
        })
    })?;
    f.feth = keep_or(needs(HeaderSet::FETH), f.feth, || {
        Ok(FethRepr {
            raw: u.arbitrary()?,
        })
    })?;
    if !info.has_payload {
        f.payload.clear();
    }
    if let Some(len) = info.fixed_payload_len {
        f.payload.resize(len, 0);
    }
    Ok(())
}

fn keep_or<T>(needed: bool, old: Option<T>, make: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    match (needed, old) {
        (false, _) => Ok(None),
        (true, Some(old)) => Ok(Some(old)),
        (true, None) => make().map(Some),
    }
}

/// A remote address: mostly in or at the edges of the exposed region, sometimes anywhere.
fn address(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<u64> {
    let e = v.exposed;
    Ok(match u.int_in_range(0..=6u8)? {
        0 | 1 => e.addr + u.int_in_range(0..=e.len)?,
        2 => (e.addr + e.len).wrapping_sub(u.int_in_range(0..=64)?),
        3 => e.addr.wrapping_sub(u.int_in_range(1..=64)?),
        4 => v.private.addr + u.int_in_range(0..=v.private.len)?,
        5 => u64::MAX - u.int_in_range(0..=4096)?,
        _ => u.arbitrary()?,
    })
}

/// An rkey: mostly the exposed region's, sometimes the private one's, its lkey, or any.
fn rkey(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<u32> {
    Ok(match u.int_in_range(0..=5u8)? {
        0..=2 => v.exposed.rkey,
        3 => v.private.rkey,
        4 => v.exposed.lkey,
        _ => u.arbitrary()?,
    })
}

/// A DMA length: small, about the MTU or the region, or any.
fn dma_len(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<u32> {
    let mtu = v.mtu as u32;
    let region = v.exposed.len as u32;
    Ok(match u.int_in_range(0..=4u8)? {
        0 => u.int_in_range(0..=64)?,
        1 => mtu * u.int_in_range(1..=4)? + u.int_in_range(0..=2)? - 1,
        2 => region.wrapping_add(u.int_in_range(0..=2)?).wrapping_sub(1),
        3 => u32::MAX - u.int_in_range(0..=16)?,
        _ => u.arbitrary()?,
    })
}

fn reth(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<RethRepr> {
    Ok(RethRepr {
        va: address(u, v)?,
        rkey: rkey(u, v)?,
        dma_len: dma_len(u, v)?,
    })
}

fn aeth(u: &mut Unstructured<'_>) -> Result<AethRepr> {
    Ok(AethRepr {
        syndrome: u.arbitrary()?,
        msn: u.arbitrary::<u32>()? & 0xff_ffff,
    })
}

fn atomic_eth(u: &mut Unstructured<'_>, v: &Victim<'_>) -> Result<AtomicEthRepr> {
    let mut va = address(u, v)?;
    if u.ratio(3, 4)? {
        va &= !7;
    }
    Ok(AtomicEthRepr {
        va,
        rkey: rkey(u, v)?,
        swap_add: u.arbitrary()?,
        compare: u.arbitrary()?,
    })
}
