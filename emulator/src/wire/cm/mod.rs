//! The IB communication manager's wire format: MADs of management class 0x07 carried in UD
//! SENDs to QP1 (on RoCEv2, Q_Key 0x80010000, P_Key 0xffff), and the rdma_cm conventions on
//! top (service IDs, the private-data header). Format only: no connection state, no I/O.
//!
//! Layouts are the IBA volume 1 chapter 12 tables (as the kernel's `ibta_vol1_c12.h` and
//! Wireshark's dissector also give them), checked against a real kernel exchange in the
//! conformance captures.

pub(crate) mod layout;

pub mod class_port_info;
pub mod cma;
pub mod conn;
pub mod mad;
pub mod message;
pub mod rep;
pub mod req;
pub mod sidr;

pub use class_port_info::{ClassPortInfoPacket, ClassPortInfoRepr};
pub use cma::{
    ip_service_id, ip_to_gid, parse_ip_service_id, roce_flow_label, CmaHdr, PortSpace, CMA_HDR_LEN,
};
pub use conn::{
    msg_code, rej_reason, DrepPacket, DrepRepr, DreqPacket, DreqRepr, MraPacket, MraRepr,
    RejPacket, RejRepr, RtuPacket, RtuRepr,
};
pub use mad::{
    attr, method, MadError, MadHeaderPacket, MadHeaderRepr, GSI_QKEY, GSI_QPN, MAD_DATA_LEN,
    MAD_HEADER_LEN, MAD_LEN,
};
pub use message::{CmMad, CmMessage};
pub use rep::{RepPacket, RepRepr, REP_PRIVATE_DATA_LEN};
pub use req::{ReqPacket, ReqRepr, REQ_PRIVATE_DATA_LEN};
pub use sidr::{sidr_status, SidrRepPacket, SidrRepRepr, SidrReqPacket, SidrReqRepr};
