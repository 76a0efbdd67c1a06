//! `rdma_cm_id`: its accessors, migration and destruction, and what a queued event
//! becomes when read (a request's new id is made then). An id is bound to one emulated
//! device (found from an address), holds a port of its port space, and gets the events of
//! its device's CM core through a sink that queues them on its current channel. The calls
//! that connect live in `conn.rs`, the data helpers in `post.rs`.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use softverbs_api::{VerbsError, VerbsResult};
use softverbs_emu::cm::{CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::wire::cm::PortSpace;

use crate::cq::Cq;
use crate::pd::Pd;
use crate::qp::Qp;

use crate::cm::conn::outcome;
use crate::cm::event::{CmEvent, EventType};
use crate::cm::shared::{CmId, ConnEventParam, EventChannel, IdShared, Phase, RawEvent, RawKind};
use crate::cm::wildcard;

impl CmId {
    /// `rdma_create_id`: a new id on `channel` in port space `ps` (TCP for RC, UDP for
    /// UD through SIDR).
    pub fn new(channel: &EventChannel, ps: PortSpace) -> VerbsResult<CmId> {
        if !matches!(ps, PortSpace::Tcp | PortSpace::Udp) {
            return Err(VerbsError::NotSupported(
                "port spaces TCP (RC) and UDP (UD) only".into(),
            ));
        }
        Ok(CmId {
            shared: IdShared::new(channel, ps, Phase::Idle),
        })
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.shared.ps
    }

    /// The channel its events go to.
    pub fn channel(&self) -> EventChannel {
        self.shared.channel.lock().clone()
    }

    /// The bound local address (`rdma_get_local_addr`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.state.lock().local
    }

    /// The peer's address (`rdma_get_peer_addr`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.shared.state.lock().remote
    }

    /// The device context it is bound to (`id->verbs`).
    pub fn context(&self) -> Option<crate::Context> {
        self.shared.state.lock().dev.as_ref().map(|d| d.ctx.clone())
    }

    /// Its QP (`id->qp`), once created.
    pub fn qp(&self) -> Option<Qp> {
        self.shared.state.lock().qp.clone()
    }

    /// Its PD (`id->pd`), once it has one.
    pub fn pd(&self) -> Option<Pd> {
        self.shared.state.lock().pd.clone()
    }

    /// Its send CQ, once it has a QP.
    pub fn send_cq(&self) -> Option<Cq> {
        self.shared.state.lock().send_cq.clone()
    }

    /// Its receive CQ, once it has a QP.
    pub fn recv_cq(&self) -> Option<Cq> {
        self.shared.state.lock().recv_cq.clone()
    }

    /// True if both handles are the same id.
    pub fn same(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// `rdma_migrate_id`: its events (those waiting included) go to `channel` from now on.
    pub fn migrate(&self, channel: &EventChannel) -> VerbsResult<()> {
        let old = {
            let mut cell = self.shared.channel.lock();
            if cell.same(channel) {
                return Ok(());
            }
            std::mem::replace(&mut *cell, channel.clone())
        };
        let me = Arc::downgrade(&self.shared);
        let mut moved = Vec::new();
        old.queue.with_state_dropping(|_, dropper| {
            dropper.retain(|e| {
                if e.target.ptr_eq(&me) {
                    moved.push(e.clone());
                    false
                } else {
                    true
                }
            });
        });
        for e in moved {
            channel.queue.push_if(e, |_, _| true);
        }
        Ok(())
    }

    /// `rdma_destroy_id`: ends its connection (a DREQ or REJ as its state needs, without
    /// further events), stops listening, gives its port back, drops its waiting events.
    /// Other clones stay valid handles of a destroyed id.
    pub fn destroy(&self) {
        self.shared.teardown();
    }

    pub(crate) fn from_shared(shared: Arc<IdShared>) -> CmId {
        CmId { shared }
    }
}

impl IdShared {
    fn teardown(&self) {
        let mut st = self.state.lock();
        if st.phase == Phase::Destroyed {
            return;
        }
        let was = st.phase;
        st.phase = Phase::Destroyed;
        if !st.wildcard.is_empty() {
            wildcard::release_all(&mut st, self.ps, was == Phase::Listening);
            let devices = std::mem::take(&mut st.wildcard);
            drop(st);
            if was == Phase::Listening {
                self.end_untaken_requests(|via| {
                    devices.iter().find(|d| Some(d.service.local_ip()) == via)
                });
            }
            return;
        }
        let Some(dev) = st.dev.clone() else {
            return;
        };
        if let Some(core) = st.core.take() {
            let _ = dev.service.destroy_in(self.ps, core);
        }
        if let Some(local) = st.local {
            if was == Phase::Listening {
                let _ = dev.service.unlisten(self.ps, local.port());
                self.end_untaken_requests(|_| Some(&dev));
            }
            if st.port_held {
                dev.service.release_port(self.ps, local.port());
                st.port_held = false;
            }
        }
        // The QP and CQs go with the last handle (rdma_destroy_qp / the ep's own drop).
    }

    /// Ends the requests a destroyed listener never handed out (their events are dropped
    /// from its channel): a REJ, or a SIDR reject, so that the core frees them.
    fn end_untaken_requests<'d>(
        &self,
        device: impl Fn(Option<std::net::IpAddr>) -> Option<&'d crate::cm::addr::Device>,
    ) {
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
            let Some(dev) = device(via) else {
                continue;
            };
            dev.service.end_untaken_request(self.ps, core);
        }
    }

    /// The id core `id` names among this id and its request children.
    fn resolve_core(&self, id: CoreId) -> Option<Arc<IdShared>> {
        if self.state.lock().core == Some(id) {
            return self.me.upgrade();
        }
        self.children.lock().get(&id.0).and_then(Weak::upgrade)
    }

    /// A new id for a request that reached listener `self`.
    fn child(
        &self,
        core: CoreId,
        remote: SocketAddr,
        offered: ConnEventParam,
        via: Option<std::net::IpAddr>,
    ) -> Arc<IdShared> {
        let channel = self.channel.lock().clone();
        let child = IdShared::new(&channel, self.ps, Phase::Requested);
        {
            let parent = self.state.lock();
            let mut st = child.state.lock();
            st.dev = parent.dev.clone();
            st.local = parent.local;
            // A wildcard listener's request belongs to the device it came through.
            if let Some(dev) = wildcard::device_via(&parent, via) {
                st.local = Some(SocketAddr::new(
                    dev.service.local_ip(),
                    parent.local.map_or(0, |l| l.port()),
                ));
                st.dev = Some(dev);
            }
            st.remote = Some(remote);
            st.core = Some(core);
            st.offered = offered;
        }
        let mut children = self.children.lock();
        children.retain(|_, w| w.strong_count() > 0);
        children.insert(core.0, Arc::downgrade(&child));
        child
    }
}

impl Drop for IdShared {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The event a queued one becomes, or `None` if its id is gone.
pub(crate) fn materialize(raw: RawEvent) -> VerbsResult<Option<CmEvent>> {
    let Some(target) = raw.target.upgrade() else {
        return Ok(None);
    };
    let event = |id: &Arc<IdShared>, event: EventType, status: i32| CmEvent {
        event,
        id: CmId::from_shared(id.clone()),
        listen_id: None,
        status,
        private_data: Vec::new(),
        conn: ConnEventParam::default(),
        ud: None,
    };
    let (core_id, kind, via) = match raw.what {
        RawKind::Local { event: e, status } => {
            if target.state.lock().phase == Phase::Destroyed {
                return Ok(None);
            }
            return Ok(Some(event(&target, e, status)));
        }
        RawKind::Core { id, kind, via } => (id, kind, via),
    };
    if target.state.lock().phase == Phase::Destroyed {
        return Ok(None);
    }
    match kind {
        CoreKind::ConnectRequest {
            cma,
            remote_qpn,
            responder_resources,
            initiator_depth,
            private_data,
            ..
        } => {
            let offered = ConnEventParam {
                qp_num: remote_qpn,
                responder_resources,
                initiator_depth,
            };
            let remote = SocketAddr::new(cma.src_addr, cma.src_port);
            let child = target.child(core_id, remote, offered, via);
            reroute(&child, core_id);
            let mut e = event(&child, EventType::ConnectRequest, 0);
            e.listen_id = Some(CmId::from_shared(target));
            e.private_data = private_data;
            e.conn = offered;
            Ok(Some(e))
        }
        CoreKind::SidrRequest {
            cma, private_data, ..
        } => {
            let remote = SocketAddr::new(cma.src_addr, cma.src_port);
            let child = target.child(core_id, remote, ConnEventParam::default(), via);
            reroute(&child, core_id);
            let mut e = event(&child, EventType::ConnectRequest, 0);
            e.listen_id = Some(CmId::from_shared(target));
            e.private_data = private_data;
            Ok(Some(e))
        }
        other => {
            let Some(id) = target.resolve_core(core_id) else {
                return Ok(None);
            };
            outcome(&id, other).map(|e| e.map(|e| finish(&id, e)))
        }
    }
}

/// Records what an outcome did to the id's phase.
fn finish(id: &Arc<IdShared>, e: CmEvent) -> CmEvent {
    let mut st = id.state.lock();
    if st.phase != Phase::Destroyed {
        st.phase = match e.event {
            EventType::Established => Phase::Connected,
            EventType::Disconnected => Phase::Disconnected,
            EventType::Rejected | EventType::Unreachable | EventType::ConnectError => {
                st.core = None;
                Phase::Failed
            }
            _ => st.phase,
        };
        if e.event == EventType::TimewaitExit {
            st.core = None;
        }
    }
    e
}

fn reroute(child: &Arc<IdShared>, core: CoreId) {
    let dev = child.state.lock().dev.clone();
    if let Some(dev) = dev {
        dev.service.reroute(core, child.sink());
    }
}
