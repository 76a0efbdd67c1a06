//! The registry of the processes sharing one device: a directory per device address and
//! port, where each process holds a slot (1..=254) by holding an advisory lock on the
//! slot's file. The kernel drops the lock when the process dies, however it dies, so a slot
//! whose lock can be taken is free: liveness needs no heartbeat and no cleanup. Beside each
//! slot's lock file, an info file says what `softverbs devices -v` shows and what the
//! steering needs (the member's pid, its index in the port group, its QP count).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

/// The first and last slot a process may hold (0 is QP0/QP1's, 0xFF the probes').
pub const SLOTS: std::ops::RangeInclusive<u8> = 1..=254;

/// What a member publishes about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberInfo {
    /// Its process id.
    pub pid: u32,
    /// Its socket's index in the port group, once a probe found it.
    pub index: Option<u32>,
    /// The probe round that found `index`.
    pub generation: u64,
    /// QPs it has open.
    pub qps: u32,
    /// It has handed over (`Member::hand_over`) and is about to close its socket: probe
    /// rounds still probe its index but no longer wait for its answer, nor steer to it.
    pub left: bool,
}

impl MemberInfo {
    fn to_line(self) -> String {
        let index = self.index.map_or("-".to_string(), |i| i.to_string());
        format!(
            "pid={} index={index} generation={} qps={}{}\n",
            self.pid,
            self.generation,
            self.qps,
            if self.left { " left=1" } else { "" }
        )
    }

    fn parse(text: &str) -> Option<MemberInfo> {
        let mut info = MemberInfo {
            pid: 0,
            index: None,
            generation: 0,
            qps: 0,
            left: false,
        };
        for field in text.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            match key {
                "pid" => info.pid = value.parse().ok()?,
                "index" if value == "-" => info.index = None,
                "index" => info.index = Some(value.parse().ok()?),
                "generation" => info.generation = value.parse().ok()?,
                "qps" => info.qps = value.parse().ok()?,
                "left" => info.left = value == "1",
                _ => {}
            }
        }
        (info.pid != 0).then_some(info)
    }
}

/// The registry directory of one device.
#[derive(Debug, Clone)]
pub struct Registry {
    pub(super) dir: PathBuf,
}

/// A slot this process holds; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct SlotClaim {
    slot: u8,
    info_path: PathBuf,
    _lock: Flock<File>,
}

/// The registry's lock for membership changes (join, leave, re-probe), held until dropped.
#[derive(Debug)]
pub struct MembershipLock {
    _lock: Flock<File>,
}

impl Registry {
    /// The registry of the device on `ip` and UDP `port`: under `$XDG_RUNTIME_DIR/softverbs`,
    /// or `/dev/shm/softverbs-<uid>` without it; created (mode 0700) if absent.
    pub fn for_device(ip: IpAddr, port: u16) -> io::Result<Registry> {
        Registry::in_dir(&Registry::base_dir()?.join(format!("{ip}-{port}")))
    }

    /// The registry of the device on a qemu socket link whose frames socket is
    /// `frames_local`: keyed by that address, not the device's IP (which exists only on the
    /// VM's segment, and which two labs may both use).
    pub fn for_qemu_frames(frames_local: std::net::SocketAddr) -> io::Result<Registry> {
        let (ip, port) = (frames_local.ip(), frames_local.port());
        Registry::in_dir(&Registry::base_dir()?.join(format!("qemu-{ip}-{port}")))
    }

    /// Where the registries live: `$XDG_RUNTIME_DIR/softverbs`, or `/dev/shm/softverbs-<uid>`.
    fn base_dir() -> io::Result<PathBuf> {
        Ok(match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(dir) => PathBuf::from(dir).join("softverbs"),
            None => {
                let uid = std::fs::metadata("/proc/self")?.uid();
                PathBuf::from(format!("/dev/shm/softverbs-{uid}"))
            }
        })
    }

    /// A registry in `dir` (created, mode 0700, if absent).
    pub fn in_dir(dir: &Path) -> io::Result<Registry> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(Registry {
            dir: dir.to_path_buf(),
        })
    }

    pub(super) fn lock_path(&self, slot: u8) -> PathBuf {
        self.dir.join(format!("slot-{slot:03}"))
    }

    pub(super) fn info_path(&self, slot: u8) -> PathBuf {
        self.dir.join(format!("slot-{slot:03}.info"))
    }

    pub(super) fn open_lock_file(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
    }

    /// Claims the lowest free slot. `AddrInUse` when all are held.
    pub fn claim(&self) -> io::Result<SlotClaim> {
        for slot in SLOTS {
            let file = Registry::open_lock_file(&self.lock_path(slot))?;
            if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                return Ok(SlotClaim {
                    slot,
                    info_path: self.info_path(slot),
                    _lock: lock,
                });
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "all {} slots of the device are held by other processes",
                SLOTS.count()
            ),
        ))
    }

    /// Whether some process holds `slot`. (Testing takes the slot's lock for an instant: a
    /// process claiming at that instant moves on to the next slot.)
    pub fn is_held(&self, slot: u8) -> io::Result<bool> {
        let path = self.lock_path(slot);
        if !path.exists() {
            return Ok(false);
        }
        let file = Registry::open_lock_file(&path)?;
        Ok(Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err())
    }

    /// The slots held now, with what their members published (`None`: nothing yet).
    pub fn members(&self) -> io::Result<Vec<(u8, Option<MemberInfo>)>> {
        let mut out = Vec::new();
        for slot in SLOTS {
            if self.is_held(slot)? {
                let info = std::fs::read_to_string(self.info_path(slot))
                    .ok()
                    .and_then(|t| MemberInfo::parse(&t));
                out.push((slot, info));
            }
        }
        Ok(out)
    }

    /// Takes the membership lock, waiting at most `timeout` for its holder. `TimedOut` if it
    /// stays held (a member mid-change for that long is stuck, or the timeout too short).
    pub fn lock_membership(&self, timeout: Duration) -> io::Result<MembershipLock> {
        let path = self.dir.join("membership.lock");
        let started = Instant::now();
        loop {
            let file = Registry::open_lock_file(&path)?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(MembershipLock { _lock: lock }),
                Err(_) if started.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err((_, errno)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the device's membership lock stayed held for {timeout:?} ({errno})"
                        ),
                    ))
                }
            }
        }
    }
}

impl Registry {
    /// The number of the next probe round: one more than the last, kept in the registry.
    /// Taken under the membership lock, which `_held` proves.
    pub fn next_generation(&self, _held: &MembershipLock) -> io::Result<u64> {
        let path = self.dir.join("generation");
        let last: u64 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let next = last.wrapping_add(1);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{next}\n"))?;
        std::fs::rename(&tmp, &path)?;
        Ok(next)
    }
}

impl SlotClaim {
    /// The slot held.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// Publishes `info` for this slot (written whole and renamed into place: readers never
    /// see half of it).
    pub fn publish(&self, info: MemberInfo) -> io::Result<()> {
        let tmp = self.info_path.with_extension("info.tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(info.to_line().as_bytes())?;
        std::fs::rename(&tmp, &self.info_path)
    }
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        // The lock goes with the file; the info would be stale.
        let _ = std::fs::remove_file(&self.info_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    use crate::net::shared_port::tests::scratch_registry as scratch;

    #[test]
    fn claims_take_distinct_slots_and_a_released_slot_is_free_again() {
        let reg = scratch("claims");
        let a = reg.claim().unwrap();
        let b = reg.claim().unwrap();
        assert_eq!((a.slot(), b.slot()), (1, 2));
        a.publish(MemberInfo {
            pid: 41,
            index: Some(1),
            generation: 5,
            qps: 3,
            left: false,
        })
        .unwrap();
        let members = reg.members().unwrap();
        assert_eq!(
            members,
            [
                (
                    1,
                    Some(MemberInfo {
                        pid: 41,
                        index: Some(1),
                        generation: 5,
                        qps: 3,
                        left: false,
                    })
                ),
                (2, None)
            ]
        );
        drop(a);
        assert!(!reg.is_held(1).unwrap());
        assert_eq!(reg.members().unwrap(), [(2, None)]);
        assert_eq!(reg.claim().unwrap().slot(), 1);
    }

    #[test]
    fn a_slot_held_by_a_process_that_is_killed_becomes_free() {
        let reg = scratch("killed");
        // Another process holds slot 1 (flock(1) takes the same flock(2) lock).
        let mut holder = Command::new("flock")
            // --no-fork: flock(1) becomes `sleep` itself, so one process holds the lock.
            .args(["-x", "--no-fork"])
            .arg(reg.lock_path(1))
            .args(["sleep", "30"])
            .stdout(Stdio::null())
            .spawn()
            .expect("flock(1) from util-linux");
        let started = Instant::now();
        while !reg.is_held(1).unwrap() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "holder never locked"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(reg.claim().unwrap().slot(), 2, "slot 1 is taken");
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert!(!reg.is_held(1).unwrap(), "the lock went with its holder");
        assert_eq!(reg.claim().unwrap().slot(), 1);
    }

    #[test]
    fn the_membership_lock_is_exclusive_and_times_out_clearly() {
        let reg = scratch("membership");
        let held = reg.lock_membership(Duration::from_secs(1)).unwrap();
        assert_eq!(reg.next_generation(&held).unwrap(), 1);
        assert_eq!(reg.next_generation(&held).unwrap(), 2);
        let err = reg
            .lock_membership(Duration::from_millis(20))
            .expect_err("held");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(held);
        reg.lock_membership(Duration::from_millis(20)).unwrap();
    }

    #[test]
    fn member_info_survives_its_text_form_and_rejects_garbage() {
        let info = MemberInfo {
            pid: 7,
            index: None,
            generation: 0,
            qps: 0,
            left: false,
        };
        assert_eq!(MemberInfo::parse(&info.to_line()), Some(info));
        let gone = MemberInfo {
            left: true,
            index: Some(2),
            ..info
        };
        assert_eq!(MemberInfo::parse(&gone.to_line()), Some(gone));
        assert_eq!(MemberInfo::parse("pid=x"), None);
        assert_eq!(MemberInfo::parse("garbage"), None);
        assert_eq!(MemberInfo::parse(""), None);
    }
}
