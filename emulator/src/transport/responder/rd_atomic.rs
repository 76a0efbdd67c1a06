//! The responder's READ / atomic resources (rxe's `resp_res`): what it keeps of the latest
//! READ, atomic, ATOMIC WRITE and FLUSH requests (at most `max_dest_rd_atomic` of them) to
//! answer their duplicates, and the stream of a READ's responses, made a bounded burst at a
//! time.
//!
//! A hostile peer is why both exist. A READ's responses were once built all at once, one
//! packet buffer each, so one 32-byte request for 128 MiB held over half a GiB; now a call
//! makes at most [`READ_RESPONSE_BURST`] of them and the driver asks for the rest once those
//! left. And a "duplicate" READ at any past PSN used to be executed with the range it
//! carried (64 KiB of responses for a 60-byte datagram); now only a stored READ is answered
//! again, and only within its range.

use softverbs_api::{AccessFlags, QpState};

use super::access::{accessor, nak_for, qp_allows};
use super::answers::{
    count_message, emit_from_memory, nak_and_fail, send_atomic_ack, send_empty_read_response,
};
use crate::transport::env::Env;
use crate::transport::outputs::Outputs;
use crate::transport::qp::TransportQp;
use crate::wire::{AethRepr, BthRepr, HeaderSet, NakCode, OpKind, Opcode, Psn, RoceRepr};

/// Most READ responses one transport call makes: the window a READ of any length is sent
/// in (rxe sends a bounded burst per run of its responder task, then resumes). One send
/// call's worth of the UDP link (`net::batched_io::MAX_SEND_DATAGRAMS`): about 1 MiB of
/// packet buffers at MTU 4096. 64 measured slower for 1 MiB READs on loopback.
pub const READ_RESPONSE_BURST: usize = 256;

/// How a stored request answers its duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// A READ of `len` bytes at `va` of `rkey`: sent again, or part of it.
    Read { rkey: u32, va: u64, len: u32 },
    /// Compare-and-swap or fetch-and-add: the original value it returned (never executed
    /// twice).
    Atomic { orig: u64 },
    /// ATOMIC WRITE: an empty READ RESPONSE ONLY.
    Empty,
}

/// A READ / atomic request the responder executed, kept to answer its duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdAtomicResource {
    first_psn: Psn,
    /// PSNs it took (its responses; 1 for atomics).
    psn_count: u32,
    answer: Answer,
}

impl RdAtomicResource {
    fn covers(&self, psn: Psn) -> bool {
        let into = psn.diff(self.first_psn);
        into >= 0 && (into as u32) < self.psn_count
    }
}

/// The READ responses still to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStream {
    rkey: u32,
    /// Address of the next response's bytes.
    va: u64,
    /// Bytes still to send.
    left: u32,
    /// PSN of the next response.
    psn: Psn,
    /// The next response is at the READ's first PSN (FIRST or ONLY).
    at_first: bool,
}

/// Keeps `resource`, forgetting the oldest beyond `max_dest_rd_atomic` (the requester
/// never has more outstanding, so a retransmission always finds its request here).
fn store(qp: &mut TransportQp, resource: RdAtomicResource) {
    let depth = qp.attr.max_dest_rd_atomic.max(1) as usize;
    let kept = &mut qp.resp.rd_atomic;
    while kept.len() >= depth {
        kept.pop_front();
    }
    kept.push_back(resource);
}

/// The number of responses (PSNs) of a READ of `len` bytes.
fn responses_for(qp: &TransportQp, len: u32) -> u32 {
    len.div_ceil(qp.attr.path_mtu.bytes()).max(1)
}

/// A new READ request at the expected PSN: checked, stored, and its first burst of responses
/// sent (the driver sends the rest with [`continue_read`]).
pub(super) fn execute_read(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    let Some(reth) = pkt.reth else { return };
    if !qp_allows(qp, AccessFlags::REMOTE_READ) {
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return;
    }
    if let Err(e) = env
        .mem
        .remote_slice(accessor(qp), reth.rkey, reth.va, reth.dma_len)
    {
        nak_and_fail(qp, psn, nak_for(e), None, out);
        return;
    }
    count_message(qp);
    let psn_count = responses_for(qp, reth.dma_len);
    store(
        qp,
        RdAtomicResource {
            first_psn: psn,
            psn_count,
            answer: Answer::Read {
                rkey: reth.rkey,
                va: reth.va,
                len: reth.dma_len,
            },
        },
    );
    qp.resp.epsn = psn.add(psn_count);
    qp.resp.read_out = Some(ReadStream {
        rkey: reth.rkey,
        va: reth.va,
        left: reth.dma_len,
        psn,
        at_first: true,
    });
    continue_read(qp, env, out);
}

/// Records an executed atomic's original value and answers it.
pub(super) fn answer_atomic(qp: &mut TransportQp, psn: Psn, orig: u64, out: &mut Outputs) {
    store(
        qp,
        RdAtomicResource {
            first_psn: psn,
            psn_count: 1,
            answer: Answer::Atomic { orig },
        },
    );
    count_message(qp);
    qp.resp.epsn = psn.next();
    send_atomic_ack(qp, psn, orig, out);
}

/// Answers an executed ATOMIC WRITE or FLUSH, recording an ATOMIC WRITE. A FLUSH is not
/// kept: it takes no `max_rd_atomic` credit (as in rxe), so a requester may have more of
/// them outstanding than are kept, and keeping them would push out READs whose duplicates
/// are still to come. Its duplicates get the same empty answer, with nothing executed.
pub(super) fn answer_empty(qp: &mut TransportQp, psn: Psn, kind: OpKind, out: &mut Outputs) {
    if kind == OpKind::AtomicWrite {
        store(
            qp,
            RdAtomicResource {
                first_psn: psn,
                psn_count: 1,
                answer: Answer::Empty,
            },
        );
    }
    count_message(qp);
    qp.resp.epsn = psn.next();
    send_empty_read_response(qp, psn, out);
}

/// A READ / atomic request at a past PSN: answered again only if it is one of the stored
/// requests (rxe's duplicate_request); a READ only within its stored range and key. Anything
/// else is dropped: a past PSN that carried a SEND, or a forged range, is never executed.
pub(super) fn answer_duplicate(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    kind: OpKind,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    let found = qp
        .resp
        .rd_atomic
        .iter()
        .rev()
        .find(|r| r.covers(psn))
        .copied();
    match (kind, found.map(|r| (r, r.answer))) {
        (OpKind::ReadRequest, Some((res, Answer::Read { rkey, va, len }))) => {
            if let Some(stream) = replay_of(qp, pkt, &res, (rkey, va, len), env) {
                qp.resp.read_out = Some(stream);
                continue_read(qp, env, out);
                return;
            }
        }
        (OpKind::CompareSwap | OpKind::FetchAdd, Some((res, Answer::Atomic { orig })))
            if res.first_psn == psn =>
        {
            return send_atomic_ack(qp, psn, orig, out);
        }
        (OpKind::AtomicWrite, Some((res, Answer::Empty))) if res.first_psn == psn => {
            return send_empty_read_response(qp, psn, out);
        }
        (OpKind::Flush, _) => return send_empty_read_response(qp, psn, out),
        _ => {}
    }
    qp.counters.dropped_packets += 1;
}

/// The responses a duplicate READ asks for again, if it is within the stored READ `res`
/// (same key; its range inside the stored one; its responses inside the stored PSNs) and
/// the memory is still readable.
fn replay_of(
    qp: &TransportQp,
    pkt: &RoceRepr<'_>,
    res: &RdAtomicResource,
    (rkey, va, len): (u32, u64, u32),
    env: &Env<'_>,
) -> Option<ReadStream> {
    let reth = pkt.reth?;
    let psn = pkt.bth.psn;
    let end = va.checked_add(u64::from(len))?;
    let asked_end = reth.va.checked_add(u64::from(reth.dma_len))?;
    let into = psn.diff(res.first_psn) as u32;
    let inside = reth.rkey == rkey && reth.va >= va && asked_end <= end;
    if !inside || into + responses_for(qp, reth.dma_len) > res.psn_count {
        return None;
    }
    env.mem
        .remote_slice(accessor(qp), reth.rkey, reth.va, reth.dma_len)
        .ok()?;
    Some(ReadStream {
        rkey,
        va: reth.va,
        left: reth.dma_len,
        psn,
        at_first: into == 0,
    })
}

/// Sends the next burst (at most [`READ_RESPONSE_BURST`]) of the READ being answered. The
/// opcodes follow the responses' places in the READ, as rxe numbers them: FIRST or ONLY at
/// its first PSN, MIDDLE or LAST after it (a replay from a later PSN starts with MIDDLE).
pub(crate) fn continue_read(qp: &mut TransportQp, env: &Env<'_>, out: &mut Outputs) {
    let Some(mut s) = qp.resp.read_out.take() else {
        return;
    };
    let ready = matches!(
        qp.state(),
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    );
    if !ready {
        return;
    }
    // Checked again for each burst: the region may have gone since the last one. If it
    // did, the rest is not sent; the requester asks again and meets the check.
    let Ok(data) = env.mem.remote_slice(accessor(qp), s.rkey, s.va, s.left) else {
        return;
    };
    let mtu = qp.attr.path_mtu.bytes();
    let mut offset = 0u32;
    for _ in 0..READ_RESPONSE_BURST {
        let part_len = (s.left - offset).min(mtu);
        let last = s.left - offset <= mtu;
        let opcode = match (s.at_first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let part = data.and_then(|d| d.part(offset..offset + part_len));
        let Some(stand_in) = crate::net::packet::payload_stand_in(part_len as usize) else {
            return;
        };
        let mut repr = RoceRepr::new(BthRepr::new(opcode, qp.attr.dest_qp_num, s.psn), stand_in);
        if opcode
            .info()
            .is_some_and(|i| i.headers.contains(HeaderSet::AETH))
        {
            repr.aeth = Some(AethRepr::ack(qp.resp.msn));
        }
        emit_from_memory(qp, &repr, part, env, out);
        offset += part_len;
        s.psn = s.psn.next();
        s.at_first = false;
        if last {
            return;
        }
    }
    s.va = s.va.wrapping_add(u64::from(offset));
    s.left -= offset;
    qp.resp.read_out = Some(s);
}
