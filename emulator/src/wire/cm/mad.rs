//! The MAD common header (24 bytes) in front of every management datagram, the constants of
//! the CM class (management class 0x07, class version 2) and the GSI addressing it travels
//! with on RoCEv2 (UD SEND to QP1, Q_Key 0x80010000, default P_Key).
//!
//! ```text
//! byte 0      BaseVersion (1)        byte 1     MgmtClass (0x07 = CM)
//! byte 2      ClassVersion (2)       byte 3     R(7) Method(6:0)
//! bytes 4-5   Status                 bytes 6-7  ClassSpecific
//! bytes 8-15  TransactionID
//! bytes 16-17 AttributeID            bytes 18-19 reserved
//! bytes 20-23 AttributeModifier
//! ```

use super::layout::mad_layout;

/// Every MAD is exactly this long (header + 232 bytes of class data).
pub const MAD_LEN: usize = 256;
/// Length of the MAD common header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of class data after the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The QP number of the general services interface, where CM MADs go.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default (full-membership) partition key CM MADs are sent with.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// MAD base version.
pub const MAD_BASE_VERSION: u8 = 1;
/// Management class of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version the kernel speaks.
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods the CM uses (IBA 13.4.5).
pub mod method {
    /// Get (ClassPortInfo).
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send: every connection-management message.
    pub const SEND: u8 = 0x03;
    /// GetResp (the response bit set on Get).
    pub const GET_RESP: u8 = 0x81;
}

/// CM attribute IDs (IBA table 104).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath (not implemented).
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse (not implemented).
    pub const APR: u16 = 0x001a;
}

/// Why bytes are not a CM MAD we accept.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum MadError {
    /// The buffer ends before the structure does.
    #[error("truncated MAD: need {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// A MAD is exactly 256 bytes.
    #[error("MAD length {0} is not 256")]
    BadLength(usize),
    /// Base version other than 1.
    #[error("MAD base version {0} unsupported")]
    BadBaseVersion(u8),
    /// Not the CM management class.
    #[error("management class 0x{0:02x} is not CM")]
    NotCm(u8),
    /// CM class version other than 2.
    #[error("CM class version {0} unsupported")]
    BadClassVersion(u8),
    /// Method not valid for the attribute.
    #[error("method 0x{method:02x} not valid for attribute 0x{attr:04x}")]
    BadMethod {
        /// The method byte.
        method: u8,
        /// The attribute ID.
        attr: u16,
    },
    /// Attribute we do not decode (LAP/APR or unknown).
    #[error("CM attribute 0x{0:04x} not supported")]
    UnsupportedAttribute(u16),
    /// A field holds a value the protocol does not allow.
    #[error("bad {what}: {value}")]
    BadField {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
    },
}

mad_layout! {
    /// A typed view of the MAD common header.
    view MadHeaderPacket;
    /// The fields of a MAD common header (reserved bytes 18-19 are emitted as zero).
    repr MadHeaderRepr;
    len MAD_HEADER_LEN;
    fields {
        /// Base version (1).
        base_version, set_base_version: u8 = (0, 0, 8);
        /// Management class (0x07 for CM).
        mgmt_class, set_mgmt_class: u8 = (1, 0, 8);
        /// Class version (2 for CM).
        class_version, set_class_version: u8 = (2, 0, 8);
        /// Method, response bit included.
        method, set_method: u8 = (3, 0, 8);
        /// Status.
        status, set_status: u16 = (4, 0, 16);
        /// Class-specific word.
        class_specific, set_class_specific: u16 = (6, 0, 16);
        /// Transaction ID: a request's, echoed by its response.
        transaction_id, set_transaction_id: u64 = (8, 0, 64);
        /// Attribute ID (which CM message).
        attribute_id, set_attribute_id: u16 = (16, 0, 16);
        /// Attribute modifier.
        attribute_modifier, set_attribute_modifier: u32 = (20, 0, 32);
    }
    bytes {}
}

impl MadHeaderRepr {
    /// A CM Send header for attribute `attribute_id` with transaction ID `tid`.
    pub fn cm_send(attribute_id: u16, transaction_id: u64) -> Self {
        MadHeaderRepr {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// `Ok` for a CM header we speak (base version 1, class 0x07, version 2).
    pub fn check_cm(&self) -> Result<(), MadError> {
        if self.base_version != MAD_BASE_VERSION {
            return Err(MadError::BadBaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::NotCm(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(MadError::BadClassVersion(self.class_version));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ib_send_lat_rdmacm_mtu1500.pcap frame 1: the header of a ConnectRequest.
    const REQ_HDR: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x02, 0xc9, 0x31, 0x40, 0xc0, 0x00, 0x10, 0,
        0, 0, 0, 0, 0,
    ];

    #[test]
    fn parse_and_emit_real_bytes() {
        let r = MadHeaderRepr::parse(&MadHeaderPacket::new_checked(&REQ_HDR[..]).unwrap());
        assert_eq!(r, MadHeaderRepr::cm_send(attr::REQ, 0x0000_0002_c931_40c0));
        r.check_cm().unwrap();
        let mut out = [0xaau8; 24];
        r.emit(&mut MadHeaderPacket::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, REQ_HDR);
    }

    #[test]
    fn wrong_class_and_versions_are_typed_errors() {
        let mut h = MadHeaderRepr::cm_send(attr::REQ, 1);
        h.mgmt_class = 0x03;
        assert_eq!(h.check_cm(), Err(MadError::NotCm(3)));
        h.mgmt_class = MGMT_CLASS_CM;
        h.class_version = 1;
        assert_eq!(h.check_cm(), Err(MadError::BadClassVersion(1)));
        h.base_version = 2;
        assert_eq!(h.check_cm(), Err(MadError::BadBaseVersion(2)));
    }

    #[test]
    fn short_header_is_truncated() {
        assert_eq!(
            MadHeaderPacket::new_checked(&REQ_HDR[..23]).unwrap_err(),
            MadError::Truncated {
                needed: 24,
                got: 23
            }
        );
    }
}
