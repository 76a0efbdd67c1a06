//! Service ID resolution for UD (IBA tables 119, 120): SIDR_REQ asks which QP and Q_Key
//! serve a service ID, SIDR_REP answers with a status. Offsets relative to the MAD data.

use super::layout::mad_layout;
use super::mad::MAD_DATA_LEN;

/// Private data bytes of a SIDR_REQ.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Additional information bytes of a SIDR_REP.
pub const SIDR_REP_INFO_LEN: usize = 72;
/// Private data bytes of a SIDR_REP.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;

/// SIDR_REP status codes (IBA table 121).
pub mod sidr_status {
    /// The QP information is valid.
    pub const SUCCESS: u8 = 0;
    /// Nobody serves the service ID.
    pub const UNSUPPORTED: u8 = 1;
    /// The consumer rejected the request.
    pub const REJECT: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

mad_layout! {
    /// A typed view of a SIDR_REQ's data.
    view SidrReqPacket;
    /// Every field of a SIDR_REQ.
    repr SidrReqRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's request ID (plays the role of a communication ID).
        request_id, set_request_id: u32 = (0, 0, 32);
        /// Partition key.
        pkey, set_pkey: u16 = (4, 0, 16);
        /// Service ID to resolve.
        service_id, set_service_id: u64 = (8, 0, 64);
    }
    bytes {
        /// Private data (rdma_cm: its 36-byte header first).
        private_data, private_data_mut = (16, SIDR_REQ_PRIVATE_DATA_LEN);
    }
}

mad_layout! {
    /// A typed view of a SIDR_REP's data.
    view SidrRepPacket;
    /// Every field of a SIDR_REP.
    repr SidrRepRepr;
    len MAD_DATA_LEN;
    fields {
        /// The request ID of the SIDR_REQ answered.
        request_id, set_request_id: u32 = (0, 0, 32);
        /// Status ([`sidr_status`]).
        status, set_status: u8 = (4, 0, 8);
        /// Valid bytes of `additional_information`.
        additional_information_length, set_additional_information_length: u8 = (5, 0, 8);
        /// The serving QP.
        qpn, set_qpn: u32 = (8, 0, 24);
        /// The service ID resolved.
        service_id, set_service_id: u64 = (12, 0, 64);
        /// The serving QP's Q_Key.
        qkey, set_qkey: u32 = (20, 0, 32);
    }
    bytes {
        /// Additional information.
        additional_information, additional_information_mut = (24, SIDR_REP_INFO_LEN);
        /// Private data.
        private_data, private_data_mut = (96, SIDR_REP_PRIVATE_DATA_LEN);
    }
}
