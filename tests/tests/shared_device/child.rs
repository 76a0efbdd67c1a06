//! Other OS processes of a test: this test binary run again as one member of a shared
//! device (the ignored test `member_role` with the role in [`ROLE_ENV`]). A child talks
//! through lines: it prints `@@ WORD ...` on stdout (other lines are libtest's) and reads
//! one line at a time on stdin.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use softverbs::{register_device, Context, DeviceConfig};

/// The role a child plays and its arguments, space-separated.
pub const ROLE_ENV: &str = "SHARED_DEVICE_ROLE";
/// The device the child opens: `NAME=IP`.
pub const DEVICE_ENV: &str = "SHARED_DEVICE_DEVICE";
/// What every line a child means for its parent starts with.
const MARK: &str = "@@ ";

/// The device of one test: its own address 127.30.N.1, port 4791.
#[derive(Debug, Clone)]
pub struct Dev {
    pub name: String,
    pub ip: IpAddr,
}

impl Dev {
    /// Device `n` of this file.
    pub fn new(n: u8) -> Dev {
        Dev {
            name: format!("shared-{n}"),
            ip: IpAddr::from([127, 30, n, 1]),
        }
    }

    /// The device a child was told to open ([`DEVICE_ENV`]).
    pub fn from_env() -> Dev {
        let spec = std::env::var(DEVICE_ENV).expect("SHARED_DEVICE_DEVICE");
        let (name, ip) = spec.split_once('=').expect("NAME=IP");
        Dev {
            name: name.to_string(),
            ip: ip.parse().expect("an IP address"),
        }
    }

    /// Registers the device in this process (once) and opens it.
    pub fn open(&self) -> Context {
        match register_device(DeviceConfig::new(self.name.clone(), self.ip)) {
            Ok(()) => {}
            // Registered by an earlier open of this process.
            Err(e) if e.to_string().contains("already exists") => {}
            Err(e) => panic!("registering {}: {e}", self.name),
        }
        Context::open(&self.name).unwrap_or_else(|e| panic!("opening {}: {e}", self.name))
    }
}

/// A child process and its two pipes.
pub struct Child {
    what: String,
    proc: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
}

impl Child {
    /// Starts a child playing `role` (with its arguments) on `dev`.
    pub fn spawn(role: &str, dev: &Dev) -> Child {
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "member_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, role)
            .env(DEVICE_ENV, format!("{}={}", dev.name, dev.ip))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning this test binary again");
        let stdout = proc.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have begun the line ("test member_role ... ").
                if let Some(at) = line.find(MARK) {
                    if tx.send(line[at + MARK.len()..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Child {
            what: format!("child {role:?} (pid {})", proc.id()),
            stdin: proc.stdin.take(),
            proc,
            lines,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// Waits up to `wait` for the child's next line, which must start with `word`; returns
    /// the rest.
    pub fn expect_within(&self, word: &str, wait: Duration) -> String {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                let rest = line
                    .strip_prefix(word)
                    .unwrap_or_else(|| panic!("{}: expected {word:?}, got {line:?}", self.what));
                rest.trim().to_string()
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("{}: no {word:?} within {wait:?}", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{}: ended before saying {word:?}", self.what)
            }
        }
    }

    /// [`Child::expect_within`] with the usual wait.
    pub fn expect(&self, word: &str) -> String {
        self.expect_within(word, Duration::from_secs(30))
    }

    /// Sends one line to the child.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("writing to the child");
        stdin.flush().unwrap();
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }

    /// Closes the child's stdin (its cue to exit) and checks that it exits successfully.
    pub fn finish(mut self) {
        self.stdin = None;
        let status = self.proc.wait().unwrap();
        assert!(status.success(), "{} failed: {status:?}", self.what);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // A test that failed half-way leaves no process behind.
        if let Ok(None) = self.proc.try_wait() {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}

/// Prints a line for the parent.
pub fn say(line: &str) {
    println!("{MARK}{line}");
}

/// The next line from the parent; `None` once it closed our stdin.
pub fn hear() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_string()),
    }
}

/// Waits for the parent to close our stdin (it has checked what it needed from us).
pub fn wait_for_parent() {
    while hear().is_some() {}
}

/// `key=value` of a line of `key=value` fields.
pub fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_string()
}

/// A number field (decimal or 0x hex).
pub fn num(line: &str, key: &str) -> u64 {
    let v = field(line, key);
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    }
    .unwrap_or_else(|_| panic!("{key}={v:?} is not a number"))
}
