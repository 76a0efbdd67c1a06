//! ConnectReply (REP, attribute 0x0013; IBA table 110): the passive side's acceptance, with
//! its QP and starting PSN. Offsets relative to the MAD data.

use super::layout::mad_layout;
use super::mad::MAD_DATA_LEN;

/// Bytes of private data a REP carries.
pub const REP_PRIVATE_DATA_LEN: usize = 196;

mad_layout! {
    /// A typed view of a REP's data.
    view RepPacket;
    /// Every field of a REP.
    repr RepRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's (passive side's) communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// The REQ sender's communication ID.
        remote_comm_id, set_remote_comm_id: u32 = (4, 0, 32);
        /// Q_Key (unused for RC).
        local_qkey, set_local_qkey: u32 = (8, 0, 32);
        /// The sender's QP number.
        local_qpn, set_local_qpn: u32 = (12, 0, 24);
        /// The sender's EE context (RD only).
        local_eecn, set_local_eecn: u32 = (16, 0, 24);
        /// Starting PSN: the PSN the REQ sender (active side) sends from; also the REP sender's
        /// receive PSN.
        starting_psn, set_starting_psn: u32 = (20, 0, 24);
        /// Responder resources the sender grants.
        responder_resources, set_responder_resources: u8 = (24, 0, 8);
        /// Initiator depth of the sender.
        initiator_depth, set_initiator_depth: u8 = (25, 0, 8);
        /// The sender CA's ACK delay: 4.096 us * 2^value.
        target_ack_delay, set_target_ack_delay: u8 = (26, 0, 5);
        /// Failover accepted (alternate path).
        failover_accepted, set_failover_accepted: u8 = (26, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control, set_end_to_end_flow_control: u8 = (26, 7, 1);
        /// RNR retry count for the REQ sender's QP.
        rnr_retry_count, set_rnr_retry_count: u8 = (27, 0, 3);
        /// The sender's QP uses an SRQ.
        srq, set_srq: u8 = (27, 3, 1);
        /// The sender's CA GUID.
        local_ca_guid, set_local_ca_guid: u64 = (28, 0, 64);
    }
    bytes {
        /// Private data (rdma_cm puts user data here directly).
        private_data, private_data_mut = (36, REP_PRIVATE_DATA_LEN);
    }
}
