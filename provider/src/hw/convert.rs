//! Numeric translations between the softverbs contract types and libibverbs values: errno to
//! typed errors, and the verbs.h enums (whose values the contract types mirror).

use softverbs_api::{
    AsyncEventKind, Mtu, PortState, QpState, QpType, VerbsError, WcFlags, WcOpcode, WcStatus,
};

use super::ffi::Errno;

/// The typed error the emulator gives for `errno` (which is also what `errno()` maps back
/// to for the usual values), with `what` saying which call failed.
pub(crate) fn error(errno: Errno, what: &str) -> VerbsError {
    let msg = format!("{what}: {}", std::io::Error::from_raw_os_error(errno));
    match errno {
        libc::EINVAL => VerbsError::InvalidArgument(msg),
        libc::ENOMEM | libc::ENOSPC => VerbsError::OutOfResources(msg),
        libc::EPERM | libc::EACCES => VerbsError::PermissionDenied(msg),
        libc::ENOENT | libc::ENODEV => VerbsError::NotFound(msg),
        libc::EBUSY => VerbsError::Busy(msg),
        libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => VerbsError::NotSupported(msg),
        _ => VerbsError::Io {
            errno,
            message: what.to_string(),
        },
    }
}

/// `enum ibv_qp_type` of a contract QP type.
pub(crate) fn qp_type_raw(t: QpType) -> u32 {
    t.to_raw()
}

/// `enum ibv_qp_state` of a contract state (the contract enum follows verbs.h order).
pub(crate) fn qp_state_raw(s: QpState) -> u32 {
    s.to_raw()
}

/// The contract state of an `enum ibv_qp_state` value (unknown values read as ERR).
pub(crate) fn qp_state(raw: u32) -> QpState {
    QpState::from_raw(raw).unwrap_or(QpState::Err)
}

/// The MTU of an `enum ibv_mtu` value (unknown values read as the smallest).
pub(crate) fn mtu(raw: u32) -> Mtu {
    Mtu::from_raw(raw).unwrap_or(Mtu::Mtu256)
}

/// The port state of an `enum ibv_port_state` value: only ACTIVE (4) passes traffic.
pub(crate) fn port_state(raw: u32) -> PortState {
    if raw == 4 {
        PortState::Active
    } else {
        PortState::Down
    }
}

/// The contract status of an `enum ibv_wc_status` value (the contract enum follows verbs.h
/// order; unknown values read as GENERAL_ERR).
pub(crate) fn wc_status(raw: u32) -> WcStatus {
    WcStatus::from_raw(raw).unwrap_or(WcStatus::GeneralErr)
}

/// The contract opcode of an `enum ibv_wc_opcode` value (`None` for values it lacks).
pub(crate) fn wc_opcode(raw: u32) -> Option<WcOpcode> {
    [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::CompSwap,
        WcOpcode::FetchAdd,
        WcOpcode::BindMw,
        WcOpcode::LocalInv,
        WcOpcode::Tso,
        WcOpcode::Flush,
        WcOpcode::AtomicWrite,
        WcOpcode::Recv,
        WcOpcode::RecvRdmaWithImm,
    ]
    .into_iter()
    .find(|op| op.to_raw() == raw)
}

/// The contract flags of `ibv_wc_flags` (the same bit values; others are dropped).
pub(crate) fn wc_flags(raw: u32) -> WcFlags {
    WcFlags(raw & WcFlags::all().bits())
}

/// The contract kind of an `enum ibv_event_type` value (`None` for values it lacks).
pub(crate) fn async_kind(raw: u32) -> Option<AsyncEventKind> {
    AsyncEventKind::from_raw(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_through_their_verbs_h_values() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ] {
            assert_eq!(qp_state(qp_state_raw(s)), s);
        }
        for raw in 0..22 {
            assert_eq!(wc_status(raw).to_raw(), raw);
        }
        assert_eq!(wc_status(99), WcStatus::GeneralErr);
        assert_eq!(wc_opcode(129), Some(WcOpcode::RecvRdmaWithImm));
        assert_eq!(wc_opcode(77), None);
        for raw in 0..19 {
            assert_eq!(async_kind(raw).map(|k| k.to_raw()), Some(raw));
        }
        assert_eq!(async_kind(19), None);
    }

    #[test]
    fn errno_maps_to_the_typed_error_with_the_same_errno() {
        for e in [
            libc::EINVAL,
            libc::ENOMEM,
            libc::EPERM,
            libc::ENOENT,
            libc::EBUSY,
            libc::EOPNOTSUPP,
        ] {
            assert_eq!(error(e, "x").errno(), e);
        }
        assert_eq!(error(libc::EFAULT, "x").errno(), libc::EFAULT);
        assert!(matches!(error(libc::ENODEV, "x"), VerbsError::NotFound(_)));
    }
}
