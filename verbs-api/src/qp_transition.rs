//! The QP state machine of ibv_modify_qp(3): which transitions exist and which attributes each
//! requires and allows, per QP type. (Being filled in: see validate_modify.)

use crate::error::VerbsResult;
use crate::qp::{QpAttr, QpAttrMask, QpState, QpType};

/// Checks a modify call against the QP's type and current state and returns the new state.
pub fn validate_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
) -> VerbsResult<QpState> {
    let _ = (qp_type, attr);
    if mask.contains(QpAttrMask::STATE) {
        Ok(attr.qp_state)
    } else {
        Ok(current)
    }
}
