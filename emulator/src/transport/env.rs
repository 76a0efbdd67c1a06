//! What a transport call gets besides the QP: the device's memory and address handles,
//! the QP's SRQ, the time of the call and, for a received packet, its IP header.

use std::cell::Cell;

use parking_lot::Mutex;

use super::address::{AhTable, NetHeader};
use super::srq::SharedRecvQueue;
use crate::memory::MrTable;

/// What a transport call may use besides the QP: the device's memory and address handles,
/// the QP's SRQ, the current time and, for a received packet, the IP header it came with.
pub struct Env<'a> {
    /// The device's memory regions.
    pub mem: &'a MrTable,
    /// Current time on the driver's clock (monotonic; virtual in simulations): see
    /// [`Env::now_ns`].
    pub now: CallTime<'a>,
    /// The SRQ of the QP, if it has one.
    pub srq: Option<&'a Mutex<SharedRecvQueue>>,
    /// The device's address handles (UD sends resolve theirs at post time).
    pub ahs: Option<&'a AhTable>,
    /// The network header of the packet being handled (UD receives report it in the GRH).
    pub rx: Option<NetHeader>,
    /// Packets may name their payload in registered memory (`OutPacket::payload`) instead
    /// of carrying a copy: set by a driver that reads it at send time.
    pub payload_by_reference: bool,
}

impl<'a> Env<'a> {
    /// An environment with memory and time only (no SRQ, no AHs, no received header).
    pub fn new(mem: &'a MrTable, now_ns: u64) -> Env<'a> {
        Env {
            mem,
            now: CallTime::at(now_ns),
            srq: None,
            ahs: None,
            rx: None,
            payload_by_reference: false,
        }
    }

    /// The time of this call in nanoseconds; the same for the whole call.
    pub fn now_ns(&self) -> u64 {
        self.now.ns()
    }
}

/// The time of a transport call: given, or read from the driver's clock when the call first
/// needs it. Most calls arm no timer (a ping-pong's SENDs, their receipt) and then read no
/// clock: a read cost 25-50 ns of a ping-pong's half round trip on a virtual machine.
pub struct CallTime<'a> {
    known: Cell<Option<u64>>,
    read: Option<&'a dyn Fn() -> u64>,
}

impl<'a> CallTime<'a> {
    /// The time `ns`.
    pub fn at(ns: u64) -> CallTime<'a> {
        CallTime {
            known: Cell::new(Some(ns)),
            read: None,
        }
    }

    /// The time `read` returns, read at most once, when first asked for.
    pub fn when_needed(read: &'a dyn Fn() -> u64) -> CallTime<'a> {
        CallTime {
            known: Cell::new(None),
            read: Some(read),
        }
    }

    /// The time, in nanoseconds.
    pub fn ns(&self) -> u64 {
        if let Some(ns) = self.known.get() {
            return ns;
        }
        let ns = self.read.map_or(0, |read| read());
        self.known.set(Some(ns));
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_the_clock_once_and_only_when_it_needs_the_time() {
        let reads = Cell::new(0u32);
        let clock = || {
            reads.set(reads.get() + 1);
            1_000 * reads.get() as u64
        };
        let _unused = CallTime::when_needed(&clock);
        assert_eq!(reads.get(), 0);
        let time = CallTime::when_needed(&clock);
        assert_eq!((time.ns(), time.ns()), (1_000, 1_000));
        assert_eq!(reads.get(), 1);
        assert_eq!(CallTime::at(7).ns(), 7);
    }
}
