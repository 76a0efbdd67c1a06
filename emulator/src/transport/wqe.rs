//! Work-queue entries: posted WRs plus the progress the transport has made on them.

use std::collections::VecDeque;

use softverbs_api::{wr::RemoteAddr, BindMwWr, RecvWr, Sge, WcStatus, WrOpcode};

use crate::wire::Psn;

/// A WQE's gather or scatter list. Most WRs have one SGE: it is held in the WQE itself, in
/// the room a `Vec` takes, so posting such a WR allocates nothing (the copy of the list was
/// one of four mallocs per message of a ping-pong).
pub type SgeList = smallvec::SmallVec<[Sge; 1]>;

/// A send WR as the send queue holds it.
#[derive(Debug, Clone)]
pub struct SendWqe {
    /// User id.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Produces a completion on success.
    pub signaled: bool,
    /// Sets the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Immediate data (host order).
    pub imm_data: u32,
    /// The rkey a SEND_WITH_INV invalidates at the responder, or LOCAL_INV locally.
    pub invalidate_rkey: u32,
    /// Remote address and key (RDMA and atomics).
    pub remote: RemoteAddr,
    /// Gather list (empty when the data was inlined).
    pub sges: SgeList,
    /// Data copied at post time (IBV_SEND_INLINE), or gathered when the first packet was built.
    pub data: Option<Vec<u8>>,
    /// Message length in bytes.
    pub length: u64,
    /// PSN of the first packet, once segmentation has started.
    pub first_psn: Psn,
    /// Request packets of the message (known once the path MTU is known at first send).
    pub packet_count: u32,
    /// PSNs the WR uses: its request packets, or for a READ its response packets.
    pub psn_count: u32,
    /// Response packets of a READ received so far (in PSN order).
    pub resp_packets: u32,
    /// Swap operand (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub swap_add: u64,
    /// Compare operand (CMP_AND_SWP).
    pub compare: u64,
    /// IBV_SEND_FENCE: starts only once every earlier READ / atomic has completed.
    pub fenced: bool,
    /// Range, placement type and selectivity of a FLUSH.
    pub flush: softverbs_api::wr::FlushParams,
    /// Where a UD send goes (resolved from its address handle at post time).
    pub ud: Option<UdTarget>,
    /// Window, new rkey and target of a BIND_MW.
    pub bind: Option<BindMwWr>,
    /// Set when the completer has seen the whole message acknowledged (or failed).
    pub status: Option<WcStatus>,
}

impl SendWqe {
    /// PSN of the last packet or response (valid once `psn_count` is set).
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.psn_count.saturating_sub(1))
    }

    /// True for the WRs answered by a response packet rather than an ACK: READ, the atomics,
    /// ATOMIC WRITE and FLUSH (the last two by an empty READ RESPONSE ONLY, as rxe does).
    pub fn expects_response(&self) -> bool {
        matches!(
            self.opcode,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd
                | WrOpcode::AtomicWrite
                | WrOpcode::Flush
        )
    }

    /// True for the WRs limited by `max_rd_atomic` and waited for by FENCE: READ and the
    /// atomics, ATOMIC WRITE included (FLUSH is not, as in rxe).
    pub fn uses_rd_atomic_credit(&self) -> bool {
        self.expects_response() && self.opcode != WrOpcode::Flush
    }

    /// Bytes the completion reports.
    pub fn completion_bytes(&self) -> u32 {
        match self.opcode {
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 8,
            WrOpcode::Flush => self.flush.length,
            _ => self.length as u32,
        }
    }
}

/// The destination of a UD send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTarget {
    /// Addresses and ports of the datagram.
    pub path: super::PathInfo,
    /// Destination QP number.
    pub dest_qpn: u32,
    /// The Q_Key the DETH carries.
    pub qkey: u32,
}

/// A receive WR as the receive queue holds it.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    /// User id.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: SgeList,
    /// Total bytes the scatter list holds.
    pub length: u64,
}

impl RecvWqe {
    /// The WQE of a posted receive WR.
    pub fn from_wr(wr: &RecvWr) -> RecvWqe {
        RecvWqe {
            wr_id: wr.wr_id,
            sges: SgeList::from_slice(&wr.sg_list),
            length: wr.sg_list.iter().map(|s| s.length as u64).sum(),
        }
    }
}

/// A bounded FIFO of WQEs: capacity is the QP's granted `max_send_wr` / `max_recv_wr`.
#[derive(Debug, Clone)]
pub struct WorkQueue<T> {
    entries: VecDeque<T>,
    capacity: usize,
}

impl<T> WorkQueue<T> {
    /// An empty queue that holds at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        WorkQueue {
            entries: VecDeque::with_capacity(capacity.min(1024)),
            capacity,
        }
    }
    /// Most entries the queue holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Entries queued.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// True if no entry can be added.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }
    /// Appends; gives the entry back when full.
    pub fn push(&mut self, entry: T) -> Result<(), T> {
        if self.is_full() {
            return Err(entry);
        }
        self.entries.push_back(entry);
        Ok(())
    }
    /// The oldest entry.
    pub fn front(&self) -> Option<&T> {
        self.entries.front()
    }
    /// Removes the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        self.entries.pop_front()
    }
    /// Entry `i` (0 = oldest).
    pub fn get(&self, i: usize) -> Option<&T> {
        self.entries.get(i)
    }
    /// Entry `i`, mutable.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.entries.get_mut(i)
    }
    /// Puts an entry taken with [`WorkQueue::pop`] back at the front, even if the queue
    /// filled up meanwhile (it held the entry before; nothing may be lost).
    pub fn push_front_over_capacity(&mut self, entry: T) {
        self.entries.push_front(entry);
    }
    /// Changes the capacity (never below the entries queued; the caller checks).
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(self.entries.len());
    }
    /// Removes and returns every entry, oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.entries.drain(..)
    }
}
