//! The endpoint helpers: `rdma_getaddrinfo` / `rdma_freeaddrinfo` (names resolved by the
//! system's getaddrinfo, addresses mapped to the emulated devices when the id binds),
//! `rdma_create_ep` (a synchronous id bound, or resolved with a QP) and `rdma_destroy_ep`.

use std::net::SocketAddr;
use std::os::raw::c_char;

use super::abi::*;
use super::addr::{sv_rdma_bind_addr, sv_rdma_resolve_addr, sv_rdma_resolve_route};
use super::id::{sv_rdma_create_id, sv_rdma_destroy_id};
use super::qp::{ex_attr, sv_rdma_create_qp, sv_rdma_destroy_qp, sv_rdma_destroy_srq};
use super::shared::{live_id, EpQpAttr};
use super::sockaddr;
use crate::abi::{IbvPd, IbvQpInitAttr};

/// One `rdma_addrinfo` with the addresses it points to.
#[repr(C)]
struct SvAddrinfo {
    ai: RdmaAddrinfo,
    src: SockaddrStorage,
    dst: SockaddrStorage,
}

/// The first IPv4 / IPv6 address the system resolves `node` / `service` to.
///
/// # Safety
/// `node` and `service` are NULL or NUL-terminated strings.
unsafe fn resolve(
    node: *const c_char,
    service: *const c_char,
    flags: i32,
    family: i32,
) -> Result<SocketAddr, i32> {
    // SAFETY: zeroed addrinfo hints are valid.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_STREAM;
    if flags & RAI_PASSIVE != 0 {
        hints.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: per the contract; list is freed below.
    let rc = unsafe { libc::getaddrinfo(node, service, &hints, &mut list) };
    if rc != 0 {
        return Err(if rc == libc::EAI_SERVICE {
            libc::EINVAL
        } else {
            libc::ENOENT
        });
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: a node of the list getaddrinfo returned.
        found = unsafe { sockaddr::read((*at).ai_addr) };
        // SAFETY: as above.
        at = unsafe { (*at).ai_next };
    }
    // SAFETY: the list getaddrinfo returned.
    unsafe { libc::freeaddrinfo(list) };
    found.ok_or(libc::ENOENT)
}

/// `rdma_getaddrinfo`: `node` / `service` resolved (RAI_PASSIVE: the address to bind,
/// the wildcard without a node; else the destination, with `hints->ai_src_addr` as the
/// source if given). Without node and service, librdmacm's: the hints' addresses and
/// fields (pyverbs' `AddrInfo(src=...)` for a multicast group). Port space and QP type
/// from the hints (TCP and RC by default, UDP for a UD QP type).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
    res: *mut *mut RdmaAddrinfo,
) -> i32 {
    let from_hints_only = node.is_null() && service.is_null();
    if res.is_null() || (from_hints_only && hints.is_null()) {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller's hints, or NULL.
    let hints = unsafe { hints.as_ref() };
    let flags = hints.map_or(0, |h| h.ai_flags);
    let family = hints.map_or(0, |h| h.ai_family);
    let mut qp_type = hints.map_or(0, |h| h.ai_qp_type);
    let mut ps = hints.map_or(0, |h| h.ai_port_space);
    if ps == 0 {
        ps = if qp_type == 4 {
            RDMA_PS_UDP
        } else {
            RDMA_PS_TCP
        } as i32;
    }
    if qp_type == 0 {
        qp_type = if ps == RDMA_PS_UDP as i32 { 4 } else { 2 };
    }
    let hint_addr = |which: fn(&RdmaAddrinfo) -> *mut libc::sockaddr| {
        hints
            .map(which)
            .filter(|a| !a.is_null())
            // SAFETY: an address of the caller's hints, a sockaddr.
            .and_then(|a| unsafe { sockaddr::read(a) })
    };
    let addr = if from_hints_only {
        None
    } else {
        // SAFETY: per rdma_getaddrinfo's contract the strings are NUL-terminated.
        match unsafe { resolve(node, service, flags, family) } {
            Ok(a) => Some(a),
            Err(e) => return super::fail(e),
        }
    };
    // SAFETY: a plain C struct; zero is its empty value.
    let mut boxed: Box<SvAddrinfo> = Box::new(unsafe { std::mem::zeroed() });
    boxed.ai.ai_flags = flags;
    boxed.ai.ai_family = match addr {
        Some(a) if a.is_ipv4() => libc::AF_INET,
        Some(_) => libc::AF_INET6,
        None => family,
    };
    boxed.ai.ai_qp_type = qp_type;
    boxed.ai.ai_port_space = ps;
    let src_hint = hint_addr(|h| h.ai_src_addr);
    let (src, dst) = match addr {
        Some(addr) if flags & RAI_PASSIVE != 0 => (Some(addr), None),
        Some(addr) => (src_hint, Some(addr)),
        None => (src_hint, hint_addr(|h| h.ai_dst_addr)),
    };
    let p: *mut SvAddrinfo = &mut *boxed;
    // SAFETY: p points into the box, whose storage fields have room for any address.
    unsafe {
        if let Some(src) = src {
            (*p).ai.ai_src_len = sockaddr::write((*p).src.0.as_mut_ptr() as *mut _, src);
            (*p).ai.ai_src_addr = (*p).src.0.as_mut_ptr() as *mut libc::sockaddr;
        }
        if let Some(dst) = dst {
            (*p).ai.ai_dst_len = sockaddr::write((*p).dst.0.as_mut_ptr() as *mut _, dst);
            (*p).ai.ai_dst_addr = (*p).dst.0.as_mut_ptr() as *mut libc::sockaddr;
        }
    }
    // SAFETY: checked non-null; freed by rdma_freeaddrinfo.
    unsafe { *res = Box::into_raw(boxed) as *mut RdmaAddrinfo };
    0
}

/// `rdma_freeaddrinfo`: frees a list rdma_getaddrinfo returned.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_freeaddrinfo(res: *mut RdmaAddrinfo) {
    let mut at = res;
    while !at.is_null() {
        // SAFETY: a node rdma_getaddrinfo made (the caller's contract).
        let boxed = unsafe { Box::from_raw(at as *mut SvAddrinfo) };
        at = boxed.ai.ai_next;
    }
}

/// `rdma_create_ep`: a synchronous id for `res`: bound to its source for RAI_PASSIVE
/// (the QP attributes are kept for each request rdma_get_request hands out), else with
/// its address and route resolved and, given `qp_init_attr`, a QP.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_create_ep(
    id: *mut *mut RdmaCmId,
    res: *mut RdmaAddrinfo,
    pd: *mut IbvPd,
    qp_init_attr: *mut IbvQpInitAttr,
) -> i32 {
    if id.is_null() || res.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: an addrinfo of the caller's (normally ours).
    let res = unsafe { &*res };
    let ps = match res.ai_port_space {
        0 => RDMA_PS_TCP,
        p => p as u32,
    };
    let mut new_id: *mut RdmaCmId = std::ptr::null_mut();
    // SAFETY: a synchronous id (no channel), written to new_id.
    if unsafe { sv_rdma_create_id(std::ptr::null_mut(), &mut new_id, std::ptr::null_mut(), ps) }
        != 0
    {
        return -1;
    }
    // SAFETY: new_id is live; the addresses are the addrinfo's.
    let rc = unsafe {
        if res.ai_flags & RAI_PASSIVE != 0 {
            let rc = sv_rdma_bind_addr(new_id, res.ai_src_addr);
            if rc == 0 && !qp_init_attr.is_null() {
                if let Some(inner) = live_id(new_id) {
                    inner.state.lock().ep_qp_attr = Some(EpQpAttr {
                        pd: pd as usize,
                        attr: ex_attr(&*qp_init_attr),
                    });
                }
            }
            rc
        } else {
            let mut rc = sv_rdma_resolve_addr(new_id, res.ai_src_addr, res.ai_dst_addr, 2000);
            if rc == 0 {
                rc = sv_rdma_resolve_route(new_id, 2000);
            }
            if rc == 0 && !qp_init_attr.is_null() {
                rc = sv_rdma_create_qp(new_id, pd, qp_init_attr);
            }
            rc
        }
    };
    if rc != 0 {
        // SAFETY: reading the calling thread's errno, kept across the destroy.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: new_id is live.
        unsafe { sv_rdma_destroy_id(new_id) };
        return super::fail(errno);
    }
    // SAFETY: checked non-null.
    unsafe { *id = new_id };
    0
}

/// `rdma_destroy_ep`: the id's QP (with the CQs the library made), its SRQ, and the id.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_destroy_ep(id: *mut RdmaCmId) {
    // SAFETY: checked live inside each call.
    unsafe {
        if live_id(id).is_none() {
            return;
        }
        sv_rdma_destroy_qp(id);
        sv_rdma_destroy_srq(id);
        sv_rdma_destroy_id(id);
    }
}
