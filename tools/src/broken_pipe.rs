//! A closed output pipe ends the command quietly, as it ends other command-line tools:
//! `softverbs demo | head -1` must not print a panic.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe returns EPIPE and `println!` panics
//! with "failed printing to stdout: Broken pipe". Restoring SIGPIPE's default would need
//! unsafe code outside the crates allowed to have it; instead a panic hook recognises that
//! one panic and exits with the status a SIGPIPE death gives in a shell (128 + 13).

/// The exit status of a command whose output pipe was closed.
pub const BROKEN_PIPE_STATUS: i32 = 128 + 13;

/// Whether a panic message is the standard library's report of a write to a closed pipe.
pub fn is_broken_pipe(message: &str) -> bool {
    (message.starts_with("failed printing to stdout")
        || message.starts_with("failed printing to stderr"))
        && message.contains("Broken pipe")
}

/// Installs the hook (once, at the start of `main`); every other panic is reported as before.
pub fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_broken_pipe(message) {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::is_broken_pipe;

    #[test]
    fn only_the_closed_pipe_panic_is_recognised() {
        assert!(is_broken_pipe(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_broken_pipe("failed printing to stdout: No space left"));
        assert!(!is_broken_pipe("index out of bounds"));
    }
}
