//! UD receive: one packet per message, Q_Key checked, the 40-byte GRH area filled in front of
//! the data, the sender's QPN in the completion. Nothing is acknowledged; whatever cannot be
//! received is dropped and counted.

use softverbs_api::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::address::GRH_BYTES;
use super::env::Env;
use super::outputs::{Completion, CompletionTarget, Outputs};
use super::qp::TransportQp;
use super::recv_queue;
use crate::wire::{OpKind, OpcodeInfo, RoceRepr};

/// A UD request for this QP (its state already checked by the caller).
pub fn on_request(
    qp: &mut TransportQp,
    pkt: &RoceRepr<'_>,
    info: &OpcodeInfo,
    env: &Env<'_>,
    out: &mut Outputs,
) {
    let Some(deth) = pkt.deth else {
        qp.counters.dropped_packets += 1;
        return;
    };
    // A UD message is one SEND ONLY packet of at most the MTU.
    let fits = pkt.payload.len() <= qp.port_mtu.bytes() as usize;
    if info.kind != OpKind::Send || !info.is_first() || !info.is_last() || !fits {
        qp.counters.dropped_packets += 1;
        return;
    }
    if deth.qkey != qp.attr.qkey {
        qp.counters.qkey_violations += 1;
        qp.counters.dropped_packets += 1;
        return;
    }
    // No receive WQE: UD has no RNR, the datagram is lost.
    let Some(wqe) = recv_queue::take(qp, env, out) else {
        qp.counters.dropped_packets += 1;
        return;
    };
    let byte_len = (GRH_BYTES + pkt.payload.len()) as u64;
    let mut wc = WorkCompletion {
        wr_id: wqe.wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: byte_len as u32,
        qp_num: qp.qpn,
        src_qp: deth.src_qp,
        wc_flags: WcFlags::GRH,
        ..WorkCompletion::default()
    };
    if byte_len > wqe.length {
        // Too long for the buffer: rxe drops it and keeps the WQE, except that an SRQ's WQE
        // completes in error (class D / E of the IB spec).
        qp.counters.dropped_packets += 1;
        if qp.srq.is_some() {
            wc.status = WcStatus::RemInvReqErr;
            wc.byte_len = 0;
            wc.wc_flags = WcFlags::empty();
            push(wc, out);
        } else {
            recv_queue::give_back(qp, env, wqe);
        }
        return;
    }
    let grh = env.rx.map(|h| h.grh_bytes()).unwrap_or([0; GRH_BYTES]);
    let placed = env.mem.scatter(qp.pd, &wqe.sges, 0, &grh).and_then(|()| {
        if pkt.payload.is_empty() {
            Ok(())
        } else {
            env.mem
                .scatter(qp.pd, &wqe.sges, GRH_BYTES as u64, pkt.payload)
        }
    });
    if placed.is_err() {
        // The receive buffer is not writable: a local error of this QP.
        wc.status = WcStatus::LocProtErr;
        wc.byte_len = 0;
        wc.wc_flags = WcFlags::empty();
        push(wc, out);
        qp.enter_error(out);
        return;
    }
    if let Some(imm) = pkt.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    push(wc, out);
}

fn push(wc: WorkCompletion, out: &mut Outputs) {
    out.completions.push(Completion {
        target: CompletionTarget::Recv,
        wc,
    });
}
