//! One emulated device's tables and state, shared by its contexts and its engine thread:
//! the PD / CQ / QP / SRQ / AH tables, the memory table, the link, the counters, the
//! device-level timers and the GSI handler slot. The data path over them is in
//! `datapath`, the receive pipeline in `receive`, the engine thread in `engine_thread`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use softverbs_api::{
    AhAttr, AsyncElement, AsyncEvent, Mtu, QpAttr, QpAttrMask, VerbsError, VerbsResult,
    WorkCompletion,
};

use crate::transport::Counters;

use super::async_events::AsyncEventQueue;
use super::clock::Clock;
use super::comm_est::CommEstHandler;
use super::config::{DeviceConfig, LinkConfig};
use super::cq::CompletionQueue;
use super::device_counters::DeviceCounters;
use super::device_timers::{DeviceTimers, TimerId, TimerJob, TimersFull};
use super::gsi::GsiHandler;
use super::id_hash::IdHash;
use super::receive_batch::LastReceive;
use crate::memory::MrTable;
use crate::net::Link;
use crate::transport::{AhTable, SharedRecvQueue};

pub use super::limits::*;
pub(crate) use super::qp_entry::QpEntry;

/// The state of one device, shared by its contexts and its engine thread.
pub struct Device {
    pub(crate) config: DeviceConfig,
    pub(crate) mem: MrTable,
    pub(crate) link: Box<dyn Link>,
    pub(crate) clock: Clock,
    pub(crate) shutdown: AtomicBool,
    /// Earliest transport deadline a poster armed, for the engine thread's sleep.
    pub(crate) deadline_hint_ns: AtomicU64,
    pub(crate) counters: DeviceCounters,
    /// Held by whoever takes datagrams off a pollable link and hands them to QPs (the
    /// engine thread, or an application polling an empty CQ): one receiver at a time keeps
    /// the arrival order. It guards what the last receive found (see engine_thread).
    pub(crate) rx_lock: Mutex<LastReceive>,
    /// Bumped whenever an application polls an empty CQ (and so receives for the engine):
    /// while it keeps changing, the engine thread stays off the link (see engine_thread). A counter,
    /// not a time: polling must not cost a clock read.
    pub(crate) app_polls: AtomicU64,
    /// ACKs of batches an application thread received, waiting for the device's next send.
    pub(crate) deferred_acks: super::ack_hold::DeferredAcks,
    /// The engine thread is napping while an application polls, and flushes the deferred
    /// ACKs when the nap ends; otherwise an application sends its ACKs at once.
    pub(crate) engine_napping: AtomicBool,
    /// QPs owing an ACK no request asked for, sent when the traffic pauses.
    pub(crate) lazy_acks: super::ack_hold::LazyAcks,
    /// The engine thread, so that an application about to sleep can end its nap.
    pub(crate) engine_thread: std::sync::OnceLock<std::thread::Thread>,
    /// Set by an application about to sleep (it armed a CQ): the engine thread stops
    /// napping and takes the link, however recently the application polled.
    pub(crate) app_sleeping: AtomicBool,
    /// Work scheduled on the device rather than on a QP (see `device_timers`).
    pub(crate) timers: DeviceTimers,
    /// Where QP1 (GSI) packets go; none: counted and dropped (see `receive`).
    pub(crate) gsi_handler: RwLock<Option<Arc<dyn GsiHandler>>>,
    /// Told when a connected QP accepted its first request (see `comm_est`).
    pub(crate) comm_est_handler: RwLock<Option<Arc<dyn CommEstHandler>>>,
    pub(crate) pds: Mutex<HashMap<u32, ()>>,
    pub(crate) cqs: RwLock<HashMap<u32, Arc<CompletionQueue>, IdHash>>,
    pub(crate) qps: super::qp_entry::QpTable,
    /// The transport counters of the QPs destroyed so far, so that the device's totals
    /// ([`EmuContext::transport_totals`](super::EmuContext::transport_totals)) keep them.
    pub(crate) retired_qp_counters: Mutex<Counters>,
    pub(crate) srqs: RwLock<HashMap<u32, Arc<Mutex<SharedRecvQueue>>>>,
    pub(crate) ahs: RwLock<AhTable>,
    /// The UD multicast groups its QPs are attached to (see `multicast`).
    pub(crate) multicast: super::mcast_groups::McastGroups,
    /// Port 1 is up (see `EmuContext::set_port_active`).
    pub(crate) port_active: AtomicBool,
    /// The async event queue of each open context, by context id.
    pub(crate) contexts: Mutex<HashMap<u64, Weak<AsyncEventQueue>>>,
    pub(crate) next_context: AtomicU64,
    pub(crate) next_pd: AtomicU32,
    pub(crate) next_srq: AtomicU32,
    pub(crate) next_cq: AtomicU32,
    /// Where [`Device::allocate_qpn`] goes on from (an offset into `qpn_range`).
    pub(crate) next_qpn: AtomicU32,
    /// The QP numbers this device may hand out (see [`Device::allocate_qpn`]).
    pub(crate) qpn_range: std::ops::Range<u32>,
    /// The fork count this device was opened under (see `fork_guard`).
    pub(crate) fork_generation: u64,
}

impl Device {
    /// A device on `link`.
    pub(crate) fn new(config: DeviceConfig, link: Box<dyn Link>) -> Device {
        let limits = config.limits;
        let qpn_range = link
            .qpn_range()
            .filter(|r| r.start < r.end && r.end <= MAX_QPN + 1)
            .unwrap_or(FIRST_QPN..MAX_QPN + 1);
        Device {
            config,
            mem: MrTable::with_windows(limits.max_mr, limits.max_mw),
            link,
            clock: Clock::start(),
            shutdown: AtomicBool::new(false),
            deadline_hint_ns: AtomicU64::new(u64::MAX),
            counters: DeviceCounters::default(),
            rx_lock: Mutex::new(Default::default()),
            app_polls: AtomicU64::new(0),
            deferred_acks: Default::default(),
            engine_napping: AtomicBool::new(false),
            lazy_acks: Default::default(),
            engine_thread: std::sync::OnceLock::new(),
            app_sleeping: AtomicBool::new(false),
            timers: DeviceTimers::default(),
            gsi_handler: RwLock::new(None),
            comm_est_handler: RwLock::new(None),
            pds: Mutex::new(HashMap::new()),
            cqs: RwLock::new(HashMap::default()),
            qps: RwLock::new(HashMap::default()),
            retired_qp_counters: Mutex::new(Counters::default()),
            srqs: RwLock::new(HashMap::new()),
            multicast: Default::default(),
            ahs: RwLock::new(AhTable::default()),
            port_active: AtomicBool::new(true),
            contexts: Mutex::new(HashMap::new()),
            next_context: AtomicU64::new(1),
            next_pd: AtomicU32::new(1),
            next_srq: AtomicU32::new(1),
            next_cq: AtomicU32::new(1),
            next_qpn: AtomicU32::new(first_qpn_offset(&qpn_range)),
            qpn_range,
            fork_generation: super::fork_guard::generation(),
        }
    }

    /// Whether this process opened the device (not a parent it was forked from).
    pub(crate) fn opened_here(&self) -> bool {
        super::fork_guard::same_process(self.fork_generation)
    }

    /// EPERM, saying why, in a child forked after the device was opened (see `fork_guard`).
    pub(crate) fn check_opened_here(&self) -> VerbsResult<()> {
        if self.opened_here() {
            Ok(())
        } else {
            Err(super::fork_guard::inherited(&self.config.name))
        }
    }

    /// A QP number no QP of `qps` (the table, write-locked by the caller) has, from the
    /// link's range ([`Link::qpn_range`]; from [`FIRST_QPN`] up for a link the process has
    /// to itself), going round the range. ENOMEM if every number is taken.
    pub(crate) fn allocate_qpn(
        &self,
        qps: &HashMap<u32, Arc<QpEntry>, IdHash>,
    ) -> VerbsResult<u32> {
        let range = &self.qpn_range;
        let len = range.end - range.start;
        // The table holds at most max_qp QPs, so one more try than that finds a free one.
        let tries = len.min(self.config.limits.max_qp.saturating_add(1));
        for _ in 0..tries {
            let n = self.next_qpn.fetch_add(1, Ordering::Relaxed) % len;
            let qpn = range.start + n;
            if !qps.contains_key(&qpn) {
                return Ok(qpn);
            }
        }
        Err(VerbsError::nomem(format!(
            "every QP number of {:#x}..{:#x} is taken",
            range.start, range.end
        )))
    }

    /// Tells the other processes sharing the device's port how many QPs this one has (what
    /// `softverbs devices -v` shows); nothing for a link the process has alone.
    pub(crate) fn publish_qp_count(&self, qps: usize) {
        if !self.opened_here() {
            // The slot is a parent's (see fork_guard).
            return;
        }
        if let Some(shared) = self.link.shared_port() {
            if let Err(e) = shared.publish_qps(u32::try_from(qps).unwrap_or(u32::MAX)) {
                tracing::debug!(device = %self.config.name, error = %e, "publishing the QP count");
            }
        }
    }

    /// The transport counters of every QP this device has had, live and destroyed.
    pub(crate) fn transport_totals(&self) -> Counters {
        let mut totals = *self.retired_qp_counters.lock();
        for entry in self.qps.read().values() {
            totals.add(&entry.qp.lock().counters);
        }
        totals
    }

    pub(crate) fn active_mtu(&self) -> Mtu {
        Mtu::for_netdev_mtu(self.config.netdev_mtu)
    }

    /// Port 1 is up.
    pub(crate) fn port_active(&self) -> bool {
        self.port_active.load(Ordering::Acquire)
    }

    /// Queues `event` on the async queue of context `owner` (if it is still open).
    pub(crate) fn raise_async(&self, owner: u64, event: AsyncEvent) {
        let queue = self.contexts.lock().get(&owner).and_then(Weak::upgrade);
        match queue {
            Some(queue) => queue.push(event),
            None => tracing::debug!(?event, owner, "async event for a closed context"),
        }
    }

    /// Queues `event` on the async queue of every open context (port events).
    pub(crate) fn raise_async_all(&self, event: AsyncEvent) {
        let queues: Vec<_> = self
            .contexts
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for queue in queues {
            queue.push(event);
        }
    }

    /// Drops the waiting async events of context `owner` about `element` (destroyed).
    pub(crate) fn forget_async(&self, owner: u64, element: AsyncElement) {
        if let Some(queue) = self.contexts.lock().get(&owner).and_then(Weak::upgrade) {
            queue.forget(element);
        }
    }

    /// Ends the engine thread's nap (see engine_thread): the application is about to sleep.
    pub(crate) fn wake_engine(&self) {
        self.app_sleeping.store(true, Ordering::SeqCst);
        if self.engine_napping.load(Ordering::SeqCst) {
            if let Some(engine) = self.engine_thread.get() {
                engine.unpark();
            }
        }
    }

    pub(crate) fn qp_entry(&self, qpn: u32) -> VerbsResult<Arc<QpEntry>> {
        self.qps
            .read()
            .get(&qpn)
            .cloned()
            .ok_or_else(|| VerbsError::NotFound(format!("no QP {qpn:#x}")))
    }

    pub(crate) fn srq(&self, srq: u32) -> VerbsResult<Arc<Mutex<SharedRecvQueue>>> {
        self.srqs
            .read()
            .get(&srq)
            .cloned()
            .ok_or_else(|| VerbsError::NotFound(format!("no SRQ {srq}")))
    }

    /// Polls CQ `cq` under the table's read lock: a polling loop makes this call millions of
    /// times a second, and taking a reference to the CQ (an atomic increment and decrement)
    /// cost as much as the poll. `CompletionQueue::poll` takes no lock.
    pub(crate) fn poll_cq_now(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        self.cqs.read().get(&cq).ok_or_else(|| no_cq(cq))?.poll(out)
    }

    pub(crate) fn cq(&self, cq: u32) -> VerbsResult<Arc<CompletionQueue>> {
        self.cqs.read().get(&cq).cloned().ok_or_else(|| no_cq(cq))
    }

    /// `ibv_destroy_cq`: EBUSY while QPs use it or its channel has unacknowledged events
    /// of it (libibverbs would block there instead).
    pub(crate) fn destroy_cq(&self, cq: u32) -> VerbsResult<()> {
        let target = self.cq(cq)?;
        let in_use = self
            .qps
            .read()
            .values()
            .any(|e| Arc::ptr_eq(&e.send_cq, &target) || Arc::ptr_eq(&e.recv_cq, &target));
        if in_use {
            return Err(VerbsError::Busy(format!("CQ {cq} still has QPs")));
        }
        if let Some(channel) = target.channel() {
            channel.detach(cq)?;
        }
        self.cqs.write().remove(&cq);
        self.forget_async(target.owner(), AsyncElement::Cq(cq));
        Ok(())
    }

    pub(crate) fn check_pd(&self, pd: u32) -> VerbsResult<()> {
        if self.pds.lock().contains_key(&pd) {
            Ok(())
        } else {
            Err(VerbsError::inval(format!("no PD {pd}")))
        }
    }

    /// Checks an address vector (of a QP path or an AH) against this device.
    pub(crate) fn check_av(&self, av: &AhAttr) -> VerbsResult<()> {
        if av.dgid.is_zero() {
            return Err(VerbsError::inval("destination GID is zero"));
        }
        let dst = av.dgid.to_ip();
        if dst.is_ipv4() != self.config.ip.is_ipv4() {
            return Err(VerbsError::inval(format!(
                "destination GID {} is not reachable from {} (address family)",
                av.dgid, self.config.ip
            )));
        }
        if av.sgid_index > 1 {
            return Err(VerbsError::inval(format!(
                "sgid_index {} is beyond the GID table",
                av.sgid_index
            )));
        }
        Ok(())
    }

    /// The UDP port packets to `ah`'s destination go to: the one it names, else, from a UDP
    /// device, the port of the process's own UDP device at that address if it is not 4791
    /// (see `device_list::udp_port_of`), else none (4791).
    pub(crate) fn udp_dport_of(&self, ah: &AhAttr) -> Option<u16> {
        ah.udp_dport.or_else(|| match self.config.link {
            LinkConfig::Udp => super::device_list::udp_port_of(ah.dgid.to_ip()),
            _ => None,
        })
    }

    pub(crate) fn check_path(&self, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        if mask.contains(QpAttrMask::AV) {
            self.check_av(&attr.ah_attr)?;
        }
        if mask.contains(QpAttrMask::PATH_MTU) && attr.path_mtu > self.active_mtu() {
            return Err(VerbsError::inval(format!(
                "path MTU {} exceeds the port's active MTU {}",
                attr.path_mtu.bytes(),
                self.active_mtu().bytes()
            )));
        }
        Ok(())
    }
    /// Schedules `job` to run on the engine thread once the device's clock reaches
    /// `at_ns` (see [`Device::now_ns`]); the engine thread is told if it would otherwise
    /// sleep past it.
    pub(crate) fn schedule_timer(&self, at_ns: u64, job: TimerJob) -> Result<TimerId, TimersFull> {
        let id = self.timers.schedule(at_ns, job)?;
        self.deadline_hint_ns.fetch_min(at_ns, Ordering::AcqRel);
        if let Some(engine) = self.engine_thread.get() {
            engine.unpark();
        }
        Ok(id)
    }

    /// The device's clock, in ns: what device timers are scheduled on.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
}

/// Largest QP number (24 bits; 0xFFFFFF itself is the multicast QPN).
const MAX_QPN: u32 = 0x00ff_fffe;

/// Where a device's QP numbers start in its range: at the range's start for a device the
/// process has alone (the first QP is [`FIRST_QPN`], as in rxe); at a random place of a
/// shared port's range, so that a process taking over the slot of one that died does not
/// hand out the numbers its predecessor's peers may still be sending to.
fn first_qpn_offset(range: &std::ops::Range<u32>) -> u32 {
    if range.start == FIRST_QPN {
        return 0;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) % (range.end - range.start).max(1)
}

/// The error of a call naming a CQ the device does not have.
fn no_cq(cq: u32) -> VerbsError {
    VerbsError::inval(format!("no CQ {cq}"))
}
