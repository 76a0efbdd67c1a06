//! Early detection of a wedged case: while a case's programs run, the guest rxe's packet
//! counters (`sent_pkts`, `rcvd_pkts` of rxe0) must move. A case whose traffic has stopped
//! for [`STALL`] is failed at once, with a snapshot of the guest's rxe state written to the
//! run directory, instead of after the case's whole time limit (120-150 s).

use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::lab_env::LabEnv;

/// How long rxe0's counters may stand still while a case's programs run. The longest quiet
/// phase of a healthy case (side-channel exchange, program start under TCG) takes a few
/// seconds.
pub const STALL: Duration = Duration::from_secs(30);
/// How often the counters are read (each read is an ssh round trip into the guest).
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// Where rxe's counters are in the guest.
const COUNTERS: &str = "/sys/class/infiniband/rxe0/ports/1/hw_counters";

/// Watches rxe0's counters across the waits of one case.
pub struct Watchdog<'a> {
    env: &'a LabEnv,
    last: Option<(u64, u64)>,
    last_change: Instant,
    next_probe: Instant,
}

impl<'a> Watchdog<'a> {
    /// A watchdog for a case that starts now.
    pub fn new(env: &'a LabEnv) -> Self {
        let now = Instant::now();
        Watchdog {
            env,
            last: None,
            last_change: now,
            next_probe: now + PROBE_EVERY,
        }
    }

    /// Waits up to `limit` for `child` to exit. Fails early (killing `child`) when rxe0's
    /// counters have not moved for [`STALL`], saying so and where the guest's state was saved.
    pub fn wait_exit(
        &mut self,
        child: &mut Child,
        limit: Duration,
        who: &str,
    ) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + limit;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => {}
                _ => {
                    kill(child);
                    return Err(format!("{who} did not finish"));
                }
            }
            if let Some(stalled) = self.check() {
                kill(child);
                let saved = save_guest_state(self.env, who);
                return Err(format!("{who} wedged: {stalled}; guest state in {saved}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Reads the counters when a probe is due; `Some(why)` once they have stood still for
    /// [`STALL`].
    fn check(&mut self) -> Option<String> {
        let now = Instant::now();
        if now < self.next_probe {
            return None;
        }
        self.next_probe = now + PROBE_EVERY;
        let read = read_counters(self.env)?;
        if self.last != Some(read) {
            self.last = Some(read);
            self.last_change = now;
            return None;
        }
        let still = now.duration_since(self.last_change);
        (still >= STALL).then(|| {
            format!(
                "rxe0 sent_pkts={} rcvd_pkts={} unchanged for {} s",
                read.0,
                read.1,
                still.as_secs()
            )
        })
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// rxe0's (sent_pkts, rcvd_pkts), or `None` when the guest did not answer (a slow ssh is
/// not evidence of a stall).
fn read_counters(env: &LabEnv) -> Option<(u64, u64)> {
    let out = env
        .ssh(&[])
        .arg(format!("cat {COUNTERS}/sent_pkts {COUNTERS}/rcvd_pkts"))
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_counters(&String::from_utf8_lossy(&out.stdout))
}

/// Two numbers, one a line.
fn parse_counters(text: &str) -> Option<(u64, u64)> {
    let mut numbers = text.lines().map(|l| l.trim().parse::<u64>());
    match (numbers.next(), numbers.next()) {
        (Some(Ok(sent)), Some(Ok(rcvd))) => Some((sent, rcvd)),
        _ => None,
    }
}

/// Writes every rxe0 counter, the guest's QPs (`rdma res show qp`: state, PSNs), the lab
/// NIC's statistics, the busiest processes and the kernel's last messages to
/// `<run>/wedged-<unix time>.txt`; returns the path (or why not). Used for a wedged case,
/// and for any case's first failure before its retry.
pub(super) fn save_guest_state(env: &LabEnv, who: &str) -> String {
    // Bounded in the guest too: a wedged rxe must not hang the snapshot (and the stage).
    let script = format!(
        "timeout 20 sh -c 'cd {COUNTERS} && grep -H . *; echo; rdma res show qp; echo; \
         ip -s link show lab0; echo; ps -eo pid,stat,pcpu,etime,comm --sort=-pcpu | head -n 12; \
         echo; dmesg | tail -n 20'"
    );
    let text = match env.ssh(&[]).arg(script).stdin(Stdio::null()).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("ssh failed: {e}"),
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let path: PathBuf = env.run.join(format!("wedged-{stamp}.txt"));
    match std::fs::write(&path, format!("{who}\n\n{text}")) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(not saved: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_counters;

    #[test]
    fn counters_parse_as_two_lines() {
        assert_eq!(parse_counters("12\n34\n"), Some((12, 34)));
        assert_eq!(parse_counters("12\n"), None);
        assert_eq!(parse_counters("x\n1\n"), None);
    }
}
