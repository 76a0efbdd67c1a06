//! Errors at the verbs API, each mapped to the errno libibverbs would return.

/// Result type of every verbs call.
pub type VerbsResult<T> = Result<T, VerbsError>;

/// A failed verbs call. [`VerbsError::errno`] gives the value libibverbs returns for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// An argument or attribute is invalid (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A queue or table is full, or a size exceeds a device limit (ENOMEM).
    #[error("out of resources: {0}")]
    OutOfResources(String),
    /// The operation is not permitted, e.g. an access-flag combination (EPERM).
    #[error("not permitted: {0}")]
    PermissionDenied(String),
    /// No such device, port, object or key (ENOENT / ENODEV as noted in the message).
    #[error("not found: {0}")]
    NotFound(String),
    /// The object is still in use by another object (EBUSY), e.g. a CQ with QPs attached.
    #[error("busy: {0}")]
    Busy(String),
    /// The operation is not supported by this device or QP type (EOPNOTSUPP).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A system call failed.
    #[error("I/O error: {}", io_text(message, *errno))]
    Io {
        /// The errno the OS reported.
        errno: i32,
        /// What was being done.
        message: String,
    },
}

/// `message` with the errno appended, unless the message already ends with it as
/// `std::io::Error` prints it ("(os error N)"): the number is said once.
fn io_text(message: &str, errno: i32) -> String {
    if message.ends_with(&format!("(os error {errno})")) {
        message.to_string()
    } else {
        format!("{message} (errno {errno})")
    }
}

impl VerbsError {
    /// The errno value libibverbs returns for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            VerbsError::InvalidArgument(_) => 22, // EINVAL
            VerbsError::OutOfResources(_) => 12,  // ENOMEM
            VerbsError::PermissionDenied(_) => 1, // EPERM
            VerbsError::NotFound(_) => 2,         // ENOENT
            VerbsError::Busy(_) => 16,            // EBUSY
            VerbsError::NotSupported(_) => 95,    // EOPNOTSUPP
            VerbsError::Io { errno, .. } => *errno,
        }
    }

    /// Shorthand for [`VerbsError::InvalidArgument`].
    pub fn inval(msg: impl Into<String>) -> Self {
        VerbsError::InvalidArgument(msg.into())
    }

    /// Shorthand for [`VerbsError::OutOfResources`].
    pub fn nomem(msg: impl Into<String>) -> Self {
        VerbsError::OutOfResources(msg.into())
    }
}

#[cfg(test)]
mod tests {
    use super::VerbsError;

    #[test]
    fn an_io_error_names_its_errno_once() {
        let os = std::io::Error::from_raw_os_error(98);
        let e = VerbsError::Io {
            errno: 98,
            message: format!("binding 127.0.0.1:4791: {os}"),
        };
        let text = e.to_string();
        assert_eq!(text.matches("98").count(), 1, "{text}");
        assert!(text.ends_with("(os error 98)"), "{text}");
        let plain = VerbsError::Io {
            errno: 110,
            message: "no completion for 60 s".into(),
        };
        assert_eq!(
            plain.to_string(),
            "I/O error: no completion for 60 s (errno 110)"
        );
    }
}
