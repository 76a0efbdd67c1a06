//! The short connection messages (IBA tables 107, 108, 111, 112, 113): MRA, REJ, RTU, DREQ
//! and DREP, plus the REJ reason codes and the "which message" codes of MRA and REJ.
//! Offsets relative to the MAD data.

use super::layout::mad_layout;
use super::mad::MAD_DATA_LEN;

/// Private data bytes of an MRA.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Additional rejection information bytes of a REJ.
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of a REJ.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Private data bytes of an RTU.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a DREQ.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes of a DREP.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;

/// Which message an MRA acknowledges or a REJ rejects (2 bits).
pub mod msg_code {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// A LAP (MRA) or anything else (REJ).
    pub const OTHER: u8 = 2;
}

/// REJ reason codes (IBA table 109) the CM uses or must recognise.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// The sender timed out waiting for the next message.
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED_REQUEST: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Nobody listens on the service ID (the kernel's answer to an unmatched REQ).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport service type not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The REQ names a connection that is already (or still) in use.
    pub const STALE_CONNECTION: u16 = 10;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// The consumer (application) rejected: rdma_reject(3).
    pub const CONSUMER_REJECT: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

mad_layout! {
    /// A typed view of an MRA's data.
    view MraPacket;
    /// Every field of an MRA (MsgRcptAck: "I got it, but I need longer to answer").
    repr MraRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The receiver's communication ID (the REQ sender's when MRAing a REQ).
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
        /// Which message is acknowledged ([`msg_code`]).
        message_mraed, set_message_mraed: u8 = (8, 0, 2);
        /// Extra time the sender needs: 4.096 us * 2^value.
        service_timeout, set_service_timeout: u8 = (9, 0, 5);
    }
    bytes {
        /// Private data.
        private_data, private_data_mut = (10, MRA_PRIVATE_DATA_LEN);
    }
}

mad_layout! {
    /// A typed view of a REJ's data.
    view RejPacket;
    /// Every field of a REJ (ConnectReject).
    repr RejRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID (0 if it never made one).
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The receiver's communication ID.
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
        /// Which message is rejected ([`msg_code`]).
        message_rejected, set_message_rejected: u8 = (8, 0, 2);
        /// Valid bytes of `ari` (7 bits).
        rejected_info_length, set_rejected_info_length: u8 = (9, 0, 7);
        /// Reason ([`rej_reason`]).
        reason, set_reason: u16 = (10, 0, 16);
    }
    bytes {
        /// Additional rejection information.
        ari, ari_mut = (12, REJ_ARI_LEN);
        /// Private data.
        private_data, private_data_mut = (84, REJ_PRIVATE_DATA_LEN);
    }
}

mad_layout! {
    /// A typed view of an RTU's data.
    view RtuPacket;
    /// Every field of an RTU (ReadyToUse).
    repr RtuRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The receiver's communication ID.
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    }
    bytes {
        /// Private data.
        private_data, private_data_mut = (8, RTU_PRIVATE_DATA_LEN);
    }
}

mad_layout! {
    /// A typed view of a DREQ's data.
    view DreqPacket;
    /// Every field of a DREQ (DisconnectRequest).
    repr DreqRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The receiver's communication ID.
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
        /// The receiver's QPN (the kernel checks it against the connection).
        remote_qpn_eecn, set_remote_qpn_eecn: u32 = (8, 0, 24);
    }
    bytes {
        /// Private data.
        private_data, private_data_mut = (12, DREQ_PRIVATE_DATA_LEN);
    }
}

mad_layout! {
    /// A typed view of a DREP's data.
    view DrepPacket;
    /// Every field of a DREP (DisconnectReply).
    repr DrepRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The receiver's communication ID.
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
    }
    bytes {
        /// Private data.
        private_data, private_data_mut = (8, DREP_PRIVATE_DATA_LEN);
    }
}
