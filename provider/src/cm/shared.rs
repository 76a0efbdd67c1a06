//! The bottom of the CM API layer: the id's shared state and handle type, the event
//! channel's queue and what it holds, and the sink that routes core events to a channel.
//! The calls on these live above (`id`, `conn`, `post`, `endpoint`, `channel`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};
use softverbs_emu::cm::{CmEvent as CoreEvent, CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::cm_service::{CmEventSink, CmService};
use softverbs_emu::engine::event_queue::FdEventQueue;
use softverbs_emu::wire::cm::PortSpace;

use crate::cm::addr::Device;
use crate::cm::event_type::EventType;
use crate::cq::Cq;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;

/// Events a channel holds at most; later ones are lost (counted in
/// [`EventChannel::lost`]), as a full kernel event queue would refuse them.
pub const EVENT_CHANNEL_LIMIT: usize = 4096;

/// An event as queued: on which id (for a listener's events, the listener), and what.
#[derive(Clone)]
pub(crate) struct RawEvent {
    pub(crate) target: Weak<IdShared>,
    pub(crate) what: RawKind,
}

#[derive(Clone)]
pub(crate) enum RawKind {
    /// An event made by the API layer itself (address and route resolution).
    Local { event: EventType, status: i32 },
    /// An event of the device's CM core, for core id `id`; `via` names the device it came
    /// through when the id listens on the wildcard address (every device).
    Core {
        id: CoreId,
        kind: CoreKind,
        via: Option<IpAddr>,
    },
}

pub(crate) type ChannelQueue = FdEventQueue<RawEvent>;

/// An event channel (`rdma_create_event_channel`). Cloning shares it.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) queue: Arc<ChannelQueue>,
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> VerbsResult<EventChannel> {
        Ok(EventChannel {
            queue: Arc::new(FdEventQueue::new(
                "CM event channel",
                EVENT_CHANNEL_LIMIT,
                (),
            )?),
        })
    }

    /// The descriptor: readable while an event waits. Read events with
    /// [`EventChannel::get_event`], never from the descriptor.
    pub fn fd(&self) -> RawFd {
        self.queue.fd()
    }

    /// Events lost because the channel was full.
    pub fn lost(&self) -> u64 {
        self.queue.lost()
    }

    pub(crate) fn same(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.queue, &other.queue)
    }
}

/// `rdma_conn_param` as an event reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnEventParam {
    /// The peer's QP number.
    pub qp_num: u32,
    /// Responder resources the peer offers (CONNECT_REQUEST).
    pub responder_resources: u8,
    /// Initiator depth the peer wants (CONNECT_REQUEST).
    pub initiator_depth: u8,
}

/// Where an id stands in its life (the subset of librdmacm's states the calls check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// A request's new id, not yet accepted or rejected.
    Requested,
    Connecting,
    Connected,
    /// Disconnected (time-wait may still run).
    Disconnected,
    /// Rejected, unreachable or failed: no connection.
    Failed,
    /// Destroyed: no more calls, no more events.
    Destroyed,
}

/// The state of an id, under its lock.
pub(crate) struct IdState {
    pub(crate) phase: Phase,
    pub(crate) dev: Option<Device>,
    /// The devices of a wildcard bind (0.0.0.0 or ::), each holding the id's port; empty
    /// otherwise.
    pub(crate) wildcard: Vec<Device>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) remote: Option<SocketAddr>,
    /// The port this id holds in its device's port space (released on destroy).
    pub(crate) port_held: bool,
    /// The core's handle of its connection or SIDR request.
    pub(crate) core: Option<CoreId>,
    pub(crate) pd: Option<Pd>,
    pub(crate) qp: Option<Qp>,
    pub(crate) send_cq: Option<Cq>,
    pub(crate) recv_cq: Option<Cq>,
    /// What the peer offered in its request (accept takes at most this).
    pub(crate) offered: ConnEventParam,
    /// A small registered buffer inline sends are copied into (the emulator reads process
    /// memory only through the MR table).
    pub(crate) bounce: Option<Mr>,
    /// For a resolved UD id: where sends go.
    pub(crate) ud_dest: Option<(crate::ah::Ah, u32, u32)>,
}

/// The shared part of an id.
pub struct IdShared {
    pub(crate) ps: PortSpace,
    /// The channel its events go to; shared with its sinks, which never lock `state`.
    pub(crate) channel: Arc<Mutex<EventChannel>>,
    pub(crate) state: Mutex<IdState>,
    /// A listener's request ids, by core id, until each gets its own route.
    pub(crate) children: Mutex<HashMap<u32, Weak<IdShared>>>,
    pub(crate) me: Weak<IdShared>,
}

/// An `rdma_cm_id`. Cloning shares it; it is destroyed by [`CmId::destroy`] or when the
/// last clone (events included) is gone.
#[derive(Clone)]
pub struct CmId {
    pub(crate) shared: Arc<IdShared>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("CmId")
            .field("ps", &self.shared.ps)
            .field("phase", &st.phase)
            .field("local", &st.local)
            .field("remote", &st.remote)
            .finish()
    }
}

/// The sink the core delivers an id's events to: queues them on the id's channel.
struct IdSink {
    id: Weak<IdShared>,
    channel: Arc<Mutex<EventChannel>>,
    via: Option<IpAddr>,
}

impl CmEventSink for IdSink {
    fn deliver(&self, event: CoreEvent) {
        let raw = RawEvent {
            target: self.id.clone(),
            what: RawKind::Core {
                id: event.id,
                kind: event.kind,
                via: self.via,
            },
        };
        let channel = self.channel.lock().clone();
        channel.queue.push_if(raw, |_, _| true);
    }
}

impl IdShared {
    pub(crate) fn new(channel: &EventChannel, ps: PortSpace, phase: Phase) -> Arc<IdShared> {
        Arc::new_cyclic(|me| IdShared {
            ps,
            channel: Arc::new(Mutex::new(channel.clone())),
            state: Mutex::new(IdState {
                phase,
                dev: None,
                wildcard: Vec::new(),
                local: None,
                remote: None,
                port_held: false,
                core: None,
                pd: None,
                qp: None,
                send_cq: None,
                recv_cq: None,
                offered: ConnEventParam::default(),
                bounce: None,
                ud_dest: None,
            }),
            children: Mutex::new(HashMap::new()),
            me: me.clone(),
        })
    }

    /// A sink for this id's events.
    pub(crate) fn sink(&self) -> Arc<dyn CmEventSink> {
        self.sink_via(None)
    }

    /// A sink for this id's events that come through the device at `via` (a wildcard
    /// listener has one per device).
    pub(crate) fn sink_via(&self, via: Option<IpAddr>) -> Arc<dyn CmEventSink> {
        Arc::new(IdSink {
            id: self.me.clone(),
            channel: self.channel.clone(),
            via,
        })
    }

    /// Queues an event of the API layer (address or route resolution) for this id.
    pub(crate) fn post_local(&self, event: EventType, status: i32) {
        let raw = RawEvent {
            target: self.me.clone(),
            what: RawKind::Local { event, status },
        };
        let channel = self.channel.lock().clone();
        channel.queue.push_if(raw, |_, _| true);
    }
}

/// The device's CM, for calls.
pub(crate) fn service_of(st: &IdState) -> VerbsResult<Arc<CmService>> {
    st.dev
        .as_ref()
        .map(|d| d.service.clone())
        .ok_or_else(|| VerbsError::inval("the id is not bound to a device (bind or resolve first)"))
}

/// A core error as the errno librdmacm reports.
pub(crate) fn core_err(e: softverbs_emu::cm::CmError) -> VerbsError {
    match e.errno() {
        libc::EINVAL => VerbsError::inval(e.to_string()),
        libc::ENOMEM => VerbsError::nomem(e.to_string()),
        errno => VerbsError::Io {
            errno,
            message: e.to_string(),
        },
    }
}
