//! The extension headers a RoCE packet may carry after its BTH: a set of them, and their
//! lengths and names in wire order (the opcode table says which ones each opcode carries).

use std::ops::BitOr;

use super::aeth::AETH_LEN;
use super::atomic_ack_eth::ATOMIC_ACK_ETH_LEN;
use super::atomic_eth::ATOMIC_ETH_LEN;
use super::deth::DETH_LEN;
use super::feth::FETH_LEN;
use super::ieth::IETH_LEN;
use super::immdt::IMMDT_LEN;
use super::reth::RETH_LEN;

/// A set of extension headers (everything after the BTH except payload and ICRC).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct HeaderSet(u8);

impl HeaderSet {
    /// No extension header.
    pub const EMPTY: HeaderSet = HeaderSet(0);
    /// RDMA extended transport header (16 bytes).
    pub const RETH: HeaderSet = HeaderSet(1 << 0);
    /// ACK extended transport header (4 bytes).
    pub const AETH: HeaderSet = HeaderSet(1 << 1);
    /// Immediate data (4 bytes).
    pub const IMMDT: HeaderSet = HeaderSet(1 << 2);
    /// Invalidate extended transport header (4 bytes, the rkey to invalidate).
    pub const IETH: HeaderSet = HeaderSet(1 << 3);
    /// Datagram extended transport header (8 bytes).
    pub const DETH: HeaderSet = HeaderSet(1 << 4);
    /// Atomic extended transport header (28 bytes).
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 5);
    /// Atomic acknowledge extended transport header (8 bytes).
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 6);
    /// FLUSH extended transport header (4 bytes).
    pub const FETH: HeaderSet = HeaderSet(1 << 7);

    /// Both sets.
    pub const fn union(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set has no header.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total length in bytes of the headers in the set (no walk for an empty set).
    pub const fn len_bytes(self) -> usize {
        let mut total = 0;
        let mut i = if self.is_empty() { WIRE_ORDER.len() } else { 0 };
        while i < WIRE_ORDER.len() {
            if self.contains(WIRE_ORDER[i].header) {
                total += WIRE_ORDER[i].len;
            }
            i += 1;
        }
        total
    }

    /// The headers of the set in wire order (no walk for an empty set: most packets').
    pub fn iter(self) -> impl Iterator<Item = &'static HeaderLayout> {
        let order: &'static [HeaderLayout] = if self.is_empty() { &[] } else { &WIRE_ORDER };
        order.iter().filter(move |h| self.contains(h.header))
    }
}

impl BitOr for HeaderSet {
    type Output = HeaderSet;
    fn bitor(self, rhs: HeaderSet) -> HeaderSet {
        self.union(rhs)
    }
}

/// One extension header: its flag, its length and its name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HeaderLayout {
    /// The header's flag.
    pub header: HeaderSet,
    /// Its length in bytes.
    pub len: usize,
    /// Its IBTA name.
    pub name: &'static str,
}

/// Extension headers in wire order. No opcode carries all of them, but every opcode's
/// headers appear in this relative order (rxe_opcode.c offsets: DETH before ImmDt,
/// FETH before RETH, RETH before ImmDt, AETH before AtomicAckETH).
pub const WIRE_ORDER: [HeaderLayout; 8] = [
    HeaderLayout {
        header: HeaderSet::DETH,
        len: DETH_LEN,
        name: "DETH",
    },
    HeaderLayout {
        header: HeaderSet::FETH,
        len: FETH_LEN,
        name: "FETH",
    },
    HeaderLayout {
        header: HeaderSet::RETH,
        len: RETH_LEN,
        name: "RETH",
    },
    HeaderLayout {
        header: HeaderSet::ATOMIC_ETH,
        len: ATOMIC_ETH_LEN,
        name: "AtomicETH",
    },
    HeaderLayout {
        header: HeaderSet::AETH,
        len: AETH_LEN,
        name: "AETH",
    },
    HeaderLayout {
        header: HeaderSet::ATOMIC_ACK_ETH,
        len: ATOMIC_ACK_ETH_LEN,
        name: "AtomicAckETH",
    },
    HeaderLayout {
        header: HeaderSet::IMMDT,
        len: IMMDT_LEN,
        name: "ImmDt",
    },
    HeaderLayout {
        header: HeaderSet::IETH,
        len: IETH_LEN,
        name: "IETH",
    },
];
