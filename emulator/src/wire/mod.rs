//! RoCEv2 wire format: typed zero-copy header views, one opcode table that drives header
//! layout, whole-packet parse/emit, the ICRC, UDP ports and IP/UDP framing for pcaps.
//! Format only: no QP state, no I/O.

mod field;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod bth_only;
pub mod cm;
pub mod deth;
pub mod error;
pub mod feth;
pub mod frame;
pub mod header_set;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod pretty;
pub mod psn;
pub mod reth;
pub mod roce;
pub mod udp_port;
pub mod wr_table;

pub use aeth::{AethKind, AethPacket, AethRepr, NakCode, AETH_LEN};
pub use atomic_ack_eth::{AtomicAckEthPacket, AtomicAckEthRepr, ATOMIC_ACK_ETH_LEN};
pub use atomic_eth::{AtomicEthPacket, AtomicEthRepr, ATOMIC_ETH_LEN};
pub use bth::{BthPacket, BthRepr, BTH_LEN};
pub use bth_only::{BthOnly, EmitHeaders};
pub use deth::{DethPacket, DethRepr, DETH_LEN};
pub use error::WireError;
pub use feth::{FethPacket, FethRepr, FETH_LEN};
pub use frame::{emit_ethernet_frame, parse_frame, LinkType, RoceFrame};
pub use icrc::{
    compute_icrc, solve_ipv4_identification, stored_icrc, verify_icrc, write_icrc,
    write_icrc_with_payload, IcrcContext, IpHeaderInfo, IPV4_FLAG_DF,
};
pub use ieth::{IethPacket, IETH_LEN};
pub use immdt::{ImmDtPacket, IMMDT_LEN};
pub use opcode::{
    HeaderLayout, HeaderSet, OpKind, Opcode, OpcodeInfo, Position, Transport, WIRE_ORDER,
};
pub use psn::Psn;
pub use reth::{RethPacket, RethRepr, RETH_LEN};
pub use roce::{RoceRepr, ICRC_LEN};
pub use udp_port::{
    flow_label_udp_src_port, rc_udp_src_port, rdma_flow_label, ud_udp_src_port, ROCE_UDP_PORT,
};
pub use wr_table::{request_opcode, wr_rule, WrRule, WR_TABLE};
