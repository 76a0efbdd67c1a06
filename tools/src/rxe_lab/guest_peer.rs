//! The rxe side of a verb scenario: `peer.py` (pyverbs, one RC QP on rxe0) in the guest,
//! driven over ssh's stdin/stdout one line per request (see the script for the protocol).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use super::lab_env::LabEnv;

/// The guest program, copied into the guest before a run.
pub const PEER_PY: &str = include_str!("../../rxe-lab/guest/peer.py");
/// Where it is copied.
pub const PEER_PATH: &str = "/tmp/softverbs-peer.py";

/// Installs [`PEER_PY`] in the guest.
pub fn install(env: &LabEnv) -> Result<(), String> {
    let mut child = env
        .ssh(&[])
        .arg(format!("cat > {PEER_PATH}"))
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ssh: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(PEER_PY.as_bytes())
            .map_err(|e| format!("copying peer.py: {e}"))?;
    }
    let status = child.wait().map_err(|e| format!("ssh: {e}"))?;
    if !status.success() {
        return Err(format!("copying peer.py into the guest failed: {status}"));
    }
    Ok(())
}

/// One reply: its `key=value` fields.
pub type Reply = HashMap<String, String>;

/// A running peer.py.
pub struct GuestPeer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    timeout: Duration,
    /// The fields of its first line: qpn, psn, gid, addr, rkey.
    pub info: Reply,
}

impl GuestPeer {
    /// Starts peer.py with a buffer of `buf_len` bytes and a QP of type `qp_type` (`rc`,
    /// `uc` or `ud`); waits up to `timeout` per reply.
    pub fn start(
        env: &LabEnv,
        buf_len: usize,
        qp_type: &str,
        timeout: Duration,
    ) -> Result<GuestPeer, String> {
        let mut child = env
            .ssh(&[])
            .arg(format!("exec python3 {PEER_PATH} {buf_len} {qp_type}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("ssh: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        // A reader thread turns the blocking pipe into a channel with timeouts; it ends when
        // the pipe closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = GuestPeer {
            child,
            stdin,
            lines,
            timeout,
            info: Reply::new(),
        };
        peer.info = peer.reply("start")?;
        Ok(peer)
    }

    fn reply(&mut self, what: &str) -> Result<Reply, String> {
        let line = self
            .lines
            .recv_timeout(self.timeout)
            .map_err(|_| format!("guest peer: no answer to {what} within {:?}", self.timeout))?;
        let mut words = line.split_whitespace();
        match words.next() {
            Some("ok") => Ok(words
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()),
            _ => Err(format!("guest peer, {what}: {line}")),
        }
    }

    /// Sends `line` (`cmd key=value ...`) and returns the reply's fields.
    pub fn call(&mut self, line: &str) -> Result<Reply, String> {
        writeln!(self.stdin, "{line}").map_err(|e| format!("guest peer: {e}"))?;
        self.stdin.flush().map_err(|e| format!("guest peer: {e}"))?;
        self.reply(line)
    }

    /// A numeric field of `reply`.
    pub fn num(reply: &Reply, key: &str) -> Result<u64, String> {
        reply
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("guest peer reply lacks a numeric {key}: {reply:?}"))
    }
}

impl Drop for GuestPeer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        // Bounded: give it a moment to exit cleanly, then kill our ssh child.
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
