//! An open emulated device: the verbs calls of [`VerbsContext`] on the device's tables.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use softverbs_api::backend::{MrKeys, PostError};
use softverbs_api::mw::{BindMwWr, MwBind, MwType};
use softverbs_api::qp_transition::{validate_modify, ModifyLimits};
use softverbs_api::{
    AccessFlags, AhAttr, AsyncElement, AsyncEvent, AsyncEventKind, DeviceAttr, Gid, GidEntry,
    GidType, Mtu, PortAttr, PortState, QpAttr, QpAttrMask, QpCap, QpInitAttr, RecvWr, SendWr,
    SrqAttr, SrqAttrMask, VerbsContext, VerbsError, VerbsResult, WorkCompletion,
};

use super::async_events::AsyncEventQueue;
use super::clock::Clock;
use super::comp_channel::CompChannel;
use super::config::DeviceConfig;
use super::cq::CompletionQueue;
use super::id_hash::IdHash;
use crate::memory::MrTable;
use crate::net::Link;
use crate::transport::qp::ROCE_UDP_PORT;
use crate::transport::{
    AddressVector, AhTable, CallTime, CompletionTarget, Env, NetHeader, Outputs, SharedRecvQueue,
    TransportQp,
};

thread_local! {
    /// One emptied [`Outputs`] per thread, reused by the next transport call.
    static SPARE_OUTPUTS: std::cell::Cell<Option<Outputs>> = const { std::cell::Cell::new(None) };
}

/// Device limits, close to rxe's (rxe_param.h).
pub const MAX_QP: u32 = 0x1_0000;
/// Most WRs per work queue.
pub const MAX_QP_WR: u32 = 0x4000;
/// Most SGEs per WR.
pub const MAX_SGE: u32 = 32;
/// Most CQs.
pub const MAX_CQ: u32 = 0x1_0000;
/// Most CQEs per CQ.
pub const MAX_CQE: u32 = 0x1_0000;
/// Most MRs.
pub const MAX_MR: u32 = 0x1_0000;
/// Most PDs.
pub const MAX_PD: u32 = 0x1_0000;
/// Most inline bytes per send WR.
pub const MAX_INLINE_DATA: u32 = 400;
/// Outstanding READ/atomic per QP (both directions).
pub const MAX_RD_ATOMIC: u32 = 128;
/// First QP number handed out (rxe starts above the special QPs 0 and 1).
pub const FIRST_QPN: u32 = 0x11;
/// Most SRQs (rxe_param.h).
pub const MAX_SRQ: u32 = 0x4_0000;
/// Most WRs per SRQ.
pub const MAX_SRQ_WR: u32 = 0x4000;
/// Most SGEs per SRQ receive WR.
pub const MAX_SRQ_SGE: u32 = 27;
/// Most address handles.
pub const MAX_AH: u32 = 0x3ffe;
/// Most completion channels per context (each holds a file descriptor).
pub const MAX_COMP_CHANNELS: usize = 1024;

/// A QP, the CQs it completes into and the SRQ it receives from.
pub(crate) struct QpEntry {
    pub(crate) qp: Mutex<TransportQp>,
    pub(crate) init: QpInitAttr,
    pub(crate) send_cq: Arc<CompletionQueue>,
    pub(crate) recv_cq: Arc<CompletionQueue>,
    pub(crate) srq: Option<Arc<Mutex<SharedRecvQueue>>>,
    /// The context that created it (whose async queue gets its events).
    pub(crate) owner: u64,
}

/// Device-wide counters of packets that never reached a QP.
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// Datagrams whose ICRC did not verify.
    pub icrc_errors: AtomicU64,
    /// Datagrams that did not parse as RoCEv2.
    pub malformed: AtomicU64,
    /// Packets for a QP number that does not exist.
    pub unknown_qp: AtomicU64,
    /// Packets for a connected QP from an address other than its peer's.
    pub wrong_source: AtomicU64,
    /// Packets delivered to a QP.
    pub delivered: AtomicU64,
    /// Link send errors.
    pub send_errors: AtomicU64,
    /// Packets not sent or not received because the port was down.
    pub port_down_drops: AtomicU64,
    /// Packets not sent because the memory their payload was to be read from was
    /// deregistered between building and sending them.
    pub payload_gone_drops: AtomicU64,
}

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
    /// the arrival order. It guards what the last receive found (see worker).
    pub(crate) rx_lock: Mutex<super::worker::LastReceive>,
    /// Bumped whenever an application polls an empty CQ (and so receives for the engine):
    /// while it keeps changing, the engine thread stays off the link (see worker). A counter,
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
    pds: Mutex<HashMap<u32, ()>>,
    cqs: RwLock<HashMap<u32, Arc<CompletionQueue>, IdHash>>,
    pub(crate) qps: RwLock<HashMap<u32, Arc<QpEntry>, IdHash>>,
    srqs: RwLock<HashMap<u32, Arc<Mutex<SharedRecvQueue>>>>,
    ahs: RwLock<AhTable>,
    /// Port 1 is up (see [`EmuContext::set_port_active`]).
    port_active: AtomicBool,
    /// The async event queue of each open context, by context id.
    contexts: Mutex<HashMap<u64, Weak<AsyncEventQueue>>>,
    next_context: AtomicU64,
    next_pd: AtomicU32,
    next_srq: AtomicU32,
    next_cq: AtomicU32,
    next_qpn: AtomicU32,
}

impl Device {
    /// A device on `link`.
    pub(crate) fn new(config: DeviceConfig, link: Box<dyn Link>) -> Device {
        Device {
            config,
            mem: MrTable::new(MAX_MR),
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
            pds: Mutex::new(HashMap::new()),
            cqs: RwLock::new(HashMap::default()),
            qps: RwLock::new(HashMap::default()),
            srqs: RwLock::new(HashMap::new()),
            ahs: RwLock::new(AhTable::default()),
            port_active: AtomicBool::new(true),
            contexts: Mutex::new(HashMap::new()),
            next_context: AtomicU64::new(1),
            next_pd: AtomicU32::new(1),
            next_srq: AtomicU32::new(1),
            next_cq: AtomicU32::new(1),
            next_qpn: AtomicU32::new(FIRST_QPN),
        }
    }

    /// Runs a transport call on the QP of `entry` under its lock, with the environment it
    /// needs (memory, address handles, its SRQ, the received packet's IP header), and
    /// delivers what the call produced.
    pub(crate) fn on_qp<R>(
        &self,
        entry: &QpEntry,
        rx: Option<NetHeader>,
        call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> R,
    ) -> R {
        let ahs = self.ahs.read();
        let mut qp = entry.qp.lock();
        let read_clock = || super::worker::batch_now(&self.clock);
        let env = Env {
            mem: &self.mem,
            now: CallTime::when_needed(&read_clock),
            srq: entry.srq.as_deref(),
            ahs: Some(&ahs),
            rx,
            // send_packets reads payloads from memory at send time (see there).
            payload_by_reference: true,
        };
        // The vectors of the last call's outputs (emptied by deliver), so a call allocates
        // nothing to return its packets and completions.
        let mut out = SPARE_OUTPUTS.with(|s| s.take()).unwrap_or_default();
        let result = call(&mut qp, &env, &mut out);
        self.deliver(entry, &qp, &mut out);
        if out.is_empty() {
            SPARE_OUTPUTS.with(|s| s.set(Some(out)));
        }
        result
    }

    fn active_mtu(&self) -> Mtu {
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
    fn raise_async_all(&self, event: AsyncEvent) {
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
    fn forget_async(&self, owner: u64, element: AsyncElement) {
        if let Some(queue) = self.contexts.lock().get(&owner).and_then(Weak::upgrade) {
            queue.forget(element);
        }
    }

    /// Ends the engine thread's nap (see worker): the application is about to sleep.
    pub(crate) fn wake_engine(&self) {
        self.app_sleeping.store(true, Ordering::SeqCst);
        if self.engine_napping.load(Ordering::SeqCst) {
            if let Some(engine) = self.engine_thread.get() {
                engine.unpark();
            }
        }
    }

    /// Sends the deferred ACKs, if any (see `ack_hold`).
    pub(crate) fn flush_deferred_acks(&self) {
        if self.deferred_acks.pending() {
            let mut none = Vec::new();
            if self.port_active() {
                self.send_packets(&mut none);
            } else {
                self.deferred_acks.take_into(&mut none);
                for p in none {
                    crate::transport::packet_pool::give(p.bytes);
                }
            }
        }
    }

    /// Sends the ACKs that QPs owe for requests that asked for none (see `LazyAcks`), all
    /// in one send call. For the engine thread, when the traffic pauses.
    pub(crate) fn flush_lazy_acks(&self) {
        if !self.lazy_acks.pending() {
            return;
        }
        super::ack_hold::begin();
        for qpn in self.lazy_acks.take() {
            let entry = self.qps.read().get(&qpn).cloned();
            if let Some(entry) = entry {
                self.on_qp(&entry, None, |qp, _env, out| qp.send_lazy_ack(out));
            }
        }
        let mut acks = super::ack_hold::end();
        if self.port_active() {
            self.send_packets(&mut acks);
        }
    }

    /// Sends the packets, queues the completions (raising completion events and CQ_ERR)
    /// and the async events a transport call produced.
    pub(crate) fn deliver(&self, entry: &QpEntry, qp: &TransportQp, out: &mut Outputs) {
        if self.port_active() {
            if !out.packets.is_empty() {
                // Inside a receive batch, plain ACKs wait for its end (see ack_hold).
                let mut superseded = Vec::new();
                let mut first = super::ack_hold::hold(&mut out.packets, &mut superseded);
                for bytes in superseded {
                    crate::transport::packet_pool::give(bytes);
                }
                // One send call for all of it (deferred ACKs join in send_packets).
                if first.is_empty() {
                    self.send_packets(&mut out.packets);
                } else {
                    first.append(&mut out.packets);
                    self.send_packets(&mut first);
                }
            }
        } else {
            // A port that is down sends nothing, like an unplugged cable: reliable QPs
            // retransmit once it is up again (or run out of retries).
            let n = out.packets.drain(..).count() as u64;
            self.counters
                .port_down_drops
                .fetch_add(n, Ordering::Relaxed);
        }
        // Events about the QP, or about its SRQ (which belongs to the same context). Queued
        // before the completions, so that a consumer who sees an error completion finds the
        // event that went with it already there.
        for event in out.events.drain(..) {
            self.raise_async(entry.owner, event);
        }
        for c in out.completions.drain(..) {
            let cq = match c.target {
                CompletionTarget::Send => &entry.send_cq,
                CompletionTarget::Recv => &entry.recv_cq,
            };
            // One packet per call: its SE bit belongs to the receive completion it made.
            let solicited = out.solicited && c.target == CompletionTarget::Recv;
            if cq.push(c.wc, solicited) {
                let event = AsyncEvent {
                    kind: AsyncEventKind::CqErr,
                    element: AsyncElement::Cq(cq.id()),
                };
                self.raise_async(cq.owner(), event);
            }
        }
        out.solicited = false;
        out.entered_error = false;
        if std::mem::take(&mut out.owes_lazy_ack) {
            self.lazy_acks.owe(qp.qpn);
        }
        if let Some(d) = qp.next_deadline_ns() {
            self.deadline_hint_ns.fetch_min(d, Ordering::AcqRel);
        }
    }

    /// Sends `packets` (emptying the vector) and recycles their buffers.
    pub(crate) fn send_packets(&self, packets: &mut Vec<crate::transport::OutPacket>) {
        // Deferred ACKs join in the same call (behind the requests, see take_into).
        self.deferred_acks.take_into(packets);
        if packets.is_empty() {
            return;
        }
        let sent = if packets.iter().any(|p| p.payload.is_some()) {
            self.send_from_memory(packets)
        } else {
            self.link.send_batch(packets)
        };
        if let Err(e) = sent {
            self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(device = %self.config.name, error = %e, "send failed");
        }
        for p in packets.drain(..) {
            crate::transport::packet_pool::give(p.bytes);
        }
    }

    /// Sends packets of which some left their payload in registered memory: the table is
    /// held for reading across the send, so no region goes away while the link (or the
    /// kernel) reads it. A packet whose region went since it was built (deregistered
    /// meanwhile) is dropped like a lost packet: the requester's retry finds the SGE
    /// invalid and completes the WQE in error.
    fn send_from_memory(&self, packets: &mut Vec<crate::transport::OutPacket>) -> io::Result<()> {
        let reader = self.mem.reader();
        let (payloads, gone) = crate::transport::payloads_in_memory(packets, &reader);
        if gone > 0 {
            self.counters
                .payload_gone_drops
                .fetch_add(gone as u64, Ordering::Relaxed);
        }
        self.link.send_batch_from(packets, &payloads)
    }

    fn qp_entry(&self, qpn: u32) -> VerbsResult<Arc<QpEntry>> {
        self.qps
            .read()
            .get(&qpn)
            .cloned()
            .ok_or_else(|| VerbsError::NotFound(format!("no QP {qpn:#x}")))
    }

    fn srq(&self, srq: u32) -> VerbsResult<Arc<Mutex<SharedRecvQueue>>> {
        self.srqs
            .read()
            .get(&srq)
            .cloned()
            .ok_or_else(|| VerbsError::NotFound(format!("no SRQ {srq}")))
    }

    /// Polls CQ `cq` under the table's read lock: a polling loop makes this call millions of
    /// times a second, and taking a reference to the CQ (an atomic increment and decrement)
    /// cost as much as the poll. `CompletionQueue::poll` takes no lock.
    fn poll_cq_now(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        self.cqs.read().get(&cq).ok_or_else(|| no_cq(cq))?.poll(out)
    }

    fn cq(&self, cq: u32) -> VerbsResult<Arc<CompletionQueue>> {
        self.cqs.read().get(&cq).cloned().ok_or_else(|| no_cq(cq))
    }

    fn check_pd(&self, pd: u32) -> VerbsResult<()> {
        if self.pds.lock().contains_key(&pd) {
            Ok(())
        } else {
            Err(VerbsError::inval(format!("no PD {pd}")))
        }
    }

    /// Checks an address vector (of a QP path or an AH) against this device.
    fn check_av(&self, av: &AhAttr) -> VerbsResult<()> {
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
    /// (see `registry::udp_port_of`), else none (4791).
    fn udp_dport_of(&self, ah: &AhAttr) -> Option<u16> {
        ah.udp_dport.or_else(|| match self.config.link {
            super::config::LinkConfig::Udp => super::registry::udp_port_of(ah.dgid.to_ip()),
            _ => None,
        })
    }

    fn check_path(&self, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
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
}

/// Owns the engine thread of a device; dropping the last context stops it.
pub(crate) struct DeviceRuntime {
    pub(crate) device: Arc<Device>,
    worker: Option<JoinHandle<()>>,
}

impl DeviceRuntime {
    pub(crate) fn start(device: Arc<Device>) -> VerbsResult<DeviceRuntime> {
        let worker_device = device.clone();
        let worker = std::thread::Builder::new()
            .name(format!("softverbs-{}", device.config.name))
            .spawn(move || super::worker::run(&worker_device))
            .map_err(|e| VerbsError::Io {
                errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                message: format!("spawning the engine thread: {e}"),
            })?;
        Ok(DeviceRuntime {
            device,
            worker: Some(worker),
        })
    }
}

impl Drop for DeviceRuntime {
    fn drop(&mut self) {
        self.device.shutdown.store(true, Ordering::Release);
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// What belongs to one open context rather than to the device: its async event queue and
/// its completion channels.
pub(crate) struct ContextLocal {
    id: u64,
    events: Arc<AsyncEventQueue>,
    channels: Mutex<HashMap<u32, Arc<CompChannel>>>,
    next_channel: AtomicU32,
    device: Weak<Device>,
}

impl Drop for ContextLocal {
    fn drop(&mut self) {
        if let Some(device) = self.device.upgrade() {
            device.contexts.lock().remove(&self.id);
        }
    }
}

/// An open emulated device (one `ibv_context`). Cheap to clone (clones are the same
/// context); the device and its engine thread live while any context does.
///
/// Each open has its own async event queue and descriptor: it receives the events of the
/// objects it created, and every port event. Completion channels belong to the context that
/// made them too.
///
/// Where it differs from libibverbs, on purpose (never a hang): `destroy_cq` of a CQ with
/// completion events taken and not acknowledged fails with EBUSY instead of blocking until
/// they are; async events need not be acknowledged before their object is destroyed (they
/// name objects by id, and queued events of a destroyed QP or CQ are dropped, as the kernel
/// drops them); arming a CQ that has no channel is accepted and has no effect.
#[derive(Clone)]
pub struct EmuContext {
    pub(crate) runtime: Arc<DeviceRuntime>,
    local: Arc<ContextLocal>,
}

impl EmuContext {
    /// A new context of the device `runtime` runs.
    pub(crate) fn new(runtime: Arc<DeviceRuntime>) -> VerbsResult<EmuContext> {
        let device = &runtime.device;
        let id = device.next_context.fetch_add(1, Ordering::Relaxed);
        let events = Arc::new(AsyncEventQueue::new()?);
        device.contexts.lock().insert(id, Arc::downgrade(&events));
        let local = Arc::new(ContextLocal {
            id,
            events,
            channels: Mutex::new(HashMap::new()),
            next_channel: AtomicU32::new(1),
            device: Arc::downgrade(device),
        });
        Ok(EmuContext { runtime, local })
    }

    fn dev(&self) -> &Device {
        &self.runtime.device
    }

    fn channel(&self, channel: u32) -> VerbsResult<Arc<CompChannel>> {
        self.local
            .channels
            .lock()
            .get(&channel)
            .cloned()
            .ok_or_else(|| VerbsError::inval(format!("no completion channel {channel}")))
    }

    /// Takes port 1 down (`false`) or brings it up (`true`), as unplugging or plugging a
    /// cable would: `query_port` reports the new state and every context of the device gets
    /// `IBV_EVENT_PORT_ERR` or `IBV_EVENT_PORT_ACTIVE` (only on a change). While the port is
    /// down, nothing is sent and arriving datagrams are dropped (both counted in
    /// [`DeviceCounters::port_down_drops`]); QPs keep their state, so RC requesters
    /// retransmit and either recover once the port is up or fail with RETRY_EXC_ERR.
    pub fn set_port_active(&self, active: bool) {
        let dev = self.dev();
        if dev.port_active.swap(active, Ordering::AcqRel) == active {
            return;
        }
        let kind = if active {
            AsyncEventKind::PortActive
        } else {
            AsyncEventKind::PortErr
        };
        dev.raise_async_all(AsyncEvent {
            kind,
            element: AsyncElement::Port(1),
        });
    }

    /// Async events this context lost because its queue was full.
    pub fn async_events_lost(&self) -> u64 {
        self.local.events.lost()
    }

    /// The IP address and UDP port the device receives on.
    pub fn local_addr(&self) -> SocketAddr {
        self.dev().link.local_addr()
    }

    /// Runs a post call on QP `qpn` under its lock and delivers what it produced.
    fn with_qp(
        &self,
        qpn: u32,
        call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> Result<(), PostError>,
    ) -> Result<(), PostError> {
        let dev = self.dev();
        let entry = dev
            .qp_entry(qpn)
            .map_err(|error| PostError { index: 0, error })?;
        dev.on_qp(&entry, None, call)
    }

    /// The back-off of an application that polls CQs: blocks up to `timeout` until a
    /// datagram reaches the device (the next poll then receives it in the calling thread),
    /// instead of sleeping blind or yielding. Returns whether something arrived. Links that
    /// cannot be waited on this way sleep `timeout`.
    pub fn wait_for_traffic(&self, timeout: Duration) -> bool {
        super::worker::wait_for_traffic(self.dev(), timeout)
    }

    /// Device-wide packet counters.
    pub fn counters(&self) -> &DeviceCounters {
        &self.dev().counters
    }

    /// The transport counters of QP `qpn`.
    pub fn qp_counters(&self, qpn: u32) -> VerbsResult<crate::transport::Counters> {
        Ok(self.dev().qp_entry(qpn)?.qp.lock().counters)
    }
}

impl VerbsContext for EmuContext {
    fn device_name(&self) -> String {
        self.dev().config.name.clone()
    }

    fn query_device(&self) -> VerbsResult<DeviceAttr> {
        let guid = self.dev().config.node_guid();
        Ok(DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid: guid,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: MAX_QP,
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cq: MAX_CQ,
            max_cqe: MAX_CQE,
            max_mr: MAX_MR,
            max_pd: MAX_PD,
            max_qp_rd_atom: MAX_RD_ATOMIC,
            max_qp_init_rd_atom: MAX_RD_ATOMIC,
            max_srq: MAX_SRQ,
            max_srq_wr: MAX_SRQ_WR,
            max_srq_sge: MAX_SRQ_SGE,
            max_ah: MAX_AH,
            max_inline_data: MAX_INLINE_DATA,
            phys_port_cnt: 1,
        })
    }

    fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr> {
        if port_num != 1 {
            return Err(VerbsError::inval(format!("no port {port_num} (ports: 1)")));
        }
        Ok(PortAttr {
            state: if self.dev().port_active() {
                PortState::Active
            } else {
                PortState::Down
            },
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.dev().active_mtu(),
            gid_tbl_len: 2,
            pkey_tbl_len: 1,
            max_msg_sz: 1 << 31,
            link_layer_ethernet: true,
        })
    }

    fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry> {
        self.query_port(port_num)?;
        let gid = match index {
            0 => Gid::link_local_from_mac(self.dev().config.mac()),
            1 => Gid::from_ip(self.dev().config.ip),
            _ => {
                return Err(VerbsError::inval(format!(
                    "GID index {index} beyond the table (2)"
                )))
            }
        };
        Ok(GidEntry {
            gid,
            gid_index: index,
            port_num,
            gid_type: GidType::RoceV2,
        })
    }

    fn alloc_pd(&self) -> VerbsResult<u32> {
        let mut pds = self.dev().pds.lock();
        if pds.len() >= MAX_PD as usize {
            return Err(VerbsError::nomem("PD table full"));
        }
        let pd = self.dev().next_pd.fetch_add(1, Ordering::Relaxed);
        pds.insert(pd, ());
        Ok(pd)
    }

    fn dealloc_pd(&self, pd: u32) -> VerbsResult<()> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        let qp_uses = dev.qps.read().values().any(|e| e.qp.lock().pd == pd);
        let srq_uses = dev.srqs.read().values().any(|s| s.lock().pd == pd);
        if qp_uses || srq_uses || dev.mem.pd_in_use(pd) || dev.ahs.read().pd_in_use(pd) {
            return Err(VerbsError::Busy(format!(
                "PD {pd} still has MRs, QPs, SRQs or AHs"
            )));
        }
        dev.pds.lock().remove(&pd);
        Ok(())
    }

    fn reg_mr(&self, pd: u32, addr: u64, length: u64, access: AccessFlags) -> VerbsResult<MrKeys> {
        self.dev().check_pd(pd)?;
        self.dev().mem.register(pd, addr, length, access)
    }

    fn dereg_mr(&self, lkey: u32) -> VerbsResult<()> {
        self.dev().mem.deregister(lkey)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> VerbsResult<(u32, u32)> {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(VerbsError::inval(format!("cqe {cqe} not in 1..={MAX_CQE}")));
        }
        // Held until the CQ is attached, so that the channel cannot be destroyed meanwhile.
        let channels = self.local.channels.lock();
        let channel = match channel {
            Some(id) => Some(channels.get(&id).cloned().ok_or_else(|| {
                VerbsError::inval(format!("no completion channel {id} on this context"))
            })?),
            None => None,
        };
        let mut cqs = self.dev().cqs.write();
        if cqs.len() >= MAX_CQ as usize {
            return Err(VerbsError::nomem("CQ table full"));
        }
        let id = self.dev().next_cq.fetch_add(1, Ordering::Relaxed);
        if let Some(channel) = &channel {
            channel.attach(id);
        }
        let cq = CompletionQueue::for_context(cqe as usize, id, self.local.id, channel);
        cqs.insert(id, Arc::new(cq));
        Ok((id, cqe))
    }

    fn destroy_cq(&self, cq: u32) -> VerbsResult<()> {
        let dev = self.dev();
        let target = dev.cq(cq)?;
        let in_use = dev
            .qps
            .read()
            .values()
            .any(|e| Arc::ptr_eq(&e.send_cq, &target) || Arc::ptr_eq(&e.recv_cq, &target));
        if in_use {
            return Err(VerbsError::Busy(format!("CQ {cq} still has QPs")));
        }
        if let Some(channel) = target.channel() {
            // EBUSY while events are unacknowledged; libibverbs would block here instead.
            channel.detach(cq)?;
        }
        dev.cqs.write().remove(&cq);
        dev.forget_async(target.owner(), AsyncElement::Cq(cq));
        Ok(())
    }

    fn poll_cq(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let dev = self.dev();
        // ACKs deferred by this thread's last receive: the application is back, so they
        // leave now unless a post already took them.
        dev.flush_deferred_acks();
        let n = dev.poll_cq_now(cq, out)?;
        // An empty CQ: receive what is waiting on the link in this thread rather than wait
        // for the engine thread to be scheduled (it wakes too, and finds the work done).
        if n == 0 && !out.is_empty() && super::worker::receive_if_free(dev) > 0 {
            return dev.poll_cq_now(cq, out);
        }
        Ok(n)
    }

    fn create_qp(&self, pd: u32, init: &QpInitAttr) -> VerbsResult<(u32, QpCap)> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        let srq = init.srq.map(|id| dev.srq(id)).transpose()?;
        let mut c = init.cap;
        if srq.is_some() {
            // The SRQ is the receive queue; the QP has none of its own (as in rxe).
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        if c.max_send_wr == 0 && c.max_recv_wr == 0 && srq.is_none() {
            return Err(VerbsError::inval("a QP needs a send or a receive queue"));
        }
        if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
            return Err(VerbsError::inval(format!(
                "queue depth above max_qp_wr {MAX_QP_WR}"
            )));
        }
        if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
            return Err(VerbsError::inval(format!(
                "SGE count above max_sge {MAX_SGE}"
            )));
        }
        if c.max_inline_data > MAX_INLINE_DATA {
            return Err(VerbsError::inval(format!(
                "max_inline_data above {MAX_INLINE_DATA}"
            )));
        }
        let send_cq = dev.cq(init.send_cq)?;
        let recv_cq = dev.cq(init.recv_cq)?;
        let mut qps = dev.qps.write();
        if qps.len() >= MAX_QP as usize {
            return Err(VerbsError::nomem("QP table full"));
        }
        let qpn = dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        let granted = QpCap {
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if srq.is_some() {
                0
            } else {
                c.max_recv_sge.max(1)
            },
            ..c
        };
        let qp = TransportQp::new(qpn, init.qp_type, pd, init.sq_sig_all, granted)
            .with_srq(init.srq)
            .with_port_mtu(dev.active_mtu())
            .with_ack_coalescing(dev.config.ack_coalescing);
        qps.insert(
            qpn,
            Arc::new(QpEntry {
                qp: Mutex::new(qp),
                init: *init,
                send_cq,
                recv_cq,
                srq,
                owner: self.local.id,
            }),
        );
        Ok((qpn, granted))
    }

    fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        let dev = self.dev();
        let entry = dev.qp_entry(qpn)?;
        let limits = ModifyLimits {
            max_qp_rd_atom: MAX_RD_ATOMIC,
            max_qp_init_rd_atom: MAX_RD_ATOMIC,
        };
        dev.check_path(attr, mask)?;
        let mut attr = *attr;
        if mask.contains(QpAttrMask::AV) {
            attr.ah_attr.udp_dport = dev.udp_dport_of(&attr.ah_attr);
        }
        dev.on_qp(&entry, None, |qp, _, out| {
            validate_modify(qp.qp_type, qp.state(), &attr, mask, &limits)?;
            qp.apply_modify(&attr, mask, out);
            Ok(())
        })
    }

    fn query_qp(&self, qpn: u32) -> VerbsResult<(QpAttr, QpInitAttr)> {
        let entry = self.dev().qp_entry(qpn)?;
        let qp = entry.qp.lock();
        let mut attr = qp.attr;
        attr.cur_qp_state = attr.qp_state;
        attr.cap = qp.cap;
        // The PSNs in effect now, as rxe_qp_to_attr reports them.
        attr.sq_psn = qp.req.next_psn.value();
        attr.rq_psn = qp.resp.epsn.value();
        Ok((attr, entry.init))
    }

    fn destroy_qp(&self, qpn: u32) -> VerbsResult<()> {
        let dev = self.dev();
        let entry = dev
            .qps
            .write()
            .remove(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("no QP {qpn:#x}")))?;
        dev.forget_async(entry.owner, AsyncElement::Qp(qpn));
        // Type 2 windows bound through it can never be used again: free their regions.
        dev.mem.release_qp_windows(qpn);
        Ok(())
    }

    fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), PostError> {
        self.with_qp(qpn, |qp, env, out| qp.post_send(wrs, env, out))
    }

    fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.with_qp(qpn, |qp, _, out| qp.post_recv(wrs, out))
    }

    fn post_srq_recv(&self, srq: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let queue = self
            .dev()
            .srq(srq)
            .map_err(|error| PostError { index: 0, error })?;
        let mut queue = queue.lock();
        queue.post(wrs)
    }

    fn create_srq(&self, pd: u32, attr: &SrqAttr) -> VerbsResult<(u32, SrqAttr)> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR {
            return Err(VerbsError::inval(format!(
                "SRQ max_wr {} not in 1..={MAX_SRQ_WR}",
                attr.max_wr
            )));
        }
        if attr.max_sge > MAX_SRQ_SGE {
            return Err(VerbsError::inval(format!(
                "SRQ max_sge {} above {MAX_SRQ_SGE}",
                attr.max_sge
            )));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(VerbsError::inval(format!(
                "SRQ limit {} above max_wr {}",
                attr.srq_limit, attr.max_wr
            )));
        }
        let mut srqs = dev.srqs.write();
        if srqs.len() >= MAX_SRQ as usize {
            return Err(VerbsError::nomem("SRQ table full"));
        }
        let granted = SrqAttr {
            max_sge: attr.max_sge.max(1),
            ..*attr
        };
        let id = dev.next_srq.fetch_add(1, Ordering::Relaxed);
        let queue = SharedRecvQueue::new(id, pd, &granted);
        srqs.insert(id, Arc::new(Mutex::new(queue)));
        Ok((id, granted))
    }

    fn modify_srq(&self, srq: u32, attr: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        self.dev().srq(srq)?.lock().modify(attr, mask, MAX_SRQ_WR)
    }

    fn query_srq(&self, srq: u32) -> VerbsResult<SrqAttr> {
        Ok(self.dev().srq(srq)?.lock().attr())
    }

    fn destroy_srq(&self, srq: u32) -> VerbsResult<()> {
        let dev = self.dev();
        let queue = dev.srq(srq)?;
        let in_use = dev
            .qps
            .read()
            .values()
            .any(|e| e.srq.as_ref().is_some_and(|s| Arc::ptr_eq(s, &queue)));
        if in_use {
            return Err(VerbsError::Busy(format!("SRQ {srq} still has QPs")));
        }
        dev.srqs.write().remove(&srq);
        Ok(())
    }

    fn create_ah(&self, pd: u32, attr: &AhAttr) -> VerbsResult<u32> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        dev.check_av(attr)?;
        if attr.port_num > 1 {
            return Err(VerbsError::inval(format!(
                "no port {} (ports: 1)",
                attr.port_num
            )));
        }
        let av = AddressVector {
            pd,
            dst_ip: attr.dgid.to_ip(),
            udp_dst_port: dev.udp_dport_of(attr).unwrap_or(ROCE_UDP_PORT),
        };
        dev.ahs
            .write()
            .insert(av, MAX_AH as usize)
            .ok_or_else(|| VerbsError::nomem("address handle table full"))
    }

    fn destroy_ah(&self, ah: u32) -> VerbsResult<()> {
        if self.dev().ahs.write().remove(ah) {
            Ok(())
        } else {
            Err(VerbsError::NotFound(format!("no address handle {ah}")))
        }
    }

    // Memory windows.

    fn alloc_mw(&self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        self.dev().check_pd(pd)?;
        self.dev().mem.alloc_window(pd, mw_type)
    }

    fn dealloc_mw(&self, mw: u32) -> VerbsResult<()> {
        self.dev().mem.dealloc_window(mw)
    }

    fn bind_mw(&self, qpn: u32, mw: u32, bind: &MwBind) -> VerbsResult<u32> {
        // As libibverbs with rxe: check what can be checked now, then post a BIND_MW work
        // request carrying the next rkey; the window gets it when the WR executes.
        let info = bind.bind_info;
        if info.mr_lkey == 0 && (info.addr != 0 || info.length != 0) {
            return Err(VerbsError::inval(
                "bind_mw: an address or length without a memory region",
            ));
        }
        let rkey = self.dev().mem.prepare_type1_bind(
            mw,
            info.mr_lkey,
            info.length,
            info.mw_access_flags,
        )?;
        let wr = SendWr {
            wr_id: bind.wr_id,
            opcode: softverbs_api::WrOpcode::BindMw,
            send_flags: bind.send_flags,
            bind_mw: Some(BindMwWr {
                mw,
                rkey,
                bind_info: info,
            }),
            ..SendWr::send(bind.wr_id, Vec::new())
        };
        if let Err(e) = self.post_send(qpn, std::slice::from_ref(&wr)) {
            self.dev().mem.cancel_type1_bind(mw, rkey);
            return Err(e.error);
        }
        Ok(rkey)
    }

    fn create_comp_channel(&self) -> VerbsResult<u32> {
        let mut channels = self.local.channels.lock();
        if channels.len() >= MAX_COMP_CHANNELS {
            return Err(VerbsError::nomem(format!(
                "at most {MAX_COMP_CHANNELS} completion channels per context"
            )));
        }
        let channel = Arc::new(CompChannel::new()?);
        let id = self.local.next_channel.fetch_add(1, Ordering::Relaxed);
        channels.insert(id, channel);
        Ok(id)
    }

    fn destroy_comp_channel(&self, channel: u32) -> VerbsResult<()> {
        let mut channels = self.local.channels.lock();
        let target = channels
            .get(&channel)
            .ok_or_else(|| VerbsError::inval(format!("no completion channel {channel}")))?;
        let cqs = target.attached();
        if cqs > 0 {
            return Err(VerbsError::Busy(format!(
                "completion channel {channel} still has {cqs} CQ(s)"
            )));
        }
        // A thread still waiting in get_cq_event keeps the channel (and its descriptor)
        // alive through its own reference and times out normally.
        channels.remove(&channel);
        Ok(())
    }

    fn comp_channel_fd(&self, channel: u32) -> VerbsResult<RawFd> {
        Ok(self.channel(channel)?.fd())
    }

    fn req_notify_cq(&self, cq: u32, solicited_only: bool) -> VerbsResult<()> {
        // The application is about to sleep: nothing it owes its peers may wait for it, and
        // the engine thread must not nap on, leaving the link to a thread that sleeps.
        let dev = self.dev();
        dev.flush_deferred_acks();
        dev.cq(cq)?.req_notify(solicited_only);
        dev.wake_engine();
        Ok(())
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> VerbsResult<Option<u32>> {
        Ok(self.channel(channel)?.get(timeout))
    }

    fn ack_cq_events(&self, cq: u32, count: u32) -> VerbsResult<()> {
        let target = self.dev().cq(cq)?;
        match target.channel() {
            Some(channel) => channel.ack(cq, count),
            None if count == 0 => Ok(()),
            None => Err(VerbsError::inval(format!(
                "CQ {cq} has no completion channel, so no events to acknowledge"
            ))),
        }
    }

    fn async_event_fd(&self) -> VerbsResult<RawFd> {
        Ok(self.local.events.fd())
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<AsyncEvent>> {
        Ok(self.local.events.get(timeout))
    }

    fn ack_async_event(&self, event: &AsyncEvent) -> VerbsResult<()> {
        self.local.events.ack(event)
    }
}

/// The error of a call naming a CQ the device does not have.
fn no_cq(cq: u32) -> VerbsError {
    VerbsError::inval(format!("no CQ {cq}"))
}
