//! The data path of a device: a transport call on a QP under its lock, and the delivery
//! of what it produced (packets to the link, completions to CQs, async events), with the
//! ACK hold of a receive batch (`ack_hold`) and the deferred and lazy ACKs.

use std::io;
use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;
use softverbs_api::{AsyncElement, AsyncEvent, AsyncEventKind, QpType};

use super::device::{Device, QpEntry};
use crate::transport::{
    CallTime, CompletionTarget, Env, NetHeader, OutPacket, Outputs, TransportQp,
};

thread_local! {
    /// One emptied [`Outputs`] per thread, reused by the next transport call.
    static SPARE_OUTPUTS: std::cell::Cell<Option<Outputs>> = const { std::cell::Cell::new(None) };
}

impl Device {
    /// Runs a transport call on the QP of `entry` under its lock, with the environment it
    /// needs (memory, address handles, its SRQ, the received packet's IP header), and
    /// delivers what the call produced. `None` (counted in `destroyed_qp_calls`), without
    /// calling, when the QP was destroyed since the caller looked the entry up: its SRQ
    /// and memory may be gone too.
    pub(crate) fn on_qp<R>(
        &self,
        entry: &QpEntry,
        rx: Option<NetHeader>,
        call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> R,
    ) -> Option<R> {
        // Only a UD send resolves an address handle: the table's read lock (two atomic
        // read-modify-writes) is not taken for every other call, each receive included.
        let ahs = (entry.init.qp_type == QpType::Ud).then(|| self.ahs.read());
        let mut qp = self.lock_live_qp(entry)?;
        let read_clock = || super::receive_batch::batch_now(&self.clock);
        let env = Env {
            mem: &self.mem,
            now: CallTime::when_needed(&read_clock),
            srq: entry.srq.as_deref(),
            ahs: ahs.as_deref(),
            rx,
            // send_packets reads payloads from memory at send time (see there).
            payload_by_reference: true,
        };
        // The vectors of the last call's outputs (emptied by deliver), so a call allocates
        // nothing to return its packets and completions.
        let mut out = SPARE_OUTPUTS.with(|s| s.take()).unwrap_or_default();
        let result = call(&mut qp, &env, &mut out);
        let first_request = std::mem::take(&mut out.first_request_accepted);
        self.deliver(entry, &qp, &mut out);
        // A READ is answered a burst at a time, each sent (its buffers back in the pool)
        // before the next is made: memory per READ is a burst's, whatever its length.
        while qp.responses_pending() {
            qp.continue_responses(&env, &mut out);
            self.deliver(entry, &qp, &mut out);
        }
        if out.is_empty() {
            SPARE_OUTPUTS.with(|s| s.set(Some(out)));
        }
        let qpn = qp.qpn;
        drop((qp, ahs));
        if first_request {
            // Outside the QP's lock: the handler may modify QPs (through its own queue).
            let handler = self.comm_est_handler.read().clone();
            if let Some(handler) = handler {
                handler.on_comm_est(qpn);
            }
        }
        Some(result)
    }

    /// [`Device::on_qp`] for a call that needs no environment (no memory, address handle or
    /// clock: posting receives): the QP's lock only, and delivery only if the call produced
    /// something (a QP in the error state flushes what was posted). A ping-pong reposts a
    /// receive per message, and the full call's address-handle lock, spare outputs and
    /// delivery cost it about 300 instructions for nothing.
    pub(crate) fn on_qp_alone<R>(
        &self,
        entry: &QpEntry,
        call: impl FnOnce(&mut TransportQp, &mut Outputs) -> R,
    ) -> Option<R> {
        let mut qp = self.lock_live_qp(entry)?;
        // Three empty vectors: nothing is allocated unless the call produces something.
        let mut out = Outputs::default();
        let result = call(&mut qp, &mut out);
        if !out.is_empty() {
            self.deliver(entry, &qp, &mut out);
        }
        Some(result)
    }

    /// The QP of `entry`, locked; `None` (counted in `destroyed_qp_calls`) if it was
    /// destroyed since the caller looked the entry up.
    fn lock_live_qp<'e>(&self, entry: &'e QpEntry) -> Option<MutexGuard<'e, TransportQp>> {
        let qp = entry.qp.lock();
        if entry.destroyed.load(Ordering::Relaxed) {
            self.counters
                .destroyed_qp_calls
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(qp)
    }

    /// Sends the deferred ACKs, if any (see `ack_hold`).
    pub(crate) fn flush_deferred_acks(&self) {
        if self.deferred_acks.pending() {
            let mut none = Vec::new();
            if self.port_active() {
                self.send_packets(&mut none);
            } else {
                drop(self.deferred_acks.take_into(&mut none));
                for p in none {
                    crate::net::packet_pool::give(p.bytes);
                }
            }
        }
    }

    /// Sends every ACK the device owes: those application threads deferred (see
    /// `DeferredAcks`) and those nobody asked for (`LazyAcks`). When an engine nap ends
    /// (the application may have gone quiet), when the device closes, and before a QP
    /// changes state or goes (a disconnect moves it to the error state) or a CM message
    /// leaves, so that none is overtaken by what follows: a peer's last SENDs before a
    /// disconnect would otherwise still wait for their ACK when the DREQ reaches it, and
    /// complete with a flush error (kernel rxe ACKs as the packet arrives).
    pub(crate) fn flush_owed_acks(&self) {
        self.flush_deferred_acks();
        self.flush_lazy_acks();
    }

    /// Sends the ACKs that QPs owe for requests that asked for none (see `LazyAcks`), all
    /// in one send call: for the engine thread when the traffic pauses, and before a state
    /// change. Inside a receive batch (the connection manager answering a request) they
    /// join the batch's held ACKs instead.
    pub(crate) fn flush_lazy_acks(&self) {
        if !self.lazy_acks.pending() {
            return;
        }
        let in_batch = super::ack_hold::holding();
        if !in_batch {
            super::ack_hold::begin();
        }
        for qpn in self.lazy_acks.take() {
            let entry = self.qps.read().get(&qpn).cloned();
            if let Some(entry) = entry {
                self.on_qp(&entry, None, |qp, _env, out| qp.send_lazy_ack(out));
            }
        }
        if in_batch {
            return;
        }
        let mut acks = super::ack_hold::end();
        if self.port_active() {
            self.send_packets(&mut acks);
        }
    }

    /// Sends the packets, queues the completions (raising completion events and CQ_ERR)
    /// and the async events a transport call produced.
    pub(crate) fn deliver(&self, entry: &QpEntry, qp: &TransportQp, out: &mut Outputs) {
        if self.port_active() {
            if !out.packets.is_empty() {
                // Inside a receive batch, plain ACKs wait for its end (see ack_hold).
                let mut superseded = Vec::new();
                let mut first = super::ack_hold::hold(&mut out.packets, &mut superseded);
                for bytes in superseded {
                    crate::net::packet_pool::give(bytes);
                }
                // One send call for all of it (deferred ACKs join in send_packets).
                if first.is_empty() {
                    self.send_packets(&mut out.packets);
                } else {
                    first.append(&mut out.packets);
                    self.send_packets(&mut first);
                }
            }
        } else {
            // A port that is down sends nothing, like an unplugged cable: reliable QPs
            // retransmit once it is up again (or run out of retries).
            let n = out.packets.drain(..).count() as u64;
            self.counters
                .port_down_drops
                .fetch_add(n, Ordering::Relaxed);
        }
        // Events about the QP, or about its SRQ (which belongs to the same context). Queued
        // before the completions, so that a consumer who sees an error completion finds the
        // event that went with it already there.
        for event in out.events.drain(..) {
            self.raise_async(entry.owner, event);
        }
        if !out.completions.is_empty() {
            // Whoever takes these completions may answer from another thread before this
            // receive batch ends: the ACKs it holds must leave ahead of that.
            super::ack_hold::publish(&self.deferred_acks);
        }
        for c in out.completions.drain(..) {
            let cq = match c.target {
                CompletionTarget::Send => &entry.send_cq,
                CompletionTarget::Recv => &entry.recv_cq,
            };
            // One packet per call: its SE bit belongs to the receive completion it made.
            let solicited = out.solicited && c.target == CompletionTarget::Recv;
            let resets = entry.resets.load(Ordering::Relaxed);
            if cq.push_after_resets(c.wc, solicited, resets) {
                let event = AsyncEvent {
                    kind: AsyncEventKind::CqErr,
                    element: AsyncElement::Cq(cq.id()),
                };
                self.raise_async(cq.owner(), event);
            }
        }
        out.solicited = false;
        out.entered_error = false;
        if std::mem::take(&mut out.owes_lazy_ack) {
            self.lazy_acks.owe(qp.qpn);
        }
        // Read before it is written: the hint rarely moves, and a locked write per call
        // would take the line from the engine thread that reads it.
        if let Some(d) = qp.next_deadline_ns() {
            if d < self.deadline_hint_ns.load(Ordering::Acquire) {
                self.deadline_hint_ns.fetch_min(d, Ordering::AcqRel);
            }
        }
    }

    /// Sends `packets` (emptying the vector) and recycles their buffers.
    pub(crate) fn send_packets(&self, packets: &mut Vec<OutPacket>) {
        // Deferred ACKs join in the same call (where, see take_into); other senders wait
        // until it returned.
        let acks_in_flight = self.deferred_acks.take_into(packets);
        if packets.is_empty() {
            return;
        }
        let sent = if packets.iter().any(|p| p.payload.is_some()) {
            self.send_from_memory(packets)
        } else {
            self.link.send_batch(packets)
        };
        drop(acks_in_flight);
        if let Err(e) = sent {
            self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(device = %self.config.name, error = %e, "send failed");
        }
        for p in packets.drain(..) {
            crate::net::packet_pool::give(p.bytes);
        }
    }

    /// Sends packets of which some left their payload in registered memory: the table is
    /// held for reading across the send, so no region goes away while the link (or the
    /// kernel) reads it. A packet whose region went since it was built (deregistered
    /// meanwhile) is dropped like a lost packet: the requester's retry finds the SGE
    /// invalid and completes the WQE in error.
    fn send_from_memory(&self, packets: &mut Vec<OutPacket>) -> io::Result<()> {
        let reader = self.mem.reader();
        let (payloads, gone) = crate::transport::payloads_in_memory(packets, &reader);
        if gone > 0 {
            self.counters
                .payload_gone_drops
                .fetch_add(gone as u64, Ordering::Relaxed);
        }
        self.link.send_batch_from(packets, &payloads)
    }
}
