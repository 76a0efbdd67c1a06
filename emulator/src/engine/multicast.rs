//! UD multicast groups of a device (`ibv_attach_mcast` / `ibv_detach_mcast`, kernel rxe's
//! rxe_mcast.c and `rxe_rcv_mcast_pkt`): which UD QPs each group delivers to, the socket
//! each group arrives on on a UDP device (`net::multicast`), the inlet thread that receives
//! from those sockets, and the fan-out of a datagram to destination QPN 0xFFFFFF to every QP
//! attached to its group (by its destination IP address, the group). A link that sees whole
//! Ethernet frames (the rxe lab's) takes the groups' frames in itself: no socket, no inlet.
//!
//! Bounded like every table: [`MAX_MCAST_GROUPS`] groups per device (each is a socket and
//! one descriptor of the inlet's wait), [`MAX_MCAST_QP_ATTACH`] QPs per group, so a datagram
//! costs at most that many deliveries.

use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use smallvec::SmallVec;
use softverbs_api::{Gid, QpType, VerbsError, VerbsResult};

use super::device::{Device, QpEntry};
use super::device_counters::RxDrop;
use super::mcast_groups::Group;
use crate::net::batched_io::wait_any_readable;
use crate::net::multicast::GroupSocket;
use crate::net::{DatagramView, MAX_DATAGRAM_BYTES};
use crate::wire::RoceRepr;

/// Most multicast groups a device has QPs attached to.
pub const MAX_MCAST_GROUPS: u32 = 32;
/// Most QPs attached to one group.
pub const MAX_MCAST_QP_ATTACH: u32 = 32;
/// How long the inlet waits before it looks at the table again (groups joined since, a
/// device closed): a datagram that arrives meanwhile waits in its socket, nothing is lost.
const INLET_RECHECK: Duration = Duration::from_millis(20);
/// Datagrams the inlet takes from one socket before it looks at the others.
const INLET_BURST: usize = 64;

impl Device {
    /// `ibv_attach_mcast` of QP `qpn` to group `gid` (see the module docs). `device` is this
    /// device, for the inlet thread the first group starts.
    pub(crate) fn attach_mcast(
        &self,
        device: &Arc<Device>,
        qpn: u32,
        gid: &Gid,
    ) -> VerbsResult<()> {
        let group = self.check_group(qpn, gid)?;
        let mut table = self.multicast.inner.lock();
        if let Some(g) = table.groups.get_mut(&group) {
            if g.qpns.contains(&qpn) {
                return Ok(()); // As rxe: attaching twice is not an error.
            }
            if g.qpns.len() >= MAX_MCAST_QP_ATTACH as usize {
                return Err(VerbsError::nomem(format!(
                    "group {gid} has {MAX_MCAST_QP_ATTACH} QPs attached already"
                )));
            }
            g.qpns.push(qpn);
            return Ok(());
        }
        if table.groups.len() >= MAX_MCAST_GROUPS as usize {
            return Err(VerbsError::nomem(format!(
                "the device has QPs in {MAX_MCAST_GROUPS} multicast groups already"
            )));
        }
        let socket = self.link.join_group(group).map_err(|e| VerbsError::Io {
            errno: e.raw_os_error().unwrap_or(libc::EINVAL),
            message: format!("joining IP multicast group {group}: {e}"),
        })?;
        let mut qpns = SmallVec::new();
        qpns.push(qpn);
        let has_socket = socket.is_some();
        table.groups.insert(
            group,
            Group {
                socket: socket.map(Arc::new),
                qpns,
            },
        );
        // A link that receives the group itself needs no inlet.
        if has_socket && !table.inlet_running {
            let weak = Arc::downgrade(device);
            std::thread::Builder::new()
                .name(format!("softverbs-{}-mcast", self.config.name))
                .spawn(move || run_inlet(&weak))
                .map_err(|e| {
                    table.groups.remove(&group);
                    VerbsError::Io {
                        errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                        message: format!("spawning the multicast inlet thread: {e}"),
                    }
                })?;
            table.inlet_running = true;
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: EINVAL unless QP `qpn` is attached to `gid`. The device leaves
    /// the group with its last QP.
    pub(crate) fn detach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        let group = gid.to_ip();
        let mut table = self.multicast.inner.lock();
        let left_empty = table.groups.get_mut(&group).and_then(|g| {
            let at = g.qpns.iter().position(|&q| q == qpn)?;
            g.qpns.swap_remove(at);
            Some(g.qpns.is_empty())
        });
        let Some(left_empty) = left_empty else {
            return Err(VerbsError::inval(format!(
                "QP {qpn:#x} is not attached to multicast group {gid}"
            )));
        };
        if left_empty {
            table.groups.remove(&group);
        }
        Ok(())
    }

    /// The checks of an attach: a multicast GID of the device's address family, a UD QP of
    /// this device, a link that carries multicast. The group's IP address.
    fn check_group(&self, qpn: u32, gid: &Gid) -> VerbsResult<IpAddr> {
        if !gid.is_multicast() {
            return Err(VerbsError::inval(format!("{gid} is not a multicast GID")));
        }
        let group = gid.to_ip();
        if group.is_ipv4() != self.config.ip.is_ipv4() {
            return Err(VerbsError::inval(format!(
                "multicast group {gid} is not of the address family of {}",
                self.config.ip
            )));
        }
        let qp_type = self
            .qps
            .read()
            .get(&qpn)
            .map(|e| e.init.qp_type)
            .ok_or_else(|| VerbsError::inval(format!("no QP {qpn:#x}")))?;
        if qp_type != QpType::Ud {
            return Err(VerbsError::inval(format!(
                "QP {qpn:#x} is {qp_type:?}: only UD QPs join multicast groups"
            )));
        }
        if !self.serves_multicast() {
            return Err(VerbsError::NotSupported(format!(
                "device {} carries no IP multicast (IPv4 UDP devices do)",
                self.config.name
            )));
        }
        Ok(group)
    }

    /// EBUSY while QP `qpn` is attached to a group: as the kernel's `ibv_destroy_qp`, a
    /// QP stays until it is detached.
    pub(crate) fn check_detached(&self, qpn: u32) -> VerbsResult<()> {
        if self.multicast.is_attached(qpn) {
            return Err(VerbsError::Busy(format!(
                "QP {qpn:#x} is attached to a multicast group: detach it first"
            )));
        }
        Ok(())
    }

    /// Whether this device serves multicast groups (what `max_mcast_grp` tells).
    pub(crate) fn serves_multicast(&self) -> bool {
        self.link.carries_multicast()
    }

    /// Step 5 of the receive pipeline for destination QPN 0xFFFFFF: a copy to every UD QP
    /// attached to the datagram's group (rxe's `rxe_rcv_mcast_pkt`), each through the
    /// checks a unicast datagram passes. A datagram to a group without QPs here (or to a
    /// unicast address) is dropped as one for an unknown QP.
    pub(crate) fn receive_multicast(
        &self,
        repr: &RoceRepr<'_>,
        d: DatagramView<'_>,
    ) -> Result<(), RxDrop> {
        let members = self.multicast.members(d.dst.ip());
        if members.is_empty() {
            return Err(RxDrop::UnknownQp);
        }
        let entries: SmallVec<[Arc<QpEntry>; 4]> = {
            let qps = self.qps.read();
            members.iter().filter_map(|q| qps.get(q).cloned()).collect()
        };
        let rx = super::receive::net_header(d);
        for entry in entries {
            if let Err(reason) = self.deliver_to_qp(&entry, repr, d, rx) {
                self.counters.count(reason);
            }
        }
        Ok(())
    }
}

/// The inlet thread: receives the datagrams of the device's groups and hands them to the
/// receive pipeline, until the device has no group left or is gone. It holds the device
/// only while it delivers, so that closing the last context ends it.
fn run_inlet(device: &Weak<Device>) {
    let mut buf = vec![0u8; MAX_DATAGRAM_BYTES];
    loop {
        let sockets = {
            let Some(dev) = device.upgrade() else { return };
            if dev.shutdown.load(Ordering::Relaxed) {
                return;
            }
            match dev.multicast.inlet_sockets() {
                Some(sockets) => sockets,
                None => return,
            }
        };
        let fds: SmallVec<[i32; 4]> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        let ready = match wait_any_readable(&fds, INLET_RECHECK) {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!("multicast inlet: waiting on group sockets: {e}");
                std::thread::sleep(INLET_RECHECK);
                continue;
            }
        };
        if ready == 0 {
            continue;
        }
        let Some(dev) = device.upgrade() else { return };
        for (i, socket) in sockets.iter().enumerate() {
            if ready & (1 << i) != 0 {
                deliver_from(&dev, socket, &mut buf);
            }
        }
    }
}

/// Hands up to [`INLET_BURST`] datagrams waiting on `socket` to `dev`'s receive pipeline.
fn deliver_from(dev: &Device, socket: &GroupSocket, buf: &mut [u8]) {
    for _ in 0..INLET_BURST {
        let (len, src) = match socket.try_recv(buf) {
            Ok(Some(got)) => got,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("multicast inlet: receiving on {}: {e}", socket.group());
                return;
            }
        };
        let view = DatagramView {
            src,
            dst: socket.group(),
            payload: &buf[..len],
            ipv4_identification: None,
        };
        // One receiver at a time, as for the device's own link (see `receive`).
        let mut receiver = dev.rx_lock.lock();
        dev.receive(view, &mut receiver.qp);
    }
}
