//! The table behind a device's UD multicast groups (see `multicast`): for each IP group
//! its socket and the QPs attached to it, and whether the inlet thread runs. Plain data
//! under one lock; the verbs and the receive path over it are `multicast`'s.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::net::multicast::GroupSocket;

/// The groups of one device.
#[derive(Default)]
pub(crate) struct McastGroups {
    pub(super) inner: Mutex<GroupTable>,
}

#[derive(Default)]
pub(super) struct GroupTable {
    pub(super) groups: HashMap<IpAddr, Group>,
    /// An inlet thread runs (it clears this, under the lock, when it finds no group).
    pub(super) inlet_running: bool,
}

/// One group: where its datagrams arrive (`None`: through the link's own receive path) and
/// the QPs they go to.
pub(super) struct Group {
    pub(super) socket: Option<Arc<GroupSocket>>,
    pub(super) qpns: SmallVec<[u32; 4]>,
}

impl McastGroups {
    /// The QPs attached to group `group` (empty for a group nobody joined).
    pub(super) fn members(&self, group: IpAddr) -> SmallVec<[u32; 4]> {
        let table = self.inner.lock();
        table
            .groups
            .get(&group)
            .map(|g| g.qpns.clone())
            .unwrap_or_default()
    }

    /// Whether QP `qpn` is attached to some group.
    pub(super) fn is_attached(&self, qpn: u32) -> bool {
        let table = self.inner.lock();
        table.groups.values().any(|g| g.qpns.contains(&qpn))
    }

    /// The sockets to wait on, or `None` (and the inlet marked stopped) when no group has
    /// one left.
    pub(super) fn inlet_sockets(&self) -> Option<SmallVec<[Arc<GroupSocket>; 4]>> {
        let mut table = self.inner.lock();
        let sockets: SmallVec<[Arc<GroupSocket>; 4]> = table
            .groups
            .values()
            .filter_map(|g| g.socket.clone())
            .collect();
        if sockets.is_empty() {
            table.inlet_running = false;
            return None;
        }
        Some(sockets)
    }
}
