//! Why a memory access was refused.

/// A refused memory access. Nothing was copied when one of these is returned.
///
/// The transport turns these into the completion status or NAK the IB spec names: for local
/// SGEs a local protection / length error; for a peer's request a remote access error NAK
/// (`Misaligned` and `LengthExceeded`: an invalid request NAK), as rxe does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// No registered region has this key (never registered, deregistered, or stale).
    #[error("no memory region with this key")]
    InvalidKey,
    /// The region belongs to another protection domain than the QP.
    #[error("memory region belongs to another protection domain")]
    PdMismatch,
    /// The address range is not inside the region (or wraps around).
    #[error("address range outside the memory region")]
    OutOfBounds,
    /// The region was not registered with the access this operation needs.
    #[error("memory region does not allow this access")]
    AccessDenied,
    /// An atomic's address is not 8-byte aligned.
    #[error("atomic address is not 8-byte aligned")]
    Misaligned,
    /// The data is longer than the scatter list can hold.
    #[error("data longer than the scatter list")]
    LengthExceeded,
}
