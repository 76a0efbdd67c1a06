//! THE opcode table: for every BTH opcode we speak, its transport, kind, place in a message,
//! the extension headers it carries and what it means to the responder. Header layout
//! everywhere (parse, emit, offsets) is derived from this table. Its other half (which WR
//! opcode a QP type may post, with which of these opcodes) is `wr_table`.
//!
//! Contents follow the IBTA opcode list as the Linux rxe driver implements it (RC, UC, UD,
//! the RC FLUSH and ATOMIC WRITE extensions, and the RoCEv2 CNP). RD opcodes are left out
//! on purpose: rxe has no RD QPs, so they parse as [`WireError::UnknownOpcode`].
//!
//! [`WireError::UnknownOpcode`]: super::WireError::UnknownOpcode

use std::fmt;

use super::bth::BTH_LEN;
pub use super::header_set::{HeaderLayout, HeaderSet, WIRE_ORDER};

/// A BTH opcode byte (transport in the top 3 bits, operation in the low 5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Opcode(pub u8);

/// The transport an opcode belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// RoCEv2 congestion notification packet.
    Cnp,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

/// The operation an opcode belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    /// SEND (plain, with immediate or with invalidate).
    Send,
    /// RDMA WRITE (plain or with immediate).
    RdmaWrite,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACK / NAK (AETH only).
    Ack,
    /// Atomic acknowledge (AETH + AtomicAckETH).
    AtomicAck,
    /// Atomic compare and swap request.
    CompareSwap,
    /// Atomic fetch and add request.
    FetchAdd,
    /// ATOMIC WRITE request (RETH + 8 byte payload).
    AtomicWrite,
    /// FLUSH request (FETH + RETH).
    Flush,
    /// Congestion notification.
    Cnp,
}

/// What the table knows about one opcode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode itself.
    pub opcode: Opcode,
    /// Its IBTA / rxe name without the `IB_OPCODE_` prefix, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// RC, UC, UD or CNP.
    pub transport: Transport,
    /// The operation.
    pub kind: OpKind,
    /// The packet's place in its message.
    pub position: Position,
    /// The extension headers after the BTH.
    pub headers: HeaderSet,
    /// Whether data follows the headers (for ATOMIC WRITE and CNP a fixed amount, see
    /// [`OpcodeInfo::fixed_payload_len`]).
    pub has_payload: bool,
    /// The exact payload length if the opcode fixes it: 8 for ATOMIC WRITE, 16 (reserved
    /// bytes) for CNP.
    pub fixed_payload_len: Option<usize>,
    /// Sent by a requester to a responder (false for responses and CNP).
    pub is_request: bool,
    /// The message this packet belongs to consumes a receive WQE at the responder:
    /// every SEND packet, and the RDMA WRITE packets that carry immediate data.
    pub consumes_recv_wqe: bool,
    /// The responder takes the receive WQE at this packet (rxe's RWR mask): the first
    /// packet of a SEND, or the WRITE packet that carries the immediate.
    pub takes_recv_wqe: bool,
    /// This packet completes a receive WQE (rxe's COMP mask): the last packet of a SEND,
    /// or a WRITE packet with immediate.
    pub completes_recv_wqe: bool,
    /// Carries ImmDt.
    pub has_immediate: bool,
    /// Carries IETH (SEND with invalidate).
    pub has_invalidate: bool,
    /// BTH plus extension headers, in bytes (see [`OpcodeInfo::header_len`]): worked out
    /// once with the table, as every packet parsed or emitted asks for it.
    header_bytes: usize,
}

impl OpcodeInfo {
    /// BTH plus extension headers, in bytes: where the payload starts.
    pub fn header_len(&self) -> usize {
        self.header_bytes
    }

    /// Byte offset from the start of the BTH of `header` (one flag), if the opcode carries it.
    pub fn header_offset(&self, header: HeaderSet) -> Option<usize> {
        if !self.headers.contains(header) || header.is_empty() {
            return None;
        }
        let mut offset = BTH_LEN;
        for h in self.headers.iter() {
            if h.header == header {
                return Some(offset);
            }
            offset += h.len;
        }
        None
    }

    /// First packet of a message (FIRST or ONLY).
    pub fn is_first(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// Last packet of a message (LAST or ONLY).
    pub fn is_last(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

use HeaderSet as H;
use OpKind as K;
use Position as P;

/// Derives the table's per-opcode facts from kind, position and headers so the table rows
/// stay short and cannot contradict each other.
const fn row(
    code: u8,
    name: &'static str,
    kind: OpKind,
    position: Position,
    headers: HeaderSet,
) -> OpcodeInfo {
    let transport = match code >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        3 => Transport::Ud,
        _ => Transport::Cnp,
    };
    let has_immediate = headers.contains(H::IMMDT);
    let is_send = matches!(kind, K::Send);
    let is_write_imm = matches!(kind, K::RdmaWrite) && has_immediate;
    let first = matches!(position, P::First | P::Only);
    let last = matches!(position, P::Last | P::Only);
    let fixed_payload_len = match kind {
        K::AtomicWrite => Some(8),
        K::Cnp => Some(16),
        _ => None,
    };
    OpcodeInfo {
        opcode: Opcode(code),
        name,
        transport,
        kind,
        position,
        headers,
        has_payload: matches!(
            kind,
            K::Send | K::RdmaWrite | K::ReadResponse | K::AtomicWrite | K::Cnp
        ),
        fixed_payload_len,
        is_request: matches!(
            kind,
            K::Send
                | K::RdmaWrite
                | K::ReadRequest
                | K::CompareSwap
                | K::FetchAdd
                | K::AtomicWrite
                | K::Flush
        ),
        consumes_recv_wqe: is_send || is_write_imm,
        takes_recv_wqe: (is_send && first) || is_write_imm,
        completes_recv_wqe: (is_send && last) || is_write_imm,
        has_immediate,
        has_invalidate: headers.contains(H::IETH),
        header_bytes: BTH_LEN + headers.len_bytes(),
    }
}

const RETH_IMM: HeaderSet = H::RETH.union(H::IMMDT);

/// Every opcode we know. Order is irrelevant; lookups go through [`INDEX`].
static TABLE: [OpcodeInfo; 40] = [
    row(0x00, "RC_SEND_FIRST", K::Send, P::First, H::EMPTY),
    row(0x01, "RC_SEND_MIDDLE", K::Send, P::Middle, H::EMPTY),
    row(0x02, "RC_SEND_LAST", K::Send, P::Last, H::EMPTY),
    row(
        0x03,
        "RC_SEND_LAST_WITH_IMMEDIATE",
        K::Send,
        P::Last,
        H::IMMDT,
    ),
    row(0x04, "RC_SEND_ONLY", K::Send, P::Only, H::EMPTY),
    row(
        0x05,
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        K::Send,
        P::Only,
        H::IMMDT,
    ),
    row(0x06, "RC_RDMA_WRITE_FIRST", K::RdmaWrite, P::First, H::RETH),
    row(
        0x07,
        "RC_RDMA_WRITE_MIDDLE",
        K::RdmaWrite,
        P::Middle,
        H::EMPTY,
    ),
    row(0x08, "RC_RDMA_WRITE_LAST", K::RdmaWrite, P::Last, H::EMPTY),
    row(
        0x09,
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        K::RdmaWrite,
        P::Last,
        H::IMMDT,
    ),
    row(0x0a, "RC_RDMA_WRITE_ONLY", K::RdmaWrite, P::Only, H::RETH),
    row(
        0x0b,
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        K::RdmaWrite,
        P::Only,
        RETH_IMM,
    ),
    row(
        0x0c,
        "RC_RDMA_READ_REQUEST",
        K::ReadRequest,
        P::Only,
        H::RETH,
    ),
    row(
        0x0d,
        "RC_RDMA_READ_RESPONSE_FIRST",
        K::ReadResponse,
        P::First,
        H::AETH,
    ),
    row(
        0x0e,
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        K::ReadResponse,
        P::Middle,
        H::EMPTY,
    ),
    row(
        0x0f,
        "RC_RDMA_READ_RESPONSE_LAST",
        K::ReadResponse,
        P::Last,
        H::AETH,
    ),
    row(
        0x10,
        "RC_RDMA_READ_RESPONSE_ONLY",
        K::ReadResponse,
        P::Only,
        H::AETH,
    ),
    row(0x11, "RC_ACKNOWLEDGE", K::Ack, P::Only, H::AETH),
    row(
        0x12,
        "RC_ATOMIC_ACKNOWLEDGE",
        K::AtomicAck,
        P::Only,
        H::AETH.union(H::ATOMIC_ACK_ETH),
    ),
    row(
        0x13,
        "RC_COMPARE_SWAP",
        K::CompareSwap,
        P::Only,
        H::ATOMIC_ETH,
    ),
    row(0x14, "RC_FETCH_ADD", K::FetchAdd, P::Only, H::ATOMIC_ETH),
    row(
        0x16,
        "RC_SEND_LAST_WITH_INVALIDATE",
        K::Send,
        P::Last,
        H::IETH,
    ),
    row(
        0x17,
        "RC_SEND_ONLY_WITH_INVALIDATE",
        K::Send,
        P::Only,
        H::IETH,
    ),
    row(0x1c, "RC_FLUSH", K::Flush, P::Only, H::FETH.union(H::RETH)),
    row(0x1d, "RC_ATOMIC_WRITE", K::AtomicWrite, P::Only, H::RETH),
    row(0x20, "UC_SEND_FIRST", K::Send, P::First, H::EMPTY),
    row(0x21, "UC_SEND_MIDDLE", K::Send, P::Middle, H::EMPTY),
    row(0x22, "UC_SEND_LAST", K::Send, P::Last, H::EMPTY),
    row(
        0x23,
        "UC_SEND_LAST_WITH_IMMEDIATE",
        K::Send,
        P::Last,
        H::IMMDT,
    ),
    row(0x24, "UC_SEND_ONLY", K::Send, P::Only, H::EMPTY),
    row(
        0x25,
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        K::Send,
        P::Only,
        H::IMMDT,
    ),
    row(0x26, "UC_RDMA_WRITE_FIRST", K::RdmaWrite, P::First, H::RETH),
    row(
        0x27,
        "UC_RDMA_WRITE_MIDDLE",
        K::RdmaWrite,
        P::Middle,
        H::EMPTY,
    ),
    row(0x28, "UC_RDMA_WRITE_LAST", K::RdmaWrite, P::Last, H::EMPTY),
    row(
        0x29,
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        K::RdmaWrite,
        P::Last,
        H::IMMDT,
    ),
    row(0x2a, "UC_RDMA_WRITE_ONLY", K::RdmaWrite, P::Only, H::RETH),
    row(
        0x2b,
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        K::RdmaWrite,
        P::Only,
        RETH_IMM,
    ),
    row(0x64, "UD_SEND_ONLY", K::Send, P::Only, H::DETH),
    row(
        0x65,
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        K::Send,
        P::Only,
        H::DETH.union(H::IMMDT),
    ),
    row(0x81, "CNP", K::Cnp, P::Only, H::EMPTY),
];

/// Opcode byte -> index into [`TABLE`], `NONE` if unknown. Built at compile time so a
/// lookup is one load.
static INDEX: [u8; 256] = build_index();
const NONE: u8 = u8::MAX;

const fn build_index() -> [u8; 256] {
    let mut index = [NONE; 256];
    let mut i = 0;
    while i < TABLE.len() {
        let code = TABLE[i].opcode.0 as usize;
        assert!(index[code] == NONE, "opcode listed twice");
        index[code] = i as u8;
        i += 1;
    }
    index
}

macro_rules! opcode_consts {
    ($($name:ident = $code:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($code), ").")]
                pub const $name: Opcode = Opcode($code);
            )*
        }
    };
}

opcode_consts! {
    RC_SEND_FIRST = 0x00;
    RC_SEND_MIDDLE = 0x01;
    RC_SEND_LAST = 0x02;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03;
    RC_SEND_ONLY = 0x04;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05;
    RC_RDMA_WRITE_FIRST = 0x06;
    RC_RDMA_WRITE_MIDDLE = 0x07;
    RC_RDMA_WRITE_LAST = 0x08;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09;
    RC_RDMA_WRITE_ONLY = 0x0a;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b;
    RC_RDMA_READ_REQUEST = 0x0c;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10;
    RC_ACKNOWLEDGE = 0x11;
    RC_ATOMIC_ACKNOWLEDGE = 0x12;
    RC_COMPARE_SWAP = 0x13;
    RC_FETCH_ADD = 0x14;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17;
    RC_FLUSH = 0x1c;
    RC_ATOMIC_WRITE = 0x1d;
    UC_SEND_FIRST = 0x20;
    UC_SEND_MIDDLE = 0x21;
    UC_SEND_LAST = 0x22;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23;
    UC_SEND_ONLY = 0x24;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25;
    UC_RDMA_WRITE_FIRST = 0x26;
    UC_RDMA_WRITE_MIDDLE = 0x27;
    UC_RDMA_WRITE_LAST = 0x28;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29;
    UC_RDMA_WRITE_ONLY = 0x2a;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b;
    UD_SEND_ONLY = 0x64;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65;
    CNP = 0x81;
}

impl Opcode {
    /// The table entry, `None` for opcodes we do not speak.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        match INDEX[usize::from(self.0)] {
            NONE => None,
            i => Some(&TABLE[usize::from(i)]),
        }
    }

    /// The opcode's name, `"UNKNOWN"` if it is not in the table.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |info| info.name)
    }

    /// Every opcode in the table, in numeric order.
    pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
        INDEX
            .iter()
            .filter(|&&i| i != NONE)
            .map(|&i| &TABLE[usize::from(i)])
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(0x{:02x})", self.name(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_match_constants_and_transport_prefix() {
        for info in Opcode::all() {
            let prefix = match info.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
            };
            assert!(info.name.starts_with(prefix), "{}", info.name);
            assert_eq!(info.opcode.info().map(|i| i.name), Some(info.name));
        }
        assert_eq!(Opcode::all().count(), 40);
        assert_eq!(Opcode::RC_SEND_ONLY.name(), "RC_SEND_ONLY");
        assert_eq!(
            Opcode::CNP.info().map(|i| i.transport),
            Some(Transport::Cnp)
        );
    }

    #[test]
    fn unknown_opcodes() {
        // 0x15 is reserved (RESYNC), 0x40.. is RD, 0x1a is a class operation.
        for code in [
            0x15u8, 0x18, 0x1a, 0x1e, 0x2c, 0x40, 0x4c, 0x60, 0x63, 0x66, 0x80, 0xff,
        ] {
            assert!(Opcode(code).info().is_none(), "0x{code:02x}");
            assert_eq!(Opcode(code).name(), "UNKNOWN");
        }
    }

    // Header lengths and offsets as rxe_opcode.c lays them out.
    #[test]
    fn header_lengths_and_offsets_match_rxe() {
        let len = |op: Opcode| op.info().map(OpcodeInfo::header_len);
        assert_eq!(len(Opcode::RC_SEND_ONLY), Some(12));
        assert_eq!(len(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE), Some(16));
        assert_eq!(len(Opcode::RC_RDMA_WRITE_FIRST), Some(28));
        assert_eq!(len(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE), Some(32));
        assert_eq!(len(Opcode::RC_RDMA_READ_REQUEST), Some(28));
        assert_eq!(len(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE), Some(12));
        assert_eq!(len(Opcode::RC_ACKNOWLEDGE), Some(16));
        assert_eq!(len(Opcode::RC_ATOMIC_ACKNOWLEDGE), Some(24));
        assert_eq!(len(Opcode::RC_COMPARE_SWAP), Some(40));
        assert_eq!(len(Opcode::RC_FLUSH), Some(32));
        assert_eq!(len(Opcode::RC_ATOMIC_WRITE), Some(28));
        assert_eq!(len(Opcode::UD_SEND_ONLY), Some(20));
        assert_eq!(len(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), Some(24));
        assert_eq!(len(Opcode::CNP), Some(12));

        let off = |op: Opcode, h| op.info().and_then(|i| i.header_offset(h));
        assert_eq!(
            off(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, H::RETH),
            Some(12)
        );
        assert_eq!(
            off(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, H::IMMDT),
            Some(28)
        );
        assert_eq!(off(Opcode::RC_ATOMIC_ACKNOWLEDGE, H::AETH), Some(12));
        assert_eq!(
            off(Opcode::RC_ATOMIC_ACKNOWLEDGE, H::ATOMIC_ACK_ETH),
            Some(16)
        );
        assert_eq!(off(Opcode::RC_FLUSH, H::FETH), Some(12));
        assert_eq!(off(Opcode::RC_FLUSH, H::RETH), Some(16));
        assert_eq!(off(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, H::DETH), Some(12));
        assert_eq!(off(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, H::IMMDT), Some(20));
        assert_eq!(off(Opcode::RC_SEND_ONLY, H::RETH), None);
    }

    // The receive-WQE masks as rxe sets them (RXE_RWR_MASK / RXE_COMP_MASK).
    #[test]
    fn recv_wqe_flags_match_rxe_masks() {
        let takes: Vec<u8> = Opcode::all()
            .filter(|i| i.takes_recv_wqe)
            .map(|i| i.opcode.0)
            .collect();
        assert_eq!(
            takes,
            [0x00, 0x04, 0x05, 0x09, 0x0b, 0x17, 0x20, 0x24, 0x25, 0x29, 0x2b, 0x64, 0x65]
        );
        let completes: Vec<u8> = Opcode::all()
            .filter(|i| i.completes_recv_wqe)
            .map(|i| i.opcode.0)
            .collect();
        assert_eq!(
            completes,
            [
                0x02, 0x03, 0x04, 0x05, 0x09, 0x0b, 0x16, 0x17, 0x22, 0x23, 0x24, 0x25, 0x29, 0x2b,
                0x64, 0x65
            ]
        );
        let consumes = |op: Opcode| op.info().map(|i| i.consumes_recv_wqe);
        assert_eq!(consumes(Opcode::RC_SEND_MIDDLE), Some(true));
        assert_eq!(consumes(Opcode::RC_RDMA_WRITE_LAST), Some(false));
        assert_eq!(
            consumes(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE),
            Some(true)
        );
    }

    #[test]
    fn requests_responses_payload() {
        let i = |op: Opcode| *op.info().expect("known");
        assert!(i(Opcode::RC_RDMA_READ_REQUEST).is_request);
        assert!(!i(Opcode::RC_RDMA_READ_REQUEST).has_payload);
        assert!(!i(Opcode::RC_RDMA_READ_RESPONSE_FIRST).is_request);
        assert!(i(Opcode::RC_RDMA_READ_RESPONSE_FIRST).has_payload);
        assert!(!i(Opcode::RC_ACKNOWLEDGE).is_request);
        assert!(!i(Opcode::RC_ACKNOWLEDGE).has_payload);
        assert!(i(Opcode::RC_FLUSH).is_request && !i(Opcode::RC_FLUSH).has_payload);
        assert_eq!(i(Opcode::RC_ATOMIC_WRITE).fixed_payload_len, Some(8));
        assert!(i(Opcode::RC_SEND_LAST_WITH_INVALIDATE).has_invalidate);
        assert!(i(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).has_immediate);
        assert!(i(Opcode::RC_SEND_MIDDLE).position == Position::Middle);
        assert!(i(Opcode::RC_SEND_ONLY).is_first() && i(Opcode::RC_SEND_ONLY).is_last());
        assert!(!i(Opcode::RC_SEND_FIRST).is_last());
    }

    #[test]
    fn display() {
        assert_eq!(Opcode(0x11).to_string(), "RC_ACKNOWLEDGE(0x11)");
        assert_eq!(Opcode(0x15).to_string(), "UNKNOWN(0x15)");
    }
}
