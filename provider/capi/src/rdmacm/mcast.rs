//! Multicast through rdma_cm (RoCE: no SA; the kernel's `cma_iboe_join_multicast`):
//! `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`, and the
//! MULTICAST_JOIN event. The group's GID is its IP address (IPv4-mapped for IPv4); the
//! event's UD parameters address it (AH to that GID, QPN 0xFFFFFF, the UDP port space's
//! Q_Key) and carry the join's context in `private_data`, as librdmacm's do. As librdmacm,
//! the id's QP is attached to the group when the application reads the event (unless it
//! joined send-only); a failed attach turns the event into MULTICAST_ERROR.

use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::Arc;

use super::abi::*;
use super::devices::canonical;
use super::shared::{live_id, IdInner, Joined, Phase};
use super::sockaddr;
use super::sync::complete;
use crate::abi::{IbvGid, IbvQp};
use crate::mcast::sv_ibv_detach_mcast;

/// Most groups one id joins at once (the device bounds the attachments too).
pub const MAX_JOINS: usize = 64;

/// `rdma_join_multicast`: joins as a full member; MULTICAST_JOIN follows.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_join_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> i32 {
    // SAFETY: the caller's id and address, checked inside.
    unsafe { join(id, addr, MC_JOIN_FLAG_FULLMEMBER, context) }
}

/// `rdma_join_multicast_ex`: ENOTSUP for unknown `comp_mask` bits, EINVAL without an
/// address or join flags, or with an unknown flag (librdmacm's checks).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_join_multicast_ex(
    id: *mut RdmaCmId,
    attr: *mut RdmaCmJoinMcAttrEx,
    context: *mut c_void,
) -> i32 {
    if attr.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, the caller's attributes.
    let a = unsafe { &*attr };
    if a.comp_mask >= JOIN_MC_ATTR_RESERVED {
        return super::fail(libc::ENOTSUP);
    }
    if a.comp_mask & JOIN_MC_ATTR_ADDRESS == 0
        || a.comp_mask & JOIN_MC_ATTR_JOIN_FLAGS == 0
        || a.join_flags >= MC_JOIN_FLAG_RESERVED
    {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: as above.
    unsafe { join(id, a.addr, a.join_flags, context) }
}

/// `rdma_leave_multicast`: EADDRNOTAVAIL for an address the id did not join; the QP is
/// detached first. A join event not read yet is dropped.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_leave_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddr.
    let Some(addr) = (unsafe { sockaddr::read(addr) }) else {
        return super::fail(libc::EINVAL);
    };
    let left = {
        let mut st = inner.state.lock();
        let at = st.groups.iter().position(|g| g.addr == addr);
        at.map(|i| st.groups.remove(i))
    };
    let Some(left) = left else {
        return super::fail(libc::EADDRNOTAVAIL);
    };
    if left.attached {
        // SAFETY: a live id's QP field.
        unsafe { detach((*id).qp, left.addr) };
    }
    0
}

/// Detaches the id's QP from every group it was attached to through the id (before the
/// QP or the id goes: the verbs refuse to destroy an attached QP).
///
/// # Safety
/// `id` is a live id.
pub unsafe fn detach_all(inner: &Arc<IdInner>, id: *mut RdmaCmId) {
    let mut st = inner.state.lock();
    for g in st.groups.iter_mut().filter(|g| g.attached) {
        g.attached = false;
        // SAFETY: the caller's live id.
        unsafe { detach((*id).qp, g.addr) };
    }
}

/// # Safety
/// `id` (checked live) and `addr` (a sockaddr or NULL) are the caller's.
unsafe fn join(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
    flags: u32,
    context: *mut c_void,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddr.
    let Some(addr) = (unsafe { sockaddr::read(addr) }) else {
        return super::fail(libc::EINVAL);
    };
    let mut st = inner.state.lock();
    // The kernel's: bound to a device (by bind or by resolving an address), and not yet
    // further on; the zero address is no group.
    let bound = matches!(st.phase, Phase::Bound | Phase::AddrResolved) && st.dev.is_some();
    let same_family = st
        .local
        .is_some_and(|l| l.is_ipv4() == canonical(addr.ip()).is_ipv4());
    if !bound || !same_family || addr.ip().is_unspecified() {
        return super::fail(libc::EINVAL);
    }
    if st.groups.len() >= MAX_JOINS {
        return super::fail(libc::ENOMEM);
    }
    st.groups.push(Joined {
        addr,
        context: context as usize,
        send_only: flags == MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        announced: false,
        attached: false,
    });
    drop(st);
    inner.post_join(addr);
    complete(&inner)
}

/// # Safety
/// `qp` is NULL or a QP handle of the application's.
unsafe fn detach(qp: *mut IbvQp, group: SocketAddr) {
    if qp.is_null() {
        return;
    }
    let gid = IbvGid(sockaddr::gid(group.ip()));
    // SAFETY: checked live inside; a GID on the stack.
    let _ = unsafe { sv_ibv_detach_mcast(qp, &gid, 0) };
}
