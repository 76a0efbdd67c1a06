//! The bottom of the librdmacm layer: the id (what C sees, the library's state behind it,
//! the sink that routes the device CM's events for it to its channel, its memory) and the
//! event channel (its queue and what it holds). The calls on these live above: `id`
//! (create, destroy, migrate), `channel` (get and ack), `event` (what a queued event
//! becomes), `addr`, `conn`, `qp`, `ep`. An id is bound to one emulated device (or, bound to
//! the wildcard address, to every device of a family), holds a port of its port space, and
//! names its connection in the device's CM core.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use softverbs_emu::cm::{CmEvent as CoreEvent, CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::cm_service::CmEventSink;
use softverbs_emu::engine::event_queue::FdEventQueue;
use softverbs_emu::wire::cm::PortSpace;

use super::abi::*;
use super::devices::CmDevice;
use super::sockaddr;
use crate::abi::IbvQpInitAttrEx;
use crate::handle::{is_live, register, unregister, Kind};

/// Events a channel holds at most; later ones are lost, as a full kernel queue refuses
/// them (the CM protocol resends what matters).
pub const EVENT_CHANNEL_LIMIT: usize = 4096;

/// An event as queued: for which id, and what.
#[derive(Clone)]
pub struct RawEvent {
    pub target: Weak<IdInner>,
    pub what: RawKind,
}

/// What a queued event is.
#[derive(Clone)]
pub enum RawKind {
    /// Made by the library itself (address and route resolution).
    Local { event: u32, status: i32 },
    /// The id joined multicast group `group` (see `mcast`).
    Join { group: SocketAddr },
    /// From the device's CM core; `via` names the device for a wildcard listener.
    Core {
        id: CoreId,
        kind: CoreKind,
        via: Option<IpAddr>,
    },
}

/// The queue behind a channel.
pub type Queue = FdEventQueue<RawEvent>;

/// An event channel: the `rdma_event_channel` C sees (boxed apart so that its address
/// is stable), and the queue.
pub struct SvEventChannel {
    c: *mut RdmaEventChannel,
    pub queue: Queue,
}

// SAFETY: `c` is a heap object of the library's, written once at creation.
unsafe impl Send for SvEventChannel {}
// SAFETY: as above; the queue is thread-safe.
unsafe impl Sync for SvEventChannel {}

/// The channel objects handed to C, by address, so that `rdma_event_channel *` leads back
/// to the shared channel.
fn table() -> &'static parking_lot::Mutex<std::collections::HashMap<usize, Arc<SvEventChannel>>> {
    static TABLE: std::sync::OnceLock<
        parking_lot::Mutex<std::collections::HashMap<usize, Arc<SvEventChannel>>>,
    > = std::sync::OnceLock::new();
    TABLE.get_or_init(Default::default)
}

impl SvEventChannel {
    /// The `rdma_event_channel` C holds.
    pub fn c_channel(&self) -> *mut RdmaEventChannel {
        self.c
    }

    /// Forgets a synchronous id's private channel (its descriptor closes with the last
    /// reference).
    pub fn retire(&self) {
        if let Some(ch) = table().lock().remove(&(self.c as usize)) {
            unregister(ch.c, Kind::CmChannel);
        }
    }
}

impl Drop for SvEventChannel {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in make() and freed only here.
        drop(unsafe { Box::from_raw(self.c) });
    }
}

/// A new event channel: `rdma_create_event_channel`'s, or a synchronous id's private one.
pub fn new_channel() -> Result<Arc<SvEventChannel>, i32> {
    let queue =
        FdEventQueue::new("CM event channel", EVENT_CHANNEL_LIMIT, ()).map_err(|e| e.errno())?;
    // Blocking until the application sets O_NONBLOCK itself (see nonblocking()).
    crate::channel::make_blocking(queue.fd());
    let c = Box::into_raw(Box::new(RdmaEventChannel { fd: queue.fd() }));
    let ch = Arc::new(SvEventChannel { c, queue });
    table().lock().insert(c as usize, ch.clone());
    register(c, Kind::CmChannel);
    Ok(ch)
}

/// The channel behind a live `rdma_event_channel`.
///
/// # Safety
/// Any pointer; it is looked up in the table first.
pub unsafe fn live(c: *mut RdmaEventChannel) -> Option<Arc<SvEventChannel>> {
    if !is_live(c, Kind::CmChannel) {
        return None;
    }
    table().lock().get(&(c as usize)).cloned()
}

/// The channel an id given `c` uses, and whether the id is synchronous: a new private
/// channel for NULL, else the live channel `c` names (EINVAL if none).
///
/// # Safety
/// Any pointer; it is looked up in the table first.
pub unsafe fn channel_for(c: *mut RdmaEventChannel) -> Result<(Arc<SvEventChannel>, bool), i32> {
    if c.is_null() {
        return new_channel().map(|ch| (ch, true));
    }
    // SAFETY: per the contract.
    unsafe { live(c) }.map(|ch| (ch, false)).ok_or(libc::EINVAL)
}

/// Where an id stands (the subset of librdmacm's states its calls check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// A request's new id, not yet accepted or rejected.
    Requested,
    Connecting,
    Connected,
    Disconnected,
    /// Rejected, unreachable or failed.
    Failed,
}

/// What the peer offered in its request (accept takes at most this).
#[derive(Debug, Clone, Copy, Default)]
pub struct Offered {
    pub responder_resources: u8,
    pub initiator_depth: u8,
}

/// The mutable state of an id.
pub struct IdState {
    pub phase: Phase,
    pub dev: Option<Arc<CmDevice>>,
    /// The devices of a wildcard bind, each holding the id's port; empty otherwise.
    pub wildcard: Vec<Arc<CmDevice>>,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub port_held: bool,
    /// The core's handle of its connection or SIDR request.
    pub core: Option<CoreId>,
    pub offered: Offered,
    /// For rdma_create_ep's passive ids: the QP rdma_get_request makes on each new id.
    pub ep_qp_attr: Option<EpQpAttr>,
    /// CQs and channels the library made for the id's QP (destroyed with it).
    pub own_cqs: bool,
    /// RDMA_OPTION_ID_ACK_TIMEOUT, for the QP's RTS.
    pub ack_timeout: Option<u8>,
    /// The multicast groups it joined (see `mcast`, which bounds them).
    pub groups: Vec<Joined>,
}

/// One multicast join of an id (see `mcast`).
pub struct Joined {
    /// The group's address as the application gave it (leave compares with it).
    pub addr: SocketAddr,
    /// The application's context, handed back in the event.
    pub context: usize,
    pub send_only: bool,
    /// Its MULTICAST_JOIN event was made.
    pub announced: bool,
    /// The id's QP was attached when the event was read.
    pub attached: bool,
}

/// What rdma_create_ep kept of a passive id's QP attributes: the PD (0: the id's) and
/// the attributes.
pub struct EpQpAttr {
    pub pd: usize,
    pub attr: IbvQpInitAttrEx,
}

// SAFETY: the attributes' pointers (CQs, SRQ, context) name objects of the application's
// that the library only hands back to its own calls.
unsafe impl Send for EpQpAttr {}

impl EpQpAttr {
    /// A copy of the attributes, for one QP.
    pub fn attr_copy(&self) -> IbvQpInitAttrEx {
        // SAFETY: a plain C struct of integers and pointers: a bitwise copy is a copy.
        unsafe { std::ptr::read(&self.attr) }
    }
}

/// The library's side of an id, shared with its sinks and queued events.
pub struct IdInner {
    pub ps: PortSpace,
    /// The address of the `SvCmId` C holds (set once it is boxed).
    ptr: AtomicUsize,
    /// Its memory was given back (see [`free_if_done`]).
    memory_freed: AtomicBool,
    /// The channel its events go to.
    pub channel: Mutex<Arc<SvEventChannel>>,
    /// Synchronous (created or migrated without a channel): its calls wait for their own
    /// events on its private channel.
    sync: AtomicBool,
    pub state: Mutex<IdState>,
    /// A listener's request ids, by core id, until each gets its own route.
    pub children: Mutex<HashMap<u32, Weak<IdInner>>>,
    pub destroyed: AtomicBool,
    /// Events handed to the application and not yet acknowledged.
    pub events_out: AtomicUsize,
    pub me: Weak<IdInner>,
}

/// An `rdma_cm_id`: what C sees, then the library's state.
#[repr(C)]
pub struct SvCmId {
    pub id: RdmaCmId,
    pub inner: Arc<IdInner>,
}

/// The sink the core delivers an id's events to: queues them on its current channel.
struct IdSink {
    id: Weak<IdInner>,
    via: Option<IpAddr>,
}

impl CmEventSink for IdSink {
    fn deliver(&self, event: CoreEvent) {
        let Some(id) = self.id.upgrade() else {
            return;
        };
        let raw = RawEvent {
            target: self.id.clone(),
            what: RawKind::Core {
                id: event.id,
                kind: event.kind,
                via: self.via,
            },
        };
        let channel = id.channel.lock().clone();
        channel.queue.push_if(raw, |_, _| true);
    }
}

impl IdInner {
    /// A sink for this id's events (`via`: the device they come through, for a wildcard
    /// listener's one sink per device).
    pub fn sink(&self, via: Option<IpAddr>) -> Arc<dyn CmEventSink> {
        Arc::new(IdSink {
            id: self.me.clone(),
            via,
        })
    }

    /// Queues an event of the library itself (address and route resolution).
    pub fn post_local(&self, event: u32, status: i32) {
        let raw = RawEvent {
            target: self.me.clone(),
            what: RawKind::Local { event, status },
        };
        let channel = self.channel.lock().clone();
        channel.queue.push_if(raw, |_, _| true);
    }

    /// Queues the MULTICAST_JOIN event of `group` for the id.
    pub fn post_join(&self, group: SocketAddr) {
        let raw = RawEvent {
            target: self.me.clone(),
            what: RawKind::Join { group },
        };
        let channel = self.channel.lock().clone();
        channel.queue.push_if(raw, |_, _| true);
    }

    /// True while the id is synchronous.
    pub fn is_sync(&self) -> bool {
        self.sync.load(Ordering::SeqCst)
    }

    /// Makes the id synchronous or not (rdma_migrate_id); returns whether it was.
    pub fn set_sync(&self, sync: bool) -> bool {
        self.sync.swap(sync, Ordering::SeqCst)
    }

    /// The `rdma_cm_id` C holds.
    pub fn c_id(&self) -> *mut RdmaCmId {
        self.ptr.load(Ordering::Acquire) as *mut RdmaCmId
    }

    /// Records the bound device and addresses in the C-visible route.
    pub fn publish_route(&self, st: &IdState) {
        let id = self.c_id();
        // SAFETY: the id is live (its inner is reachable); only library calls write these
        // fields, and applications read them after the call that set them returned.
        unsafe {
            if let Some(dev) = &st.dev {
                (*id).verbs = dev.verbs;
                if (*id).pd.is_null() {
                    (*id).pd = dev.pd;
                }
            }
            let addr = &mut (*id).route.addr;
            if let Some(local) = st.local {
                addr.src_storage = sockaddr::storage(local);
                addr.ibaddr.sgid = sockaddr::gid(local.ip());
            }
            if let Some(remote) = st.remote {
                addr.dst_storage = sockaddr::storage(remote);
                addr.ibaddr.dgid = sockaddr::gid(remote.ip());
            }
            addr.ibaddr.pkey = 0xffff;
        }
    }
}

/// The qp_type of a port space (IBV_QPT_RC = 2, IBV_QPT_UD = 4).
pub fn qp_type_of(ps: PortSpace) -> u32 {
    match ps {
        PortSpace::Udp => 4,
        _ => 2,
    }
}

/// A new id on `channel` (a private one for a synchronous id), registered as live.
pub fn new_id(
    channel: Arc<SvEventChannel>,
    sync: bool,
    context: *mut std::ffi::c_void,
    ps: PortSpace,
    phase: Phase,
) -> Arc<IdInner> {
    let c_channel = channel.c_channel();
    let inner = Arc::new_cyclic(|me| IdInner {
        ps,
        ptr: AtomicUsize::new(0),
        memory_freed: AtomicBool::new(false),
        channel: Mutex::new(channel),
        sync: AtomicBool::new(sync),
        state: Mutex::new(IdState {
            phase,
            dev: None,
            wildcard: Vec::new(),
            local: None,
            remote: None,
            port_held: false,
            core: None,
            offered: Offered::default(),
            ep_qp_attr: None,
            own_cqs: false,
            ack_timeout: None,
            groups: Vec::new(),
        }),
        children: Mutex::new(HashMap::new()),
        destroyed: AtomicBool::new(false),
        events_out: AtomicUsize::new(0),
        me: me.clone(),
    });
    let boxed = Box::new(SvCmId {
        id: RdmaCmId {
            verbs: std::ptr::null_mut(),
            channel: c_channel,
            context,
            qp: std::ptr::null_mut(),
            route: RdmaRoute {
                addr: RdmaAddr::default(),
                path_rec: std::ptr::null_mut(),
                num_paths: 0,
            },
            ps: match ps {
                PortSpace::Udp => RDMA_PS_UDP,
                _ => RDMA_PS_TCP,
            },
            port_num: 1,
            event: std::ptr::null_mut(),
            send_cq_channel: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq_channel: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            qp_type: qp_type_of(ps),
        },
        inner: inner.clone(),
    });
    let raw = Box::into_raw(boxed);
    inner.ptr.store(raw as usize, Ordering::Release);
    register(raw, Kind::CmId);
    inner
}

/// The library's side of a live id, or None (the caller fails with EINVAL).
///
/// # Safety
/// Any pointer; it is looked up in the table of live objects first.
pub unsafe fn live_id(id: *mut RdmaCmId) -> Option<Arc<IdInner>> {
    if !is_live(id, Kind::CmId) {
        return None;
    }
    // SAFETY: live, hence an SvCmId of ours.
    Some(unsafe { (*(id as *mut SvCmId)).inner.clone() })
}

impl IdInner {
    /// The id core `core` names among this id and its request children.
    pub fn resolve_core(&self, core: CoreId) -> Option<Arc<IdInner>> {
        if self.state.lock().core == Some(core) {
            return self.me.upgrade();
        }
        self.children.lock().get(&core.0).and_then(Weak::upgrade)
    }
}

/// Frees a destroyed id's memory once no event handed out for it is outstanding.
pub fn free_if_done(inner: &Arc<IdInner>) {
    if inner.destroyed.load(Ordering::SeqCst)
        && inner.events_out.load(Ordering::SeqCst) == 0
        && !inner.memory_freed.swap(true, Ordering::SeqCst)
    {
        // SAFETY: the SvCmId made by new_id, unregistered by destroy; the swap above lets
        // exactly one caller free it.
        drop(unsafe { Box::from_raw(inner.c_id() as *mut SvCmId) });
    }
}
