//! ACK coalescing across a receive batch: while a thread hands a batch of received
//! datagrams to QPs, the plain ACKs the responders produce are held, and only the newest per
//! connection is sent when the batch ends (RC ACKs are cumulative: it acknowledges
//! everything the older ones did). A held ACK leaves before any other packet of the same
//! connection, so NAKs, READ responses and atomic ACKs keep their order.
//!
//! Why: a stream of small messages asks for an ACK on every message; without this the
//! responder sends one datagram per message, as many syscalls as the requester.
//!
//! When the batch was received by an application thread (polling its CQ), the batch's ACKs
//! are deferred rather than sent ([`DeferredAcks`]): the completion reaches the application
//! first, and the ACKs leave with the next packets the device sends (typically the answer
//! the application posts next: one send call instead of two, and none before the
//! completion), ahead of their own connection's packets and behind the others'; or at the
//! latest when the application polls an empty CQ and finds nothing on the link either,
//! polls an empty CQ for the second time, blocks, or the engine thread's next nap ends.
//!
//! A batch holds ACKs for at most [`RELEASE_EVERY`] datagrams. A requester may have only
//! 128 PSNs unacknowledged (rxe's limit, which ours keeps); a receive batch of up to 512
//! datagrams that held its ACKs to the end would stop such a stream for the whole batch,
//! and the receiver would then sit idle while the sender refills the window.
//!
//! A requester that coalesces ACKs leaves most messages without an ACK request, and the
//! responder then owes an ACK that nobody waits for ([`LazyAcks`]): it leaves once the
//! device's traffic pauses, so that the requester's last unsignaled WQEs do not wait for
//! its retransmission timer.

use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::transport::OutPacket;

/// Datagrams of a receive batch after which its held ACKs leave: a quarter of the
/// requester's window of unacknowledged PSNs
/// ([`MAX_UNACKED_PSNS`](crate::transport::requester::MAX_UNACKED_PSNS)).
pub(crate) const RELEASE_EVERY: usize = 32;

/// BTH opcode of RC ACKNOWLEDGE.
const RC_ACKNOWLEDGE: u8 = 0x11;
/// Offset of the AETH syndrome (right after the 12-byte BTH).
const AETH_SYNDROME_AT: usize = 12;

/// The receive batch a thread is handling.
#[derive(Default)]
struct Batch {
    /// The held ACKs, the newest of each connection.
    acks: Vec<OutPacket>,
    /// Datagrams handled since the held ACKs last left.
    datagrams: usize,
}

thread_local! {
    /// The batch this thread is handling; `None` outside a batch.
    static HELD: RefCell<Option<Batch>> = const { RefCell::new(None) };
}

/// The connection an RC packet belongs to: destination and destination QP.
type Key = (IpAddr, u16, [u8; 3]);

fn key(p: &OutPacket) -> Option<Key> {
    let qpn = p.bytes.get(5..8)?;
    Some((p.dst_ip, p.udp_dst_port, [qpn[0], qpn[1], qpn[2]]))
}

/// A plain ACK (not a NAK, not an atomic acknowledge).
fn is_plain_ack(p: &OutPacket) -> bool {
    p.bytes.first() == Some(&RC_ACKNOWLEDGE)
        && p.bytes
            .get(AETH_SYNDROME_AT)
            .is_some_and(|s| s & 0b0110_0000 == 0)
}

/// Starts holding ACKs in this thread (the start of a receive batch).
pub(crate) fn begin() {
    HELD.with(|h| *h.borrow_mut() = Some(Batch::default()));
}

/// Whether this thread is inside a receive batch (holding its ACKs).
pub(crate) fn holding() -> bool {
    HELD.with(|h| h.borrow().is_some())
}

/// Stops holding and returns what is held (the end of a receive batch): send it.
pub(crate) fn end() -> Vec<OutPacket> {
    HELD.with(|h| h.borrow_mut().take())
        .map(|b| b.acks)
        .unwrap_or_default()
}

/// Counts a handled datagram of the batch; every [`RELEASE_EVERY`] datagrams returns what is
/// held (send it, with the device's deferred ACKs, which the batch may have published) and
/// goes on holding. Outside a batch, and between releases, returns `None`.
pub(crate) fn datagram_handled() -> Option<Vec<OutPacket>> {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let batch = h.as_mut()?;
        batch.datagrams += 1;
        if batch.datagrams < RELEASE_EVERY {
            return None;
        }
        batch.datagrams = 0;
        Some(std::mem::take(&mut batch.acks))
    })
}

/// Inside a batch: makes the ACKs held so far the device's `deferred` ones, for every
/// thread to see. Called before a completion of the batch becomes visible: the application
/// that takes it may post on another thread before this batch ends, and whatever it sends
/// must not overtake the ACK of the request it took (kernel rxe's left on arrival). Outside
/// a batch does nothing.
pub(crate) fn publish(deferred: &DeferredAcks) {
    let held = HELD.with(|h| {
        h.borrow_mut()
            .as_mut()
            .map(|b| std::mem::take(&mut b.acks))
            .unwrap_or_default()
    });
    deferred.defer(held);
}

/// Inside a batch: moves the plain ACKs of `packets` into the hold (replacing an older ACK
/// of the same connection, whose bytes go to `dropped`), and returns the held ACKs that must
/// leave before the rest of `packets` (those of connections that also have other packets
/// here). Outside a batch: does nothing and returns nothing.
pub(crate) fn hold(packets: &mut Vec<OutPacket>, dropped: &mut Vec<Vec<u8>>) -> Vec<OutPacket> {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let Some(Batch { acks: held, .. }) = h.as_mut() else {
            return Vec::new();
        };
        let mut first = Vec::new();
        // Connections with something else to send now: their held ACK goes first.
        for p in packets.iter().filter(|p| !is_plain_ack(p)) {
            let k = key(p);
            if let Some(i) = held.iter().position(|a| key(a) == k) {
                first.push(held.swap_remove(i));
            }
        }
        let mut i = 0;
        while i < packets.len() {
            if !is_plain_ack(&packets[i]) {
                i += 1;
                continue;
            }
            let ack = packets.remove(i);
            let k = key(&ack);
            match held.iter_mut().find(|a| key(a) == k) {
                Some(older) => dropped.push(std::mem::replace(older, ack).bytes),
                None => held.push(ack),
            }
        }
        first
    })
}

/// ACKs a device owes its peers but has not sent yet (see the module doc). Every send of
/// the device takes them along, ahead of the packets of their connection, so that a
/// connection's responses keep their order and its requests come after the ACK, as they
/// would have had it been sent on arrival.
#[derive(Default)]
pub(crate) struct DeferredAcks {
    acks: Mutex<Vec<OutPacket>>,
    /// Cheap check for the common case of none.
    pending: AtomicBool,
    /// The ACKs waiting were already waiting at an empty poll (see
    /// [`DeferredAcks::carry_through_empty_poll`]).
    carried: AtomicBool,
}

impl DeferredAcks {
    /// Adds the held ACKs of a batch; each replaces a deferred ACK of its connection (it is
    /// newer and cumulative), whose bytes are recycled.
    pub(crate) fn defer(&self, batch: Vec<OutPacket>) {
        if batch.is_empty() {
            return;
        }
        let mut acks = self.acks.lock();
        for ack in batch {
            let k = key(&ack);
            match acks.iter_mut().find(|a| key(a) == k) {
                Some(older) => crate::net::packet_pool::give(std::mem::replace(older, ack).bytes),
                None => acks.push(ack),
            }
        }
        // Newly waiting ACKs have met no empty poll yet; ACKs that join waiting ones keep
        // the older ones' count, so that a stream's newest ACK cannot put the flush off
        // for ever.
        if !self.pending.load(Ordering::Relaxed) {
            self.carried.store(false, Ordering::Relaxed);
        }
        // SeqCst: pairs with the engine's nap flag (see worker::receive_ready).
        self.pending.store(true, Ordering::SeqCst);
    }

    /// An application's poll found its CQ empty: true if ACKs are waiting that were
    /// already waiting at an earlier empty poll (send them now); otherwise the ACKs waiting
    /// are marked as having met this one, and may wait for what the poll finds on the link.
    ///
    /// Why not send them at the first empty poll: a requester that waits for its signaled
    /// SEND to complete (perftest's latency loops) takes the answer first, which deferred
    /// the ACK the answer asked for, and then polls for its own ACK, which came with the
    /// answer and is already on the link. Sending the deferred ACK first put a send call
    /// (3.7 us) into that round trip, every signaled one (the 99th percentile of a SEND
    /// ping-pong with one message in 100 signaled); found on the link instead, the
    /// completion returns at once, and the ACK leaves with the next post.
    pub(crate) fn carry_through_empty_poll(&self) -> bool {
        self.pending.load(Ordering::Acquire) && self.carried.swap(true, Ordering::AcqRel)
    }

    /// Moves the deferred ACKs into `packets` (which is about to be sent): ahead of any
    /// packet of their own connection, and behind the rest.
    ///
    /// Ahead of their connection's packets: a response keeps its place in the responder's
    /// order, and a request (typically the answer the application posts on taking the
    /// request the ACK is for) follows the ACK as it would have with kernel rxe, which ACKs
    /// on arrival. A peer that shares one CQ between sends and receives so completes its
    /// SEND before the answer's receive (librpma's clients rely on that order); the other
    /// order made them fail now and then. It costs a peer that waits for the answer alone
    /// a receive call, but an ACK is deferred only for a request that asked for one (a
    /// signaled one, whose completion a requester typically waits for first).
    ///
    /// Behind the other connections' requests, which are what their peers wait for (a
    /// datagram ahead of them delays them by a receive call: 7.3 against 4.4 us per half
    /// round trip of a raw UDP ping-pong).
    ///
    /// Until the returned guard is dropped (after the send call returned), the ACKs still
    /// count as waiting: another thread about to send packets of the same connection waits
    /// for the guard, rather than overtaking them on the wire.
    pub(crate) fn take_into(&self, packets: &mut Vec<OutPacket>) -> Option<AcksInFlight<'_>> {
        if !self.pending.load(Ordering::Acquire) {
            return None;
        }
        let mut acks = self.acks.lock();
        let mut front = 0;
        for ack in acks.drain(..) {
            let k = key(&ack);
            if packets.iter().any(|p| key(p) == k) {
                packets.insert(front, ack);
                front += 1;
            } else {
                packets.push(ack);
            }
        }
        Some(AcksInFlight {
            owner: self,
            _list: acks,
        })
    }

    /// True if some are waiting.
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }
}

/// Deferred ACKs taken into a send that has not returned yet (see
/// [`DeferredAcks::take_into`]): holds the list, so that other senders wait, and marks it
/// empty when dropped.
#[must_use = "the ACKs count as waiting until this is dropped, after the send"]
pub(crate) struct AcksInFlight<'a> {
    owner: &'a DeferredAcks,
    _list: MutexGuard<'a, Vec<OutPacket>>,
}

impl Drop for AcksInFlight<'_> {
    fn drop(&mut self) {
        // Still under the list's lock: nobody deferred more meanwhile.
        self.owner.pending.store(false, Ordering::Release);
    }
}

/// The QPs that owe an ACK no request asked for (`Outputs::owes_lazy_ack`), by number; the
/// engine thread sends those ACKs when the traffic pauses (`Device::flush_lazy_acks`). A QP
/// destroyed meanwhile is simply not found then.
#[derive(Default)]
pub(crate) struct LazyAcks {
    qpns: Mutex<Vec<u32>>,
    /// Cheap check for the common case of none.
    pending: AtomicBool,
}

impl LazyAcks {
    /// QP `qpn` owes one (it is listed once per owed ACK: the transport tells only when
    /// one becomes owed).
    pub(crate) fn owe(&self, qpn: u32) {
        self.qpns.lock().push(qpn);
        self.pending.store(true, Ordering::Release);
    }

    /// Takes the list.
    pub(crate) fn take(&self) -> Vec<u32> {
        let mut qpns = self.qpns.lock();
        self.pending.store(false, Ordering::Release);
        std::mem::take(&mut *qpns)
    }

    /// True if some QP owes one.
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn packet(opcode: u8, qpn: u8, syndrome: u8, psn: u8) -> OutPacket {
        let mut bytes = vec![0u8; 20];
        bytes[0] = opcode;
        bytes[7] = qpn;
        bytes[11] = psn;
        bytes[12] = syndrome;
        OutPacket {
            dst_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            udp_dst_port: 4791,
            udp_src_port: 4791,
            bytes,
            payload: None,
        }
    }

    #[test]
    fn only_the_newest_ack_per_connection_leaves_and_other_packets_keep_their_order() {
        let mut dropped = Vec::new();
        // Outside a batch nothing is held.
        let mut v = vec![packet(0x11, 1, 0, 1)];
        assert!(hold(&mut v, &mut dropped).is_empty());
        assert_eq!(v.len(), 1);

        begin();
        let mut v = vec![packet(0x11, 1, 0, 1), packet(0x11, 2, 0, 1)];
        assert!(hold(&mut v, &mut dropped).is_empty());
        assert!(v.is_empty());
        let mut v = vec![packet(0x11, 1, 0, 2)];
        hold(&mut v, &mut dropped);
        assert_eq!(dropped.len(), 1, "the older ACK of QP 1 is superseded");
        // A NAK of QP 2 (syndrome 0x60): QP 2's held ACK must leave before it.
        let mut v = vec![packet(0x11, 2, 0x60, 3)];
        let first = hold(&mut v, &mut dropped);
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].bytes[7], first[0].bytes[11]), (2, 1));
        assert_eq!(v.len(), 1, "the NAK is not held");
        let rest = end();
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].bytes[7], rest[0].bytes[11]), (1, 2));
        assert!(end().is_empty());
    }

    #[test]
    fn a_long_batch_releases_its_held_acks_every_release_every_datagrams() {
        let mut dropped = Vec::new();
        assert!(
            datagram_handled().is_none(),
            "outside a batch nothing is due"
        );
        begin();
        let mut psn = 0u8;
        for round in 0..2 {
            for i in 1..=RELEASE_EVERY {
                psn += 1;
                let mut v = vec![packet(0x11, 1, 0, psn), packet(0x11, 2, 0, psn)];
                hold(&mut v, &mut dropped);
                let due = datagram_handled();
                if i < RELEASE_EVERY {
                    assert!(due.is_none(), "round {round}, datagram {i}: released early");
                    continue;
                }
                let due = due.expect("due");
                // The newest ACK of each connection so far, and the batch goes on holding.
                let got: Vec<_> = due.iter().map(|p| (p.bytes[7], p.bytes[11])).collect();
                assert_eq!(got, vec![(1, psn), (2, psn)], "round {round}");
            }
        }
        let mut v = vec![packet(0x11, 1, 0, psn + 1)];
        hold(&mut v, &mut dropped);
        assert!(v.is_empty(), "still holding after a release");
        let rest = end();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].bytes[11], psn + 1);
        assert!(datagram_handled().is_none(), "the batch is over");
    }

    #[test]
    fn publish_hands_the_held_acks_to_the_deferred_ones_and_the_batch_goes_on() {
        let d = DeferredAcks::default();
        let mut dropped = Vec::new();
        publish(&d);
        assert!(!d.pending(), "outside a batch nothing is held");
        begin();
        let mut v = vec![packet(0x11, 1, 0, 1)];
        hold(&mut v, &mut dropped);
        publish(&d);
        assert!(d.pending());
        assert!(holding(), "the batch goes on");
        let mut v = vec![packet(0x11, 1, 0, 2), packet(0x11, 2, 0, 1)];
        hold(&mut v, &mut dropped);
        publish(&d);
        assert!(end().is_empty(), "all published");
        let mut out = Vec::new();
        drop(d.take_into(&mut out));
        let got: Vec<_> = out.iter().map(|p| (p.bytes[7], p.bytes[11])).collect();
        assert_eq!(got, [(1, 2), (2, 1)], "the newest per connection");
    }

    #[test]
    fn deferred_acks_wait_through_one_empty_poll_and_leave_at_the_second() {
        let d = DeferredAcks::default();
        assert!(!d.carry_through_empty_poll(), "nothing waits");
        d.defer(vec![packet(0x11, 1, 0, 1)]);
        assert!(
            !d.carry_through_empty_poll(),
            "the first empty poll: the ACK may wait for what is on the link"
        );
        // A newer ACK of a stream joins the waiting one: the count goes on.
        d.defer(vec![packet(0x11, 1, 0, 2)]);
        assert!(
            d.carry_through_empty_poll(),
            "the second empty poll: it leaves"
        );
        let mut out = Vec::new();
        drop(d.take_into(&mut out));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bytes[11], 2, "the newest ACK");
        assert!(!d.carry_through_empty_poll(), "sent: nothing waits");
        // ACKs deferred after a send start their count again.
        d.defer(vec![packet(0x11, 2, 0, 1)]);
        assert!(!d.carry_through_empty_poll());
        assert!(d.carry_through_empty_poll());
    }

    #[test]
    fn deferred_acks_keep_the_newest_per_connection_and_go_ahead_of_its_packets_only() {
        let d = DeferredAcks::default();
        // A SEND ONLY request to QP 1, and a READ RESPONSE ONLY to QP 3.
        let mut out = vec![packet(0x04, 1, 0, 7), packet(0x10, 3, 0, 9)];
        drop(d.take_into(&mut out));
        assert_eq!(out.len(), 2, "nothing deferred, nothing added");
        assert!(!d.pending());
        d.defer(vec![packet(0x11, 1, 0, 1), packet(0x11, 2, 0, 1)]);
        d.defer(vec![packet(0x11, 1, 0, 2), packet(0x11, 3, 0, 8)]);
        assert!(d.pending());
        drop(d.take_into(&mut out));
        let got: Vec<_> = out
            .iter()
            .map(|p| (p.bytes[0], p.bytes[7], p.bytes[11]))
            .collect();
        // QP 1's newest ACK goes ahead of QP 1's request, QP 3's (PSN 8) ahead of QP 3's
        // response (PSN 9); QP 2's, with nothing of its connection here, leaves behind.
        assert_eq!(
            got,
            [
                (0x11, 1, 2),
                (0x11, 3, 8),
                (0x04, 1, 7),
                (0x10, 3, 9),
                (0x11, 2, 1)
            ]
        );
        assert!(!d.pending());
        let mut again = Vec::new();
        drop(d.take_into(&mut again));
        assert!(again.is_empty(), "each ACK leaves once");
    }
}
