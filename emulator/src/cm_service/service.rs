//! The CM service of one device: a [`CmManager`] driven by the device. MADs come in
//! through QP1 (`inlet`), go out with `EmuContext::send_gsi_packet`, the core's deadlines
//! run as device timers, QP moves are applied with `modify_qp` on the device, and events
//! go to the sink routed for their id (a listener's sink for a new request).
//!
//! Every entry point locks the state, feeds the core, then [`CmService`] drains the
//! core's outputs in order and re-arms the one device timer at the core's next deadline.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use softverbs_api::VerbsContext;

use super::counters::{ServiceCounterCells, ServiceCounters};
use super::gsi_send::{gsi_packet, gsi_path};
use super::ports::PortTable;
use super::qp_moves;
use crate::cm::{CmEvent, CmEventKind, CmId, CmManager, CmOutput, QpRequest};
use crate::engine::clock::Clock;
use crate::engine::{EmuContext, TimerId};
use crate::wire::cm::{CmMad, CmMessage, RepRepr, RtuRepr};

/// MADs waiting for the service at most; more are dropped (counted) and the peer's CM
/// resends them.
pub const INBOX_LIMIT: usize = 1024;

/// A MAD taken from QP1: who sent it and its bytes.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The sender's IP address.
    pub from: IpAddr,
    /// The UD payload (a MAD when well formed).
    pub payload: Vec<u8>,
}

/// Where the events of one id (or of one listened service) go. Called with the service's
/// lock held: queue the event, do not call back into the service.
pub trait CmEventSink: Send + Sync {
    /// One event for `event.id`.
    fn deliver(&self, event: CmEvent);
}

/// The mutable part of a service, under its lock.
pub(super) struct State {
    pub(super) mgr: CmManager,
    /// The device timer armed for the core's next deadline, and that deadline.
    timer: Option<(u64, TimerId)>,
    /// Sinks by communication ID (SIDR request ID for UD).
    pub(super) routes: HashMap<u32, Arc<dyn CmEventSink>>,
    /// Sinks by listened service ID.
    pub(super) listeners: HashMap<u64, Arc<dyn CmEventSink>>,
    /// Which connection a local QP belongs to, to name it when a QP move fails.
    pub(super) qp_owner: HashMap<u32, CmId>,
    pub(super) ports: PortTable,
    /// Next PSN sent from QP1.
    gsi_psn: u32,
}

/// The connection manager of one emulated device.
pub struct CmService {
    pub(super) ctx: EmuContext,
    clock: Clock,
    pub(super) state: Mutex<State>,
    inbox: Mutex<VecDeque<Inbound>>,
    drain_armed: AtomicBool,
    cells: ServiceCounterCells,
    me: Weak<CmService>,
}

impl CmService {
    /// A service over `ctx` with core `mgr` (not yet installed on QP1).
    pub(super) fn new(ctx: EmuContext, mgr: CmManager) -> Arc<CmService> {
        Arc::new_cyclic(|me| CmService {
            ctx,
            clock: Clock::start(),
            state: Mutex::new(State {
                mgr,
                timer: None,
                routes: HashMap::new(),
                listeners: HashMap::new(),
                qp_owner: HashMap::new(),
                ports: PortTable::default(),
                gsi_psn: 0,
            }),
            inbox: Mutex::new(VecDeque::new()),
            drain_armed: AtomicBool::new(false),
            cells: ServiceCounterCells::default(),
            me: me.clone(),
        })
    }

    /// The device context the service runs on.
    pub fn context(&self) -> &EmuContext {
        &self.ctx
    }

    /// The device's address (its GID).
    pub fn local_ip(&self) -> IpAddr {
        self.state.lock().mgr.config().local_addr
    }

    pub(super) fn cells(&self) -> &ServiceCounterCells {
        &self.cells
    }

    /// The counters now.
    pub fn counters(&self) -> ServiceCounters {
        let st = self.state.lock();
        let mut c = self.cells.snapshot(st.mgr.counters().clone());
        c.live_connections = st.mgr.live_connections();
        c.live_sidr = st.mgr.live_sidr();
        c.ports_bound = st.ports.count();
        c.routes = st.routes.len() + st.listeners.len();
        c
    }

    /// Runs `f` on the core with the time now, then drains its outputs.
    pub(super) fn with_core<R>(&self, f: impl FnOnce(&mut State, u64) -> R) -> R {
        let mut st = self.state.lock();
        let now_ns = self.clock.now_ns();
        let result = f(&mut st, now_ns);
        self.flush(&mut st, now_ns);
        result
    }

    /// Queues a MAD from QP1 and makes sure a drain is scheduled (called with the
    /// device's receive lock held: no core work here).
    pub(super) fn enqueue(&self, inbound: Inbound) {
        {
            let mut inbox = self.inbox.lock();
            if inbox.len() >= INBOX_LIMIT {
                ServiceCounterCells::bump(&self.cells.inbox_full_dropped);
                return;
            }
            inbox.push_back(inbound);
        }
        if !self.drain_armed.swap(true, Ordering::AcqRel) {
            let me = self.me.clone();
            let job = Box::new(move |_now| {
                if let Some(service) = me.upgrade() {
                    service.drain_inbox();
                    release(service);
                }
            });
            if self.ctx.schedule_device_timer(Duration::ZERO, job).is_err() {
                // Timers full: the next MAD tries again; the peer resends meanwhile.
                self.drain_armed.store(false, Ordering::Release);
            }
        }
    }

    /// Feeds every queued MAD to the core.
    fn drain_inbox(&self) {
        self.drain_armed.store(false, Ordering::Release);
        let batch: Vec<Inbound> = self.inbox.lock().drain(..).collect();
        if batch.is_empty() {
            return;
        }
        self.with_core(|st, now_ns| {
            for m in batch {
                if st.mgr.handle_mad(now_ns, m.from, &m.payload).is_err() {
                    ServiceCounterCells::bump(&self.cells.malformed);
                }
            }
        });
    }

    fn on_timer(&self) {
        self.with_core(|st, now_ns| {
            st.timer = None;
            st.mgr.handle_timeout(now_ns);
        });
    }

    /// Does what the core asked, in order, then re-arms the timer. After a QP move that
    /// failed, the rest of that connection's batch (its other move, the REP or RTU that
    /// would announce the QP, its ESTABLISHED) is dropped: the attempt ends in
    /// CONNECT_ERROR here and the REJ the core queued there.
    fn flush(&self, st: &mut State, now_ns: u64) {
        let mut aborted: Option<(CmId, u32)> = None;
        while let Some(output) = st.mgr.poll_output() {
            if aborted.is_some_and(|(id, qpn)| belongs_to(&output, id, qpn)) {
                continue;
            }
            match output {
                CmOutput::SendMad { to, mad } => {
                    let psn = st.gsi_psn;
                    st.gsi_psn = (psn + 1) & 0x00ff_ffff;
                    let packet = gsi_packet(&mad[..], psn);
                    let cell = match self.ctx.send_gsi_packet(&gsi_path(to), &packet) {
                        Ok(()) => &self.cells.mads_sent,
                        Err(_) => &self.cells.send_failed,
                    };
                    ServiceCounterCells::bump(cell);
                }
                CmOutput::ModifyQp(request) => {
                    if let Some(failed) = self.move_qp(st, now_ns, &request) {
                        aborted = Some(failed);
                    }
                }
                CmOutput::Event(event) => self.route(st, event),
            }
        }
        self.rearm(st, now_ns);
    }

    /// Applies a QP move; a failed RTR/RTS ends the attempt with CONNECT_ERROR and a REJ,
    /// as rdma_cm does when it cannot modify the QP. Returns the
    /// connection and QP of a failed move.
    fn move_qp(&self, st: &mut State, now_ns: u64, request: &QpRequest) -> Option<(CmId, u32)> {
        if qp_moves::apply(&self.ctx as &dyn VerbsContext, request).is_ok() {
            return None;
        }
        ServiceCounterCells::bump(&self.cells.qp_modify_failed);
        let qpn = match *request {
            QpRequest::Rtr { qpn, .. } | QpRequest::Rts { qpn, .. } => qpn,
            // Moving to ERR fails only for a QP already destroyed: nothing to report.
            QpRequest::Err { .. } => return None,
        };
        let id = st.qp_owner.remove(&qpn)?;
        self.route(
            st,
            CmEvent {
                id,
                kind: CmEventKind::ConnectError,
            },
        );
        // Quiet from here on: the REJ goes out (for the REQ or, on the active side, for
        // the REP, as the kernel's cma_rep_recv sends it), no more events.
        let _ = st.mgr.qp_move_failed(now_ns, id);
        Some((id, qpn))
    }

    /// Hands `event` to its sink; a request goes to its listener's sink, which also gets
    /// the new id's later events until the id is routed elsewhere.
    fn route(&self, st: &mut State, event: CmEvent) {
        let sink = match &event.kind {
            CmEventKind::ConnectRequest { service_id, .. }
            | CmEventKind::SidrRequest { service_id, .. } => {
                let sink = st.listeners.get(service_id).cloned();
                if let Some(sink) = &sink {
                    st.routes.insert(event.id.0, sink.clone());
                }
                sink
            }
            _ => st.routes.get(&event.id.0).cloned(),
        };
        let Some(sink) = sink else {
            ServiceCounterCells::bump(&self.cells.events_unrouted);
            return;
        };
        if ends_the_id(&event.kind) {
            st.routes.remove(&event.id.0);
            st.qp_owner.retain(|_, owner| *owner != event.id);
        }
        ServiceCounterCells::bump(&self.cells.events_delivered);
        sink.deliver(event);
    }

    /// Keeps one device timer armed at the core's next deadline.
    fn rearm(&self, st: &mut State, now_ns: u64) {
        let next = st.mgr.next_deadline_ns();
        if st.timer.map(|(at, _)| at) == next {
            return;
        }
        if let Some((_, id)) = st.timer.take() {
            self.ctx.cancel_device_timer(id);
        }
        let Some(at_ns) = next else {
            return;
        };
        let me = self.me.clone();
        let job = Box::new(move |_now| {
            if let Some(service) = me.upgrade() {
                service.on_timer();
                release(service);
            }
        });
        let delay = Duration::from_nanos(at_ns.saturating_sub(now_ns));
        // Timers full: the next input re-arms; the deadline is only late, never lost.
        if let Ok(id) = self.ctx.schedule_device_timer(delay, job) {
            st.timer = Some((at_ns, id));
        }
    }
}

/// True for an output of connection `id` (QP `qpn`) queued with a move that failed: the
/// other move, the REP or RTU that follows it, its events.
fn belongs_to(output: &CmOutput, id: CmId, qpn: u32) -> bool {
    match output {
        CmOutput::ModifyQp(QpRequest::Rtr { qpn: q, .. } | QpRequest::Rts { qpn: q, .. }) => {
            *q == qpn
        }
        CmOutput::ModifyQp(QpRequest::Err { .. }) => false,
        CmOutput::Event(e) => e.id == id,
        CmOutput::SendMad { mad, .. } => matches!(
            CmMad::parse(&mad[..]).map(|m| m.message),
            Ok(CmMessage::Rep(RepRepr { local_comm_id, .. })
                | CmMessage::Rtu(RtuRepr { local_comm_id, .. })) if local_comm_id == id.0
        ),
    }
}

/// True for the events after which the core has forgotten the id.
fn ends_the_id(kind: &CmEventKind) -> bool {
    matches!(
        kind,
        CmEventKind::Rejected(_)
            | CmEventKind::Unreachable
            | CmEventKind::ConnectError
            | CmEventKind::TimewaitExit
            | CmEventKind::SidrResolved { .. }
            | CmEventKind::SidrFailed { .. }
    )
}

/// Lets go of a service a device thread upgraded. If that was the last reference, the
/// service (and with it maybe the device's last context, whose drop joins the engine
/// thread) must not be dropped on the engine thread: another thread drops it.
pub(super) fn release(service: Arc<CmService>) {
    if Arc::strong_count(&service) == 1 {
        let _ = std::thread::Builder::new()
            .name("softverbs-cm-release".into())
            .spawn(move || drop(service));
    }
}
