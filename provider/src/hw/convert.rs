//! Numeric translations between the softverbs contract types and libibverbs values: errno to
//! typed errors, and the verbs.h enums (whose values the contract types mirror).

use softverbs_api::{AsyncEventKind, Mtu, PortState, QpType, VerbsError};

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

/// The contract kind of an `enum ibv_event_type` value (`None` for values it lacks).
pub(crate) fn async_kind(raw: u32) -> Option<AsyncEventKind> {
    AsyncEventKind::from_raw(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_through_their_verbs_h_values() {
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
