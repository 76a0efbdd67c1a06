//! The receiving half of a UDP link: its buffers allocated once, the GRO runs it splits,
//! and the way each receive is made (see `gro_mode`). One receiver at a time: `udp` keeps
//! it behind a lock.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use super::batched_io::{self, RecvSlots, MAX_BATCH};
use super::gro_mode::{GroMode, GroSwitch, ReceiveWay};
use super::icrc_check::icrc_ok;
use super::{DatagramView, InDatagram, MAX_DATAGRAM_BYTES};

/// Receive buffer of one GRO slot: the largest coalesced run.
const GRO_SLOT_BYTES: usize = 65_536;
/// Receive slots when GRO is on (each 64 KiB).
const GRO_SLOTS: usize = 16;

/// What the receive loop does after a receive call's error.
enum Flow {
    /// Stop receiving for now.
    Stop,
    /// Make the next receive call.
    Next,
}

/// A UDP socket's receive state.
pub(super) struct Receiver {
    slots: RecvSlots,
    /// Datagrams of a GRO run that `Link::recv` (one at a time) has not returned yet.
    pub(super) backlog: VecDeque<InDatagram>,
    gro: GroMode,
}

impl Receiver {
    /// The state of a socket whose GRO option was turned on (`gro`) or not.
    pub(super) fn new(gro: bool) -> Receiver {
        Receiver {
            slots: if gro {
                RecvSlots::new(GRO_SLOTS, GRO_SLOT_BYTES)
            } else {
                RecvSlots::new(MAX_BATCH, MAX_DATAGRAM_BYTES)
            },
            backlog: VecDeque::new(),
            gro: GroMode::new(gro),
        }
    }

    /// Whether the socket coalesces GSO runs now.
    pub(super) fn coalescing(&self) -> bool {
        self.gro.is_on()
    }

    /// Hands up to `max` datagrams waiting on `socket` (bound to `local`) to `sink`, without
    /// waiting; returns how many receive slots they came in.
    pub(super) fn receive(
        &mut self,
        socket: &UdpSocket,
        local: SocketAddr,
        max: usize,
        sink: &mut dyn FnMut(DatagramView<'_>),
    ) -> io::Result<usize> {
        let mut total = 0;
        while let Some(d) = self.backlog.pop_front() {
            sink(d.view());
            total += 1;
        }
        while total < max {
            let want = (max - total).min(self.slots.capacity());
            let way = self.gro.next_receive(want);
            if way == ReceiveWay::Checked {
                match self.receive_checked(socket, local, sink) {
                    Ok(true) => {
                        total += 1;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => match self.after_error(e)? {
                        Flow::Stop => break,
                        Flow::Next => continue,
                    },
                }
            }
            let got = if way == ReceiveWay::Plain {
                batched_io::recv_one_plain(socket, &mut self.slots, false)
            } else {
                batched_io::recv_batch_now(socket, &mut self.slots, want)
            };
            let n = match got {
                Ok(n) => n,
                Err(e) => match self.after_error(e)? {
                    Flow::Stop => break,
                    Flow::Next => continue,
                },
            };
            let (datagrams, runs, lengths) = self.hand_over(n, local, sink);
            if let Some(switch) = self.gro.received(want, datagrams, runs, lengths) {
                self.switch(socket, switch);
            }
            total += n;
            if n < want {
                break;
            }
        }
        Ok(total)
    }

    /// What a receive's error means for the receive loop: the queue found empty (noted for
    /// the GRO mode) or an interrupted call stop it; an ICMP error queued for an earlier
    /// send is not a receive failure, and the loop goes on; anything else fails it.
    fn after_error(&mut self, e: io::Error) -> io::Result<Flow> {
        match e.kind() {
            io::ErrorKind::WouldBlock => {
                self.gro.found_nothing(Instant::now);
                Ok(Flow::Stop)
            }
            io::ErrorKind::Interrupted => Ok(Flow::Stop),
            io::ErrorKind::ConnectionRefused => Ok(Flow::Next),
            _ => Err(e),
        }
    }

    /// Hands the datagrams of the first `n` slots to `sink`, each datagram of a GRO run
    /// alone; returns how many datagrams, how many runs of more than one, and the lengths
    /// of the first and the last datagram.
    fn hand_over(
        &self,
        n: usize,
        local: SocketAddr,
        sink: &mut dyn FnMut(DatagramView<'_>),
    ) -> (usize, usize, (usize, usize)) {
        let (mut datagrams, mut runs) = (0, 0);
        let (mut first, mut last) = (None, 0);
        for i in 0..n {
            let (bytes, src) = self.slots.get(i);
            let Some(src) = src else { continue };
            // A GRO slot holds a run of datagrams of `seg` bytes.
            let seg = match self.slots.segment_bytes(i) {
                0 => bytes.len().max(1),
                seg => seg,
            };
            runs += usize::from(bytes.len() > seg);
            for payload in bytes.chunks(seg) {
                datagrams += 1;
                first.get_or_insert(payload.len());
                last = payload.len();
                sink(DatagramView {
                    src,
                    dst: local,
                    payload,
                    ipv4_identification: None,
                });
            }
        }
        (datagrams, runs, (first.unwrap_or(0), last))
    }

    /// A receive in the checked time after GRO went off: peeks at the first datagram and
    /// takes it (true) if it is one whole packet. Anything else may be a run queued whole
    /// before the switch: GRO goes back on, and the caller receives it with its segment
    /// size (false). `WouldBlock` when nothing is queued.
    fn receive_checked(
        &mut self,
        socket: &UdpSocket,
        local: SocketAddr,
        sink: &mut dyn FnMut(DatagramView<'_>),
    ) -> io::Result<bool> {
        batched_io::recv_one_plain(socket, &mut self.slots, true)?;
        let (payload, src) = self.slots.get(0);
        let view = src.map(|src| DatagramView {
            src,
            dst: local,
            payload,
            ipv4_identification: None,
        });
        match view {
            Some(view) if icrc_ok(view) => {
                batched_io::discard_one(socket)?;
                sink(view);
                Ok(true)
            }
            _ => {
                if let Some(switch) = self.gro.check_failed() {
                    self.switch(socket, switch);
                }
                Ok(false)
            }
        }
    }

    fn switch(&mut self, socket: &UdpSocket, switch: GroSwitch) {
        let set = batched_io::set_udp_gro(socket, switch == GroSwitch::On);
        if let Err(e) = &set {
            tracing::debug!(error = %e, ?switch, "UDP GRO switch refused");
        }
        self.gro.switched(switch, set.is_ok(), Instant::now());
    }
}
