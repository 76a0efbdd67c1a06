//! `rdma_cm_id`: the object C sees and the library's state behind it, the sink that routes
//! the device CM's events for it to its channel, and its life (`rdma_create_id`,
//! `rdma_destroy_id`, `rdma_migrate_id`). An id is bound to one emulated device (or, bound
//! to the wildcard address, to every device of a family), holds a port of its port space,
//! and names its connection in the device's CM core.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use softverbs_emu::cm::{CmEvent as CoreEvent, CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::cm_service::CmEventSink;
use softverbs_emu::wire::cm::PortSpace;

use super::abi::*;
use super::channel::{self, RawEvent, RawKind, SvEventChannel};
use super::devices::CmDevice;
use super::sockaddr;
use crate::abi::IbvQpInitAttrEx;
use crate::handle::{is_live, register, unregister, Kind};

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
    /// Options set with rdma_set_option (kept; RoCE paths have no use for them here).
    pub tos: u8,
    pub ack_timeout: Option<u8>,
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

    /// True while the id is synchronous.
    pub fn is_sync(&self) -> bool {
        self.sync.load(Ordering::SeqCst)
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
            tos: 0,
            ack_timeout: None,
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

    /// Ends what the id holds on its device(s): its connection (the core finishes the
    /// protocol), its listen, its port; requests it never handed out are rejected.
    pub fn teardown(&self) {
        let mut st = self.state.lock();
        let was = st.phase;
        let port = st.local.map(|l| l.port());
        let devices: Vec<Arc<CmDevice>> = if st.wildcard.is_empty() {
            st.dev.iter().cloned().collect()
        } else {
            std::mem::take(&mut st.wildcard)
        };
        if let (Some(core), Some(dev)) = (st.core.take(), st.dev.as_ref()) {
            let _ = dev.service.destroy_in(self.ps, core);
        }
        if let Some(port) = port {
            for dev in &devices {
                if was == Phase::Listening {
                    let _ = dev.service.unlisten(self.ps, port);
                }
                if st.port_held {
                    dev.service.release_port(self.ps, port);
                }
            }
        }
        st.port_held = false;
        drop(st);
        self.drop_waiting_events(&devices);
    }

    /// Drops the id's waiting events; a request among them gets a REJ (or a SIDR reject)
    /// so that the core frees it.
    fn drop_waiting_events(&self, devices: &[Arc<CmDevice>]) {
        let channel = self.channel.lock().clone();
        let mut untaken = Vec::new();
        channel.queue.with_state_dropping(|_, dropper| {
            dropper.retain(|e| {
                if !e.target.ptr_eq(&self.me) {
                    return true;
                }
                if let RawKind::Core { id, kind, via } = &e.what {
                    if matches!(
                        kind,
                        CoreKind::ConnectRequest { .. } | CoreKind::SidrRequest { .. }
                    ) {
                        untaken.push((*id, *via));
                    }
                }
                false
            });
        });
        for (core, via) in untaken {
            let dev = devices
                .iter()
                .find(|d| via.is_none() || Some(d.ip) == via)
                .cloned();
            let Some(dev) = dev else {
                continue;
            };
            dev.service.end_untaken_request(self.ps, core);
        }
    }
}

/// `rdma_create_id`: a new id on `channel` (NULL: a synchronous id whose calls wait for
/// their own events) in port space `ps` (TCP, or UDP for UD through SIDR; IB and IPoIB
/// spaces are EPROTONOSUPPORT... as on RoCE, which only serves IP port spaces).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_id(
    channel: *mut RdmaEventChannel,
    id: *mut *mut RdmaCmId,
    context: *mut std::ffi::c_void,
    ps: u32,
) -> i32 {
    if id.is_null() {
        return super::fail(libc::EINVAL);
    }
    let space = match ps {
        RDMA_PS_TCP => PortSpace::Tcp,
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IB | RDMA_PS_IPOIB => return super::fail(libc::EOPNOTSUPP),
        _ => return super::fail(libc::EINVAL),
    };
    let (channel, sync) = if channel.is_null() {
        match channel::private() {
            Ok(c) => (c, true),
            Err(e) => return super::fail(e),
        }
    } else {
        // SAFETY: checked against the live table inside.
        match unsafe { channel::live(channel) } {
            Some(c) => (c, false),
            None => return super::fail(libc::EINVAL),
        }
    };
    let inner = new_id(channel, sync, context, space, Phase::Idle);
    // SAFETY: the caller passes a writable pointer (checked non-null).
    unsafe { *id = inner.c_id() };
    0
}

/// `rdma_destroy_id`: ends the id's connection (a DREQ or REJ as its state needs),
/// stops its listen, gives its port back and drops its waiting events. Its memory goes
/// once every event handed out for it is acknowledged, so an event still held stays
/// readable.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_id(id: *mut RdmaCmId) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    if !unregister(id, Kind::CmId) {
        return super::fail(libc::EINVAL);
    }
    inner.destroyed.store(true, Ordering::SeqCst);
    inner.teardown();
    // SAFETY: the id was live until just now; its last synchronous event is ours to ack.
    let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
    if !held.is_null() {
        // SAFETY: an event this library handed out for the id.
        unsafe { channel::sv_rdma_ack_cm_event(held) };
    }
    if inner.is_sync() {
        let ch = inner.channel.lock().clone();
        ch.retire();
    }
    free_if_done(&inner);
    0
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

/// `rdma_migrate_id`: the id's events (those waiting included) go to `channel` from now
/// on, and the id is asynchronous; NULL makes it synchronous on a private channel. A
/// synchronous id's held event is acknowledged and its private channel retired.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_migrate_id(
    id: *mut RdmaCmId,
    channel: *mut RdmaEventChannel,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let target = if channel.is_null() {
        match channel::private() {
            Ok(c) => c,
            Err(e) => return super::fail(e),
        }
    } else {
        // SAFETY: checked against the live table inside.
        match unsafe { channel::live(channel) } {
            Some(c) => c,
            None => return super::fail(libc::EINVAL),
        }
    };
    let old = std::mem::replace(&mut *inner.channel.lock(), target.clone());
    let was_sync = inner.sync.swap(channel.is_null(), Ordering::SeqCst);
    if was_sync {
        // SAFETY: live id: the event it holds is one this library handed out for it.
        let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
        if !held.is_null() {
            // SAFETY: as above.
            unsafe { channel::sv_rdma_ack_cm_event(held) };
        }
    }
    if Arc::ptr_eq(&old, &target) {
        return 0;
    }
    let mut moved = Vec::new();
    old.queue.with_state_dropping(|_, dropper| {
        dropper.retain(|e| {
            if e.target.ptr_eq(&inner.me) {
                moved.push(e.clone());
                false
            } else {
                true
            }
        });
    });
    for e in moved {
        target.queue.push_if(e, |_, _| true);
    }
    if was_sync {
        old.retire();
    }
    // SAFETY: live id: the library's own field.
    unsafe { (*id).channel = target.c_channel() };
    0
}
