//! The responder's work: checks incoming requests against the expected PSN, executes them against
//! receive WQEs and memory, and answers with ACK / NAK / READ responses / atomic ACKs as rxe
//! does.

use softverbs_api::{AccessFlags, QpState, QpType, WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::access::{accessor, nak_for, qp_allows};
use super::answers::{accept, complete_recv, count_message, nak_and_fail, send_ack, send_rnr_nak};
use super::rd_atomic;
use crate::transport::env::Env;
use crate::transport::outputs::{Completion, CompletionTarget, Outputs};
use crate::transport::qp::TransportQp;
use crate::transport::recv_queue;
use crate::transport::responder::{RecvInProgress, ResponderPhase, WriteInProgress};
use crate::transport::wqe::RecvWqe;
use crate::wire::{AethRepr, FethRepr, NakCode, OpKind, OpcodeInfo, Psn, RoceRepr, Transport};

/// A request packet for this QP.
pub fn on_request(qp: &mut TransportQp, pkt: &RoceRepr<'_>, env: &Env<'_>, out: &mut Outputs) {
    let Some(info) = pkt.bth.opcode.info() else {
        return;
    };
    let transport_ok = matches!(
        (qp.qp_type, info.transport),
        (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
    );
    let ready = matches!(
        qp.state(),
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    );
    // The driver sends a READ's responses to the end before it hands over the next packet
    // (see `TransportQp::continue_responses`); one that comes earlier cannot be answered in
    // order, and the requester sends it again.
    if !transport_ok || !ready || qp.resp.responses_pending() {
        qp.counters.dropped_packets += 1;
        return;
    }
    match qp.qp_type {
        QpType::Ud => return crate::transport::ud::on_request(qp, pkt, info, env, out),
        QpType::Uc => {
            if !uc_in_sequence(qp, pkt, info, env) {
                return;
            }
        }
        QpType::Rc => {
            if !rc_in_sequence(qp, pkt, info, env, out) {
                return;
            }
        }
    }
    if !fits_path_mtu(qp, pkt, info) {
        // As rxe's check_length: refused before anything of it is executed.
        if qp.qp_type == QpType::Uc {
            let wqe = qp.resp.current.take().map(|c| c.wqe);
            uc_drop(qp, env, wqe, WcStatus::RemInvReqErr, out);
        } else {
            nak_and_fail(qp, pkt.bth.psn, NakCode::InvalidRequest, None, out);
        }
        return;
    }
    if needs_rd_atomic_resource(info) && qp.attr.max_dest_rd_atomic == 0 {
        // As rxe's check_resource: with no READ / atomic resources (max_dest_rd_atomic 0
        // at RTR), such a request is invalid (class C: NAK, the QP goes to error).
        nak_and_fail(qp, pkt.bth.psn, NakCode::InvalidRequest, None, out);
        return;
    }
    match info.kind {
        OpKind::Send => receive_send(qp, pkt, info, env, out),
        OpKind::RdmaWrite => receive_write(qp, pkt, info, env, out),
        OpKind::ReadRequest => rd_atomic::execute_read(qp, pkt, env, out),
        OpKind::CompareSwap | OpKind::FetchAdd => execute_atomic(qp, pkt, info, env, out),
        OpKind::AtomicWrite | OpKind::Flush => execute_write_or_flush(qp, pkt, info, env, out),
        _ => nak_and_fail(qp, pkt.bth.psn, NakCode::InvalidRequest, None, out),
    }
}

/// Whether a request takes one of the responder's READ / atomic resources (rxe's
/// `RXE_READ_OR_ATOMIC_MASK | RXE_ATOMIC_WRITE_MASK`; FLUSH takes none).
fn needs_rd_atomic_resource(info: &OpcodeInfo) -> bool {
    matches!(
        info.kind,
        OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd | OpKind::AtomicWrite
    )
}

/// RC: a request is executed only at the expected PSN. A gap earns one PSN sequence NAK, a
/// duplicate its old answer; a new message may start only once the previous one ended.
fn rc_in_sequence(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) -> bool {
    let psn = pkt.bth.psn;
    let distance = psn.diff(qp.resp.epsn);
    if distance > 0 {
        // A gap: ask once for a go-back-N from the PSN we expect.
        qp.counters.dropped_packets += 1;
        if qp.resp.phase != ResponderPhase::AwaitingRetransmission {
            qp.resp.phase = ResponderPhase::AwaitingRetransmission;
            qp.counters.seq_err_naks_sent += 1;
            let epsn = qp.resp.epsn;
            let nak = AethRepr::nak(NakCode::PsnSequenceError, qp.resp.msn);
            send_ack(qp, epsn, nak, out);
        }
        return false;
    }
    if distance < 0 {
        qp.counters.duplicate_requests += 1;
        answer_duplicate(qp, pkt, info, env, out);
        return false;
    }
    qp.resp.phase = ResponderPhase::InSequence;
    if starts_message(info) && qp.resp.in_message() {
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return false;
    }
    true
}

/// UC: no ACKs and no retransmissions. A missing packet drops the whole message it belongs
/// to (its receive WQE is used again for the next one); the next FIRST or ONLY packet starts
/// over at whatever PSN it carries (as rxe's check_psn / check_op_seq do).
fn uc_in_sequence(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
) -> bool {
    let starts = starts_message(info);
    if qp.resp.phase == ResponderPhase::DroppingMessage || pkt.bth.psn != qp.resp.epsn {
        abandon_message(qp, env);
        if !starts {
            drop_rest_of_message(qp);
            return false;
        }
        qp.resp.phase = ResponderPhase::InSequence;
    }
    if starts && qp.resp.in_message() {
        // The previous message never got its LAST: it is dropped, this one starts.
        abandon_message(qp, env);
    }
    if !starts && !qp.resp.in_message() {
        // The FIRST of this message was dropped (no receive WQE, say): so is the rest.
        drop_rest_of_message(qp);
        return false;
    }
    true
}

/// Whether a SEND or WRITE packet carries what the path MTU allows at its place in the
/// message: a FIRST or MIDDLE exactly the MTU, a LAST 1 to MTU bytes, an ONLY at most the
/// MTU. (Other requests carry fixed payloads the parser already checked.)
fn fits_path_mtu(qp: &TransportQp, pkt: &RoceRepr<'_>, info: &OpcodeInfo) -> bool {
    if !matches!(info.kind, OpKind::Send | OpKind::RdmaWrite) {
        return true;
    }
    let mtu = qp.attr.path_mtu.bytes() as usize;
    let len = pkt.payload.len();
    match (info.is_first(), info.is_last()) {
        (true, true) => len <= mtu,
        (false, true) => len > 0 && len <= mtu,
        _ => len == mtu,
    }
}

/// True for the packets that begin a message: FIRST and ONLY (READs and atomics are whole
/// messages in one packet).
fn starts_message(info: &OpcodeInfo) -> bool {
    info.is_first()
        || matches!(
            info.kind,
            OpKind::ReadRequest
                | OpKind::CompareSwap
                | OpKind::FetchAdd
                | OpKind::AtomicWrite
                | OpKind::Flush
        )
}

/// UC: this packet is dropped and so is the rest of its message, up to the next FIRST or
/// ONLY.
fn drop_rest_of_message(qp: &mut TransportQp) {
    qp.resp.phase = ResponderPhase::DroppingMessage;
    qp.resp.write = None;
    qp.counters.dropped_packets += 1;
}

/// Forgets the message being received without completing it; its receive WQE goes back to
/// where it came from, unused.
fn abandon_message(qp: &mut TransportQp, env: &Env<'_>) {
    qp.resp.write = None;
    if let Some(current) = qp.resp.current.take() {
        recv_queue::give_back(qp, env, current.wqe);
    }
}

/// UC: a message that cannot be received is dropped, and the QP stays usable (rxe's class
/// D). Its receive WQE, if it took one, is used again; an SRQ's WQE instead completes with
/// `srq_status` (class E), as rxe does.
fn uc_drop(
    qp: &mut TransportQp,
    env: &Env<'_>,
    wqe: Option<RecvWqe>,
    srq_status: WcStatus,
    out: &mut Outputs,
) {
    drop_rest_of_message(qp);
    let Some(wqe) = wqe else { return };
    if qp.srq.is_some() {
        out.completions.push(Completion {
            target: CompletionTarget::Recv,
            wc: WorkCompletion {
                wr_id: wqe.wr_id,
                status: srq_status,
                opcode: WcOpcode::Recv,
                qp_num: qp.qpn,
                ..WorkCompletion::default()
            },
        });
    } else {
        recv_queue::give_back(qp, env, wqe);
    }
}

/// A request already executed arrived again (C9-105 ff.): SENDs and WRITEs are acknowledged
/// again, never executed twice; READs and atomics are answered from the stored requests
/// (`rd_atomic`), and nothing else is.
fn answer_duplicate(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    match info.kind {
        OpKind::ReadRequest
        | OpKind::CompareSwap
        | OpKind::FetchAdd
        | OpKind::AtomicWrite
        | OpKind::Flush => rd_atomic::answer_duplicate(qp, pkt, info.kind, env, out),
        _ if pkt.bth.ack_req || info.is_last() => {
            let prev = qp.resp.epsn.add(Psn::MASK);
            send_ack(qp, prev, AethRepr::ack(qp.resp.msn), out);
        }
        _ => {}
    }
}

fn receive_send(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    if info.is_first() {
        let Some(wqe) = recv_queue::take(qp, env, out) else {
            no_recv_wqe(qp, psn, out);
            return;
        };
        qp.resp.current = Some(RecvInProgress { wqe, offset: 0 });
    }
    let Some(mut current) = qp.resp.current.take() else {
        // MIDDLE or LAST without a FIRST.
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return;
    };
    let len = pkt.payload.len() as u64;
    if current.offset + len > current.wqe.length {
        if qp.qp_type == QpType::Uc {
            uc_drop(qp, env, Some(current.wqe), WcStatus::RemInvReqErr, out);
            return;
        }
        let failed = Some((current.wqe.wr_id, WcStatus::LocLenErr));
        nak_and_fail(qp, psn, NakCode::InvalidRequest, failed, out);
        return;
    }
    if !pkt.payload.is_empty()
        && env
            .mem
            .scatter(qp.pd, &current.wqe.sges, current.offset, pkt.payload)
            .is_err()
    {
        let failed = Some((current.wqe.wr_id, WcStatus::LocProtErr));
        nak_and_fail(qp, psn, NakCode::RemoteOperationalError, failed, out);
        return;
    }
    current.offset += len;
    if info.is_last() {
        let (wr_id, byte_len) = (current.wqe.wr_id, current.offset as u32);
        if let Some(rkey) = pkt.ieth {
            // SEND with invalidate: the named rkey must be a type 2 window bound through this
            // QP. If it is not, the request is invalid (IBTA; rxe ACKs it and fails only the
            // receive).
            if env.mem.invalidate_remote(qp.pd, qp.qpn, rkey).is_err() {
                let failed = Some((wr_id, WcStatus::RemInvReqErr));
                nak_and_fail(qp, psn, NakCode::InvalidRequest, failed, out);
                return;
            }
            complete_recv(qp, wr_id, WcOpcode::Recv, byte_len, None, out);
            if let Some(last) = out.completions.last_mut() {
                last.wc.wc_flags |= WcFlags::WITH_INV;
                last.wc.invalidated_rkey = rkey;
            }
        } else {
            complete_recv(qp, wr_id, WcOpcode::Recv, byte_len, pkt.immdt, out);
        }
    } else {
        qp.resp.current = Some(current);
    }
    accept(qp, pkt, info, out);
}

fn receive_write(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    let uc = qp.qp_type == QpType::Uc;
    if !qp_allows(qp, AccessFlags::REMOTE_WRITE) {
        if uc {
            uc_drop(qp, env, None, WcStatus::RemAccessErr, out);
        } else {
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        }
        return;
    }
    // WRITE with immediate takes a receive WQE at its last packet: without one, nothing of
    // this packet may happen yet (RNR NAK, and the packet comes again).
    if info.is_last() && pkt.immdt.is_some() && !recv_queue::available(qp, env) {
        no_recv_wqe(qp, psn, out);
        return;
    }
    let mut write = if info.is_first() {
        let Some(reth) = pkt.reth else {
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
            return;
        };
        let dma_len = u64::from(reth.dma_len);
        let checked = env.mem.check_remote(
            accessor(qp),
            reth.rkey,
            reth.va,
            dma_len,
            AccessFlags::REMOTE_WRITE,
        );
        if let Err(e) = checked {
            if uc {
                uc_drop(qp, env, None, WcStatus::RemAccessErr, out);
            } else {
                nak_and_fail(qp, psn, nak_for(e), None, out);
            }
            return;
        }
        WriteInProgress {
            rkey: reth.rkey,
            va: reth.va,
            dma_len,
            offset: 0,
        }
    } else {
        match qp.resp.write.take() {
            Some(w) => w,
            None => {
                nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
                return;
            }
        }
    };
    let len = pkt.payload.len() as u64;
    let overruns = write.offset + len > write.dma_len;
    let short = info.is_last() && write.offset + len != write.dma_len;
    if (overruns || short) && uc {
        uc_drop(qp, env, None, WcStatus::RemInvReqErr, out);
        return;
    }
    if overruns || short {
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return;
    }
    let va = write.va.wrapping_add(write.offset);
    if let Err(e) = env
        .mem
        .remote_write(accessor(qp), write.rkey, va, pkt.payload)
    {
        if uc {
            uc_drop(qp, env, None, WcStatus::RemAccessErr, out);
        } else {
            nak_and_fail(qp, psn, nak_for(e), None, out);
        }
        return;
    }
    write.offset += len;
    if info.is_last() {
        if let Some(imm) = pkt.immdt {
            if let Some(wqe) = recv_queue::take(qp, env, out) {
                let byte_len = write.dma_len as u32;
                complete_recv(
                    qp,
                    wqe.wr_id,
                    WcOpcode::RecvRdmaWithImm,
                    byte_len,
                    Some(imm),
                    out,
                );
            }
        } else {
            count_message(qp);
        }
    } else {
        qp.resp.write = Some(write);
    }
    accept(qp, pkt, info, out);
}

fn execute_atomic(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    let Some(a) = pkt.atomic_eth else { return };
    if !qp_allows(qp, AccessFlags::REMOTE_ATOMIC) {
        nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
        return;
    }
    let result = if info.kind == OpKind::CompareSwap {
        env.mem
            .atomic_cmp_swap(accessor(qp), a.rkey, a.va, a.compare, a.swap_add)
    } else {
        env.mem
            .atomic_fetch_add(accessor(qp), a.rkey, a.va, a.swap_add)
    };
    let orig = match result {
        Ok(v) => v,
        Err(e) => {
            nak_and_fail(qp, psn, nak_for(e), None, out);
            return;
        }
    };
    rd_atomic::answer_atomic(qp, psn, orig, out);
}

/// ATOMIC WRITE (8 bytes in one store; QP and MR need REMOTE_WRITE) or FLUSH (QP and MR need
/// the FLUSH access of its placement type), answered like rxe with an empty READ RESPONSE
/// ONLY.
fn execute_write_or_flush(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let psn = pkt.bth.psn;
    let Some(reth) = pkt.reth else { return };
    let result = if info.kind == OpKind::AtomicWrite {
        if !qp_allows(qp, AccessFlags::REMOTE_WRITE) {
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
            return;
        }
        let Ok(value) = <[u8; 8]>::try_from(pkt.payload) else {
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
            return;
        };
        env.mem
            .atomic_write(accessor(qp), reth.rkey, reth.va, value)
    } else {
        let Some(feth) = pkt.feth else { return };
        let persistent = feth.placement_type() == FethRepr::PLACEMENT_PERSISTENCE;
        let need = if persistent {
            AccessFlags::FLUSH_PERSISTENT
        } else {
            AccessFlags::FLUSH_GLOBAL
        };
        let known_level = feth.selectivity_level() <= FethRepr::SELECTIVITY_MEMORY_REGION;
        let known_type = matches!(
            feth.placement_type(),
            FethRepr::PLACEMENT_GLOBAL_VISIBILITY | FethRepr::PLACEMENT_PERSISTENCE
        );
        if !qp_allows(qp, need) || !known_level || !known_type {
            nak_and_fail(qp, psn, NakCode::InvalidRequest, None, out);
            return;
        }
        let whole = feth.selectivity_level() == FethRepr::SELECTIVITY_MEMORY_REGION;
        let len = u64::from(reth.dma_len);
        env.mem
            .flush(accessor(qp), reth.rkey, reth.va, len, persistent, whole)
    };
    if let Err(e) = result {
        nak_and_fail(qp, psn, nak_for(e), None, out);
        return;
    }
    rd_atomic::answer_empty(qp, psn, info.kind, out);
}

/// No receive WQE for a request that needs one: on RC the requester is told to wait
/// `min_rnr_timer` and send it again; on UC the message is dropped.
fn no_recv_wqe(qp: &mut TransportQp, psn: Psn, out: &mut Outputs) {
    if qp.qp_type == QpType::Uc {
        drop_rest_of_message(qp);
        return;
    }
    send_rnr_nak(qp, psn, out);
}
