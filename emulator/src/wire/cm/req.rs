//! ConnectRequest (REQ, attribute 0x0010; IBA table 106): the active side's offer of a
//! connection, with its QP, starting PSN, timeouts, retry counts and paths. Offsets are
//! relative to the MAD data (after the 24-byte common header).

use super::layout::mad_layout;
use super::mad::MAD_DATA_LEN;

/// Bytes of private data a REQ carries.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;

mad_layout! {
    /// A typed view of a REQ's data.
    view ReqPacket;
    /// Every field of a REQ. On RoCE the kernel sends the LIDs as 0xffff (permissive) and the
    /// GIDs are the IP addresses (IPv4-mapped for v4).
    repr ReqRepr;
    len MAD_DATA_LEN;
    fields {
        /// The sender's communication ID.
        local_comm_id, set_local_comm_id: u32 = (0, 0, 32);
        /// Service ID the request is for (rdma_cm: port space << 16 | port).
        service_id, set_service_id: u64 = (8, 0, 64);
        /// The sender's CA GUID.
        local_ca_guid, set_local_ca_guid: u64 = (16, 0, 64);
        /// Q_Key (unused for RC).
        local_qkey, set_local_qkey: u32 = (28, 0, 32);
        /// The sender's QP number.
        local_qpn, set_local_qpn: u32 = (32, 0, 24);
        /// RDMA READ/atomic requests the sender accepts (responder resources).
        responder_resources, set_responder_resources: u8 = (35, 0, 8);
        /// The sender's EE context (RD only; 0).
        local_eecn, set_local_eecn: u32 = (36, 0, 24);
        /// RDMA READ/atomic requests the sender issues in parallel (initiator depth).
        initiator_depth, set_initiator_depth: u8 = (39, 0, 8);
        /// Remote EE context (RD only; 0).
        remote_eecn, set_remote_eecn: u32 = (40, 0, 24);
        /// How long the receiver may take to answer: 4.096 us * 2^value.
        remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = (43, 0, 5);
        /// Transport service type: 0 RC, 1 UC, 2 RD.
        transport_service_type, set_transport_service_type: u8 = (43, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control, set_end_to_end_flow_control: u8 = (43, 7, 1);
        /// Starting PSN (24 bits): the kernel makes it the sender's receive PSN, so the passive
        /// side sends from it (its sq_psn) and the REP's starting PSN is the active side's.
        starting_psn, set_starting_psn: u32 = (44, 0, 24);
        /// How long the sender takes to answer: 4.096 us * 2^value.
        local_cm_response_timeout, set_local_cm_response_timeout: u8 = (47, 0, 5);
        /// Transport retry count (3 bits).
        retry_count, set_retry_count: u8 = (47, 5, 3);
        /// Partition key.
        pkey, set_pkey: u16 = (48, 0, 16);
        /// Path MTU (IBV_MTU_* enum: 1 = 256 ... 5 = 4096).
        path_mtu, set_path_mtu: u8 = (50, 0, 4);
        /// RDC exists (RD only).
        rdc_exists, set_rdc_exists: u8 = (50, 4, 1);
        /// RNR retry count (3 bits, 7 = infinite).
        rnr_retry_count, set_rnr_retry_count: u8 = (50, 5, 3);
        /// How many times the sender resends a CM message (4 bits).
        max_cm_retries, set_max_cm_retries: u8 = (51, 0, 4);
        /// The sender's QP uses an SRQ.
        srq, set_srq: u8 = (51, 4, 1);
        /// Extended transport type (XRC).
        extended_transport_type, set_extended_transport_type: u8 = (51, 5, 3);
        /// Primary path: the sender's LID.
        primary_local_lid, set_primary_local_lid: u16 = (52, 0, 16);
        /// Primary path: the receiver's LID.
        primary_remote_lid, set_primary_remote_lid: u16 = (54, 0, 16);
        /// Primary path flow label (20 bits); on RoCEv2 it picks the UDP source port.
        primary_flow_label, set_primary_flow_label: u32 = (88, 0, 20);
        /// Primary path static rate.
        primary_packet_rate, set_primary_packet_rate: u8 = (91, 2, 6);
        /// Primary path traffic class.
        primary_traffic_class, set_primary_traffic_class: u8 = (92, 0, 8);
        /// Primary path hop limit.
        primary_hop_limit, set_primary_hop_limit: u8 = (93, 0, 8);
        /// Primary path service level.
        primary_sl, set_primary_sl: u8 = (94, 0, 4);
        /// Primary path is subnet local.
        primary_subnet_local, set_primary_subnet_local: u8 = (94, 4, 1);
        /// Primary path local ACK timeout: 4.096 us * 2^value.
        primary_local_ack_timeout, set_primary_local_ack_timeout: u8 = (95, 0, 5);
        /// Alternate path: the sender's LID.
        alternate_local_lid, set_alternate_local_lid: u16 = (96, 0, 16);
        /// Alternate path: the receiver's LID.
        alternate_remote_lid, set_alternate_remote_lid: u16 = (98, 0, 16);
        /// Alternate path flow label.
        alternate_flow_label, set_alternate_flow_label: u32 = (132, 0, 20);
        /// Alternate path static rate.
        alternate_packet_rate, set_alternate_packet_rate: u8 = (135, 2, 6);
        /// Alternate path traffic class.
        alternate_traffic_class, set_alternate_traffic_class: u8 = (136, 0, 8);
        /// Alternate path hop limit.
        alternate_hop_limit, set_alternate_hop_limit: u8 = (137, 0, 8);
        /// Alternate path service level.
        alternate_sl, set_alternate_sl: u8 = (138, 0, 4);
        /// Alternate path is subnet local.
        alternate_subnet_local, set_alternate_subnet_local: u8 = (138, 4, 1);
        /// Alternate path local ACK timeout.
        alternate_local_ack_timeout, set_alternate_local_ack_timeout: u8 = (139, 0, 5);
        /// Send Alternate Path supported.
        sap_supported, set_sap_supported: u8 = (139, 5, 1);
    }
    bytes {
        /// Primary path: the sender's GID.
        primary_local_gid, primary_local_gid_mut = (56, 16);
        /// Primary path: the receiver's GID.
        primary_remote_gid, primary_remote_gid_mut = (72, 16);
        /// Alternate path: the sender's GID.
        alternate_local_gid, alternate_local_gid_mut = (100, 16);
        /// Alternate path: the receiver's GID.
        alternate_remote_gid, alternate_remote_gid_mut = (116, 16);
        /// Private data (rdma_cm: its 36-byte header, then 56 bytes of user data).
        private_data, private_data_mut = (140, REQ_PRIVATE_DATA_LEN);
    }
}
