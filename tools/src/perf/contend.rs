//! `--contend N`: N CPU-bound competitor processes for the whole command, so that figures
//! on a busy machine come from one reproducible command (the test and its baseline share
//! the same competition), and the machine's load, read before and after, goes with them.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a competitor spins at most if nobody stops it: a bound even if its parent is
/// killed in a way that skips every cleanup and the parent check below misses it.
const CONTENDER_LIFETIME: Duration = Duration::from_secs(3600);

/// The competitors of one command; they are killed (and reaped) when this is dropped,
/// whatever way the command ends.
pub struct Contenders {
    children: Vec<Child>,
}

impl Contenders {
    /// Starts `count` competitors: this same program, as the hidden `contender` command.
    pub fn start(count: u32) -> std::io::Result<Contenders> {
        if count == 0 {
            return Ok(Contenders {
                children: Vec::new(),
            });
        }
        let exe = std::env::current_exe()?;
        let mut contenders = Contenders {
            children: Vec::with_capacity(count as usize),
        };
        for _ in 0..count {
            // On error, the ones started already are stopped by drop.
            let child = Command::new(&exe)
                .arg("contender")
                .arg(std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            contenders.children.push(child);
        }
        Ok(contenders)
    }
}

impl Drop for Contenders {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// The load average when the command started, before any competitor ran.
static LOAD_AT_START: OnceLock<Option<f64>> = OnceLock::new();

/// Notes the load average at the start of the command (first call only).
pub fn mark_start() {
    LOAD_AT_START.get_or_init(load_average);
}

/// The load average noted by [`mark_start`], and the one now: what the header shows.
pub fn load_then_and_now() -> (Option<f64>, Option<f64>) {
    (LOAD_AT_START.get().copied().flatten(), load_average())
}

/// The 1-minute load average (/proc/loadavg), if the system says.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The hidden `contender` command: spins on one CPU until its parent `parent` is gone (or
/// an hour has passed), then exits. Never returns early otherwise.
pub fn spin_until_parent_exits(parent: u32) {
    let started = Instant::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    loop {
        // About a millisecond of pure CPU work between checks.
        for _ in 0..1_000_000 {
            x = x.rotate_left(7) ^ x.wrapping_mul(3);
        }
        std::hint::black_box(x);
        if std::os::unix::process::parent_id() != parent || started.elapsed() > CONTENDER_LIFETIME {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_average_is_read_from_proc() {
        let load = load_average().expect("Linux has /proc/loadavg");
        assert!(load >= 0.0);
    }
}
