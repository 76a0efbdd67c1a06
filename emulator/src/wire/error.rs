//! The one error type of the wire layer.

use super::opcode::Opcode;

/// Why bytes could not be parsed or emitted as RoCEv2.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The buffer ends before a header or field that must be there.
    #[error("truncated: need {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// The BTH opcode is not in the opcode table (reserved, RD, or manufacturer specific).
    #[error("unknown BTH opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// The BTH pad count does not fit in the bytes between the headers and the ICRC.
    #[error("pad count {pad_count} larger than the {available} bytes after the headers")]
    BadPadCount {
        /// Pad count from the BTH.
        pad_count: u8,
        /// Bytes between the last header and the ICRC.
        available: usize,
    },
    /// A length that the opcode or the buffer fixes does not match.
    #[error("{what}: expected {expected} bytes, got {got}")]
    LengthMismatch {
        /// Which length is wrong.
        what: &'static str,
        /// The length required.
        expected: usize,
        /// The length found.
        got: usize,
    },
    /// An extension header is present although the opcode does not carry it, or missing
    /// although it does.
    #[error("{opcode}: header {header} must be {}", if *.required { "present" } else { "absent" })]
    HeaderMismatch {
        /// The opcode whose header set was violated.
        opcode: Opcode,
        /// The header's name (e.g. "RETH").
        header: &'static str,
        /// Whether the opcode requires the header.
        required: bool,
    },
    /// The invariant CRC does not match the packet.
    #[error("bad ICRC: computed 0x{expected:08x}, packet has 0x{found:08x}")]
    BadIcrc {
        /// The ICRC computed over the packet.
        expected: u32,
        /// The ICRC stored in the packet.
        found: u32,
    },
    /// The capture's link-layer type (pcap LINKTYPE_* number) is not one we decode.
    #[error("unsupported link type {0}")]
    UnsupportedLinkType(u32),
    /// The frame around a RoCE packet is malformed or uses a feature we do not handle
    /// (IP options, IPv6 extension headers, fragments).
    #[error("bad frame: {0}")]
    BadFrame(String),
}
