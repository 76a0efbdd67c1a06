//! The progress line on stderr of runs longer than a few seconds: nothing for short runs, so
//! the common case prints only the results.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Runs shorter than this print no progress.
const QUIET_FOR: Duration = Duration::from_secs(2);
/// Time between two progress lines.
const EVERY: Duration = Duration::from_secs(1);

/// A progress reporter of one run.
pub struct Progress {
    /// The command, printed in brackets before the label.
    tool: &'static str,
    label: String,
    started: Instant,
    next: Instant,
    printed: bool,
    terminal: bool,
}

impl Progress {
    /// Starts timing a run of `softverbs perf` called `label`.
    pub fn start(label: impl Into<String>) -> Progress {
        Progress::start_as("perf", label)
    }

    /// Starts timing a run of command `tool` called `label`.
    pub fn start_as(tool: &'static str, label: impl Into<String>) -> Progress {
        let now = Instant::now();
        Progress {
            tool,
            label: label.into(),
            started: now,
            next: now + QUIET_FOR,
            printed: false,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Whether a progress line is due at `now` (cheap; call before formatting a rate).
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Reports `done` of `total` (`None` when the run is by time, with `limit`), with a rate
    /// figure; cheap when nothing is due. Call as often as convenient.
    pub fn tick(
        &mut self,
        now: Instant,
        done: u64,
        total: Option<u64>,
        limit: Option<Duration>,
        rate: &str,
    ) {
        if now < self.next {
            return;
        }
        self.next = now + EVERY;
        let elapsed = now - self.started;
        let pct = match (total, limit) {
            (Some(t), _) if t > 0 => 100.0 * done as f64 / t as f64,
            (_, Some(l)) => 100.0 * elapsed.as_secs_f64() / l.as_secs_f64(),
            _ => 0.0,
        };
        let line = format!(
            "[{}] {}: {:5.1}% {} done, {:.0} s, {}",
            self.tool,
            self.label,
            pct.min(100.0),
            done,
            elapsed.as_secs_f64(),
            rate
        );
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r{line}\x1b[K");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.printed = true;
    }

    /// Ends the progress line, if one was printed on a terminal.
    pub fn finish(&mut self) {
        if self.printed && self.terminal {
            let _ = writeln!(std::io::stderr());
        }
        self.printed = false;
    }
}
