//! What a queued event becomes when the application reads it: an `rdma_cm_event` with
//! its private data, and for a request, the new id it names; for a multicast join, the
//! group's UD parameters, with the id's QP attached as librdmacm attaches it. Also records
//! what the event means for the id's phase.

use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::Arc;

use softverbs_emu::cm::{CmEventKind as CoreKind, CmId as CoreId};
use softverbs_emu::wire::cm::PortSpace;

use super::abi::*;
use super::shared::{new_channel, new_id, IdInner, Offered, Phase, RawEvent, RawKind};
use super::sockaddr;
use crate::abi::{IbvAhAttr, IbvGid};
use crate::handle::set_errno;
use crate::mcast::sv_ibv_attach_mcast;

/// An event handed to C: the `rdma_cm_event` first, then what it points into.
#[repr(C)]
pub struct SvEvent {
    pub ev: RdmaCmEvent,
    /// The private data `ev.param` points to.
    pub data: Vec<u8>,
    /// The id the event is for (`ev.id`); kept alive until the event is acknowledged.
    pub target: Arc<IdInner>,
    /// The listener of a request (`ev.listen_id`).
    pub listener: Option<Arc<IdInner>>,
}

fn blank(target: &Arc<IdInner>, event: u32, status: i32) -> Box<SvEvent> {
    Box::new(SvEvent {
        ev: RdmaCmEvent {
            id: target.c_id(),
            listen_id: std::ptr::null_mut(),
            event,
            status,
            param: RdmaEventParam {
                conn: RdmaConnParam {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                },
            },
        },
        data: Vec::new(),
        target: target.clone(),
        listener: None,
    })
}

/// Sets the event's private data (the pointer into `data`, which the box keeps).
fn set_private_data(e: &mut SvEvent, data: Vec<u8>, ud: bool) {
    let len = data.len().min(u8::MAX as usize) as u8;
    e.data = data;
    let ptr = if e.data.is_empty() {
        std::ptr::null()
    } else {
        e.data.as_ptr() as *const std::ffi::c_void
    };
    // Both union members start with the private data pointer and length.
    if ud {
        e.ev.param.ud.private_data = ptr;
        e.ev.param.ud.private_data_len = len;
    } else {
        e.ev.param.conn.private_data = ptr;
        e.ev.param.conn.private_data_len = len;
    }
}

/// An address vector to `peer` from GID index 1 (the device's RoCEv2 address).
pub fn ah_attr_to(peer: std::net::IpAddr) -> IbvAhAttr {
    let mut ah = IbvAhAttr::default();
    ah.grh.dgid.0 = sockaddr::gid(peer);
    ah.grh.sgid_index = 1;
    ah.grh.hop_limit = 64;
    ah.is_global = 1;
    ah.port_num = 1;
    ah
}

/// The event a queued one becomes, or None if its id is gone.
pub fn materialize(raw: RawEvent) -> Option<Box<SvEvent>> {
    let target = raw.target.upgrade()?;
    if target.destroyed.load(std::sync::atomic::Ordering::SeqCst) {
        return None;
    }
    let (core, kind, via) = match raw.what {
        RawKind::Local { event, status } => return Some(blank(&target, event, status)),
        RawKind::Join { group } => return join_event(&target, group),
        RawKind::Core { id, kind, via } => (id, kind, via),
    };
    match kind {
        CoreKind::ConnectRequest {
            cma,
            remote_qpn,
            responder_resources,
            initiator_depth,
            private_data,
            ..
        } => {
            let offered = Offered {
                responder_resources,
                initiator_depth,
            };
            let remote = SocketAddr::new(cma.src_addr, cma.src_port);
            let child = child(&target, core, remote, offered, via)?;
            let mut e = blank(&child, event::CONNECT_REQUEST, 0);
            e.ev.listen_id = target.c_id();
            e.listener = Some(target);
            set_private_data(&mut e, private_data, false);
            e.ev.param.conn.responder_resources = responder_resources;
            e.ev.param.conn.initiator_depth = initiator_depth;
            e.ev.param.conn.qp_num = remote_qpn;
            e.ev.param.conn.retry_count = 7;
            e.ev.param.conn.rnr_retry_count = 7;
            Some(e)
        }
        CoreKind::SidrRequest {
            cma, private_data, ..
        } => {
            let remote = SocketAddr::new(cma.src_addr, cma.src_port);
            let child = child(&target, core, remote, Offered::default(), via)?;
            let mut e = blank(&child, event::CONNECT_REQUEST, 0);
            e.ev.listen_id = target.c_id();
            e.listener = Some(target);
            set_private_data(&mut e, private_data, true);
            e.ev.param.ud.ah_attr = ah_attr_to(remote.ip());
            Some(e)
        }
        other => {
            let id = target.resolve_core(core)?;
            let e = outcome(&id, other);
            record(&id, e.ev.event);
            Some(e)
        }
    }
}

/// The event of a connection's outcome.
fn outcome(id: &Arc<IdInner>, kind: CoreKind) -> Box<SvEvent> {
    let mut e = blank(id, event::ESTABLISHED, 0);
    match kind {
        CoreKind::Established {
            remote_qpn,
            private_data,
        } => {
            set_private_data(&mut e, private_data, false);
            e.ev.param.conn.qp_num = remote_qpn;
        }
        CoreKind::ConnectResponse {
            remote_qpn,
            private_data,
        } => {
            e.ev.event = event::CONNECT_RESPONSE;
            set_private_data(&mut e, private_data, false);
            e.ev.param.conn.qp_num = remote_qpn;
        }
        CoreKind::Rejected(r) => {
            e.ev.event = event::REJECTED;
            e.ev.status = i32::from(r.reason);
            set_private_data(&mut e, r.private_data, id.ps == PortSpace::Udp);
        }
        CoreKind::Unreachable => {
            e.ev.event = event::UNREACHABLE;
            e.ev.status = -libc::ETIMEDOUT;
        }
        CoreKind::ConnectError => {
            e.ev.event = event::CONNECT_ERROR;
            e.ev.status = -libc::EINVAL;
        }
        CoreKind::Disconnected => e.ev.event = event::DISCONNECTED,
        CoreKind::TimewaitExit => e.ev.event = event::TIMEWAIT_EXIT,
        CoreKind::SidrResolved {
            qpn,
            qkey,
            private_data,
        } => {
            let peer = id.state.lock().remote.map(|r| r.ip());
            set_private_data(&mut e, private_data, true);
            if let Some(peer) = peer {
                e.ev.param.ud.ah_attr = ah_attr_to(peer);
            }
            e.ev.param.ud.qp_num = qpn;
            e.ev.param.ud.qkey = qkey;
        }
        CoreKind::SidrFailed { status } => {
            e.ev.event = event::UNREACHABLE;
            e.ev.status = status.map_or(-libc::ETIMEDOUT, i32::from);
        }
        CoreKind::ConnectRequest { .. } | CoreKind::SidrRequest { .. } => {}
    }
    e
}

/// Records what an outcome did to the id's phase.
fn record(id: &Arc<IdInner>, event: u32) {
    let mut st = id.state.lock();
    st.phase = match event {
        event::ESTABLISHED => Phase::Connected,
        event::DISCONNECTED => Phase::Disconnected,
        event::REJECTED | event::UNREACHABLE | event::CONNECT_ERROR => {
            st.core = None;
            Phase::Failed
        }
        _ => st.phase,
    };
    if event == event::TIMEWAIT_EXIT {
        st.core = None;
    }
}

/// A new id for a request that reached `listener`: on the listener's channel (a private
/// one for a synchronous listener), with its context, bound to the device the request
/// came through, routed the core's events of the request.
fn child(
    listener: &Arc<IdInner>,
    core: CoreId,
    remote: SocketAddr,
    offered: Offered,
    via: Option<std::net::IpAddr>,
) -> Option<Arc<IdInner>> {
    let sync = listener.is_sync();
    let channel = if sync {
        new_channel().ok()?
    } else {
        listener.channel.lock().clone()
    };
    // SAFETY: the listener is live (not destroyed, checked by the caller).
    let context = unsafe { (*listener.c_id()).context };
    let child = new_id(channel, sync, context, listener.ps, Phase::Requested);
    let parent = listener.state.lock();
    let dev = match via {
        Some(ip) if !parent.wildcard.is_empty() => {
            parent.wildcard.iter().find(|d| d.ip == ip).cloned()
        }
        _ => parent.dev.clone(),
    };
    let port = parent.local.map_or(0, |l| l.port());
    drop(parent);
    {
        let mut st = child.state.lock();
        st.local = dev.as_ref().map(|d| SocketAddr::new(d.ip, port));
        st.dev = dev.clone();
        st.remote = Some(remote);
        st.core = Some(core);
        st.offered = offered;
        child.publish_route(&st);
    }
    let mut children = listener.children.lock();
    children.retain(|_, w| w.strong_count() > 0);
    children.insert(core.0, Arc::downgrade(&child));
    drop(children);
    if let Some(dev) = dev {
        dev.service.reroute(core, child.sink(None));
    }
    Some(child)
}

/// The hop limit of the kernel's RoCE multicast records.
const MULTICAST_HOP_LIMIT: u8 = 1;

/// The MULTICAST_JOIN event of `group` for `target` (None when it left the group before
/// reading the event), with the QP attached as librdmacm attaches it.
pub fn join_event(target: &Arc<IdInner>, group: SocketAddr) -> Option<Box<SvEvent>> {
    let mut st = target.state.lock();
    let joined = st
        .groups
        .iter_mut()
        .find(|g| g.addr == group && !g.announced)?;
    joined.announced = true;
    let mut e = blank(target, event::MULTICAST_JOIN, 0);
    e.ev.param.ud.private_data = joined.context as *const c_void;
    let mut ah = ah_attr_to(group.ip());
    ah.grh.hop_limit = MULTICAST_HOP_LIMIT;
    e.ev.param.ud.ah_attr = ah;
    e.ev.param.ud.qp_num = softverbs_emu::engine::MULTICAST_QPN;
    e.ev.param.ud.qkey = RDMA_UDP_QKEY;
    // SAFETY: the target is live (not destroyed: materialize checked); its QP field.
    let qp = unsafe { (*target.c_id()).qp };
    if !qp.is_null() && !joined.send_only {
        // The GID the AH above names (an IPv4-mapped address gives the same bytes as its
        // IPv4 form).
        let gid = IbvGid(ah.grh.dgid.0);
        // SAFETY: the id's QP (checked live inside) and a GID on the stack.
        match unsafe { sv_ibv_attach_mcast(qp, &gid, 0) } {
            0 => joined.attached = true,
            errno => {
                e.ev.event = event::MULTICAST_ERROR;
                e.ev.status = -1;
                set_errno(errno);
            }
        }
    }
    Some(e)
}
