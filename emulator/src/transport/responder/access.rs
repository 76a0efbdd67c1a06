//! What a request may touch: who the memory checks see, what the QP allows, and the NAK a
//! refused access earns.

use softverbs_api::AccessFlags;

use crate::memory::{MemError, RemoteAccessor};
use crate::transport::qp::TransportQp;
use crate::wire::NakCode;

/// The NAK a refused memory access earns.
pub(super) fn nak_for(e: MemError) -> NakCode {
    match e {
        MemError::Misaligned | MemError::LengthExceeded => NakCode::InvalidRequest,
        MemError::InvalidKey
        | MemError::PdMismatch
        | MemError::OutOfBounds
        | MemError::AccessDenied => NakCode::RemoteAccessError,
    }
}

/// Whom the memory checks see for a request on `qp`: its PD, and its number for type 2
/// windows.
pub(super) fn accessor(qp: &TransportQp) -> RemoteAccessor {
    RemoteAccessor::qp(qp.pd, qp.qpn)
}

/// The QP must allow `need` (its `qp_access_flags`); otherwise the request is invalid.
pub(super) fn qp_allows(qp: &TransportQp, need: AccessFlags) -> bool {
    qp.attr.qp_access_flags.contains(need)
}
