//! A guest program's output read on a thread: every line is passed on as it comes (to
//! wait for a marker such as "listening") and the whole text is kept for the verdict.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::Instant;

/// Reads `from` to its end on a thread: its lines one by one on the receiver, the whole
/// output (newline-terminated lines) from the handle.
pub fn tap_lines(from: impl Read + Send + 'static) -> (Receiver<String>, JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (rx, all)
}

/// Waits until the line `marker` comes, at most until `deadline`; false if it did not
/// (the program ended or took too long).
pub fn wait_for_line(lines: &Receiver<String>, marker: &str, deadline: Instant) -> bool {
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line == marker => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}
