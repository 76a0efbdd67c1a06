//! A whole CM MAD: the common header plus one decoded attribute, parsed from and emitted
//! to exactly 256 bytes. This is what the connection manager consumes and produces.

use super::class_port_info::{ClassPortInfoPacket, ClassPortInfoRepr};
use super::conn::{
    DrepPacket, DrepRepr, DreqPacket, DreqRepr, MraPacket, MraRepr, RejPacket, RejRepr, RtuPacket,
    RtuRepr,
};
use super::mad::{attr, method, MadError, MadHeaderPacket, MadHeaderRepr, MAD_HEADER_LEN, MAD_LEN};
use super::rep::{RepPacket, RepRepr};
use super::req::{ReqPacket, ReqRepr};
use super::sidr::{SidrRepPacket, SidrRepRepr, SidrReqPacket, SidrReqRepr};

/// One decoded CM attribute.
// The big variants are a few hundred bytes; messages are built and consumed one at a time.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ClassPortInfo (Get / GetResp).
    ClassPortInfo(ClassPortInfoRepr),
    /// ConnectRequest.
    Req(ReqRepr),
    /// MsgRcptAck.
    Mra(MraRepr),
    /// ConnectReject.
    Rej(RejRepr),
    /// ConnectReply.
    Rep(RepRepr),
    /// ReadyToUse.
    Rtu(RtuRepr),
    /// DisconnectRequest.
    Dreq(DreqRepr),
    /// DisconnectReply.
    Drep(DrepRepr),
    /// ServiceIDResReq.
    SidrReq(SidrReqRepr),
    /// ServiceIDResReqResp.
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    /// The attribute ID this message travels under.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::ClassPortInfo(_) => attr::CLASS_PORT_INFO,
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Short name for logs ("REQ", "REP" ...).
    pub fn name(&self) -> &'static str {
        match self {
            CmMessage::ClassPortInfo(_) => "ClassPortInfo",
            CmMessage::Req(_) => "REQ",
            CmMessage::Mra(_) => "MRA",
            CmMessage::Rej(_) => "REJ",
            CmMessage::Rep(_) => "REP",
            CmMessage::Rtu(_) => "RTU",
            CmMessage::Dreq(_) => "DREQ",
            CmMessage::Drep(_) => "DREP",
            CmMessage::SidrReq(_) => "SIDR_REQ",
            CmMessage::SidrRep(_) => "SIDR_REP",
        }
    }
}

/// A CM MAD: header and attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common header (its attribute ID matches `message`).
    pub header: MadHeaderRepr,
    /// The attribute.
    pub message: CmMessage,
}

impl CmMad {
    /// A CM Send MAD carrying `message` with transaction ID `transaction_id`.
    pub fn send(transaction_id: u64, message: CmMessage) -> Self {
        CmMad {
            header: MadHeaderRepr::cm_send(message.attribute_id(), transaction_id),
            message,
        }
    }

    /// Parses a CM MAD from the payload of a UD SEND to QP1 (exactly 256 bytes).
    pub fn parse(bytes: &[u8]) -> Result<CmMad, MadError> {
        if bytes.len() != MAD_LEN {
            return if bytes.len() < MAD_LEN {
                Err(MadError::Truncated {
                    needed: MAD_LEN,
                    got: bytes.len(),
                })
            } else {
                Err(MadError::BadLength(bytes.len()))
            };
        }
        let header = MadHeaderRepr::parse(&MadHeaderPacket::new_checked(bytes)?);
        header.check_cm()?;
        let data = &bytes[MAD_HEADER_LEN..];
        let id = header.attribute_id;
        let bad_method = MadError::BadMethod {
            method: header.method,
            attr: id,
        };
        let message = match id {
            attr::CLASS_PORT_INFO => {
                if !matches!(header.method, method::GET | method::GET_RESP | method::SET) {
                    return Err(bad_method);
                }
                CmMessage::ClassPortInfo(ClassPortInfoRepr::parse(
                    &ClassPortInfoPacket::new_checked(data)?,
                ))
            }
            _ if header.method != method::SEND => return Err(bad_method),
            attr::REQ => CmMessage::Req(ReqRepr::parse(&ReqPacket::new_checked(data)?)),
            attr::MRA => CmMessage::Mra(MraRepr::parse(&MraPacket::new_checked(data)?)),
            attr::REJ => CmMessage::Rej(RejRepr::parse(&RejPacket::new_checked(data)?)),
            attr::REP => CmMessage::Rep(RepRepr::parse(&RepPacket::new_checked(data)?)),
            attr::RTU => CmMessage::Rtu(RtuRepr::parse(&RtuPacket::new_checked(data)?)),
            attr::DREQ => CmMessage::Dreq(DreqRepr::parse(&DreqPacket::new_checked(data)?)),
            attr::DREP => CmMessage::Drep(DrepRepr::parse(&DrepPacket::new_checked(data)?)),
            attr::SIDR_REQ => {
                CmMessage::SidrReq(SidrReqRepr::parse(&SidrReqPacket::new_checked(data)?))
            }
            attr::SIDR_REP => {
                CmMessage::SidrRep(SidrRepRepr::parse(&SidrRepPacket::new_checked(data)?))
            }
            other => return Err(MadError::UnsupportedAttribute(other)),
        };
        Ok(CmMad { header, message })
    }

    /// Writes the MAD into `out` (at least 256 bytes; the first 256 are written). The
    /// header's attribute ID is taken from the message.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), MadError> {
        if out.len() < MAD_LEN {
            return Err(MadError::Truncated {
                needed: MAD_LEN,
                got: out.len(),
            });
        }
        let (hdr, data) = out[..MAD_LEN].split_at_mut(MAD_HEADER_LEN);
        let mut header = self.header.clone();
        header.attribute_id = self.message.attribute_id();
        header.emit(&mut MadHeaderPacket::new_checked(hdr)?);
        match &self.message {
            CmMessage::ClassPortInfo(r) => r.emit(&mut ClassPortInfoPacket::new_checked(data)?),
            CmMessage::Req(r) => r.emit(&mut ReqPacket::new_checked(data)?),
            CmMessage::Mra(r) => r.emit(&mut MraPacket::new_checked(data)?),
            CmMessage::Rej(r) => r.emit(&mut RejPacket::new_checked(data)?),
            CmMessage::Rep(r) => r.emit(&mut RepPacket::new_checked(data)?),
            CmMessage::Rtu(r) => r.emit(&mut RtuPacket::new_checked(data)?),
            CmMessage::Dreq(r) => r.emit(&mut DreqPacket::new_checked(data)?),
            CmMessage::Drep(r) => r.emit(&mut DrepPacket::new_checked(data)?),
            CmMessage::SidrReq(r) => r.emit(&mut SidrReqPacket::new_checked(data)?),
            CmMessage::SidrRep(r) => r.emit(&mut SidrRepPacket::new_checked(data)?),
        }
        Ok(())
    }

    /// The MAD as a new 256-byte array.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        self.emit(&mut out)
            .expect("a 256-byte buffer holds every CM MAD");
        out
    }
}
