//! The device's listen table, in its registry: which member listens on which CM service
//! ID, so that a connection request (REQ, SIDR_REQ) reaching any member goes on to the one
//! listening. An entry is a file `listen-<service ID>` naming the slot and the pid of its
//! listener; an entry whose slot is now held by another process (or by none) is stale and
//! ignored, so a member that dies needs no cleanup.

use std::io;
use std::path::PathBuf;

use super::registry::{MembershipLock, Registry};

impl Registry {
    fn listen_path(&self, service_id: u64) -> PathBuf {
        self.dir.join(format!("listen-{service_id:016x}"))
    }

    /// Enters the member in `slot` (process `pid`) as the listener on `service_id`, under the
    /// membership lock (`_held`). `AddrInUse` if another live member listens on it.
    pub fn listen(
        &self,
        _held: &MembershipLock,
        service_id: u64,
        slot: u8,
        pid: u32,
    ) -> io::Result<()> {
        if let Some((owner, _)) = self.listener(service_id)? {
            if owner != slot {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "service ID {service_id:#018x} is listened on by the process in slot {owner}"
                    ),
                ));
            }
        }
        let path = self.listen_path(service_id);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("slot={slot} pid={pid}\n"))?;
        std::fs::rename(&tmp, &path)
    }

    /// Removes the entry of `service_id` if it names `slot`.
    pub fn unlisten(&self, _held: &MembershipLock, service_id: u64, slot: u8) -> io::Result<()> {
        let path = self.listen_path(service_id);
        match read_entry(&path) {
            Some((s, _)) if s == slot => std::fs::remove_file(&path),
            _ => Ok(()),
        }
    }

    /// The live listener on `service_id`: its slot and pid. `None` if nobody listens, or the
    /// entry's process no longer holds its slot.
    pub fn listener(&self, service_id: u64) -> io::Result<Option<(u8, u32)>> {
        let Some((slot, pid)) = read_entry(&self.listen_path(service_id)) else {
            return Ok(None);
        };
        let info = std::fs::read_to_string(self.info_path(slot)).unwrap_or_default();
        let same_process = info.split_whitespace().any(|f| f == format!("pid={pid}"));
        Ok((same_process && self.is_held(slot)?).then_some((slot, pid)))
    }
}

/// The slot and pid of a listen entry; `None` if absent or malformed.
fn read_entry(path: &std::path::Path) -> Option<(u8, u32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut slot = None;
    let mut pid = None;
    for field in text.split_whitespace() {
        match field.split_once('=')? {
            ("slot", v) => slot = v.parse().ok(),
            ("pid", v) => pid = v.parse().ok(),
            _ => {}
        }
    }
    Some((slot?, pid?))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::registry::MemberInfo;
    use crate::net::shared_port::tests::scratch_registry;

    #[test]
    fn a_service_has_one_live_listener_and_a_gone_one_is_forgotten() {
        let reg = scratch_registry("listen");
        let a = reg.claim().unwrap();
        let b = reg.claim().unwrap();
        let me = std::process::id();
        for claim in [&a, &b] {
            claim
                .publish(MemberInfo {
                    pid: me,
                    index: None,
                    generation: 0,
                    qps: 0,
                    left: false,
                })
                .unwrap();
        }
        let held = reg.lock_membership(Duration::from_secs(1)).unwrap();
        let sid = 0x0000_0001_0106_1234;
        assert_eq!(reg.listener(sid).unwrap(), None);
        reg.listen(&held, sid, a.slot(), me).unwrap();
        assert_eq!(reg.listener(sid).unwrap(), Some((a.slot(), me)));
        // Listening again from the same slot is fine; from another, in use.
        reg.listen(&held, sid, a.slot(), me).unwrap();
        let err = reg.listen(&held, sid, b.slot(), me).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // Only the listener's own slot removes the entry.
        reg.unlisten(&held, sid, b.slot()).unwrap();
        assert_eq!(reg.listener(sid).unwrap(), Some((a.slot(), me)));
        // The listener's slot freed (its process died): the entry is stale, b may listen.
        drop(a);
        assert_eq!(reg.listener(sid).unwrap(), None);
        reg.listen(&held, sid, b.slot(), me).unwrap();
        assert_eq!(reg.listener(sid).unwrap(), Some((b.slot(), me)));
        reg.unlisten(&held, sid, b.slot()).unwrap();
        assert_eq!(reg.listener(sid).unwrap(), None);
    }
}
