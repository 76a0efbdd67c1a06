//! Binding and resolving: `rdma_bind_addr` (one device, or every device of a family for the
//! wildcard address), `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_listen`, and the
//! source port / destination port queries.

use std::net::SocketAddr;
use std::sync::Arc;

use super::abi::*;
use super::devices::{self, canonical, CmDevice};
use super::shared::{live_id, IdInner, IdState, Phase};
use super::sockaddr;
use super::sync::complete;

/// Takes `addr`'s port (0: an ephemeral one) on `dev` and records the binding.
fn bind_on(
    inner: &IdInner,
    st: &mut IdState,
    dev: Arc<CmDevice>,
    addr: SocketAddr,
) -> Result<(), i32> {
    let port = dev
        .service
        .bind_port(inner.ps, addr.port())
        .map_err(|e| e.errno())?;
    st.local = Some(SocketAddr::new(canonical(addr.ip()), port));
    st.port_held = true;
    st.dev = Some(dev);
    inner.publish_route(st);
    Ok(())
}

/// The wildcard bind: `addr`'s port (the same on every device) on each device of its
/// family; nothing held on a failure.
fn bind_all(inner: &IdInner, st: &mut IdState, addr: SocketAddr) -> Result<(), i32> {
    let mut port = addr.port();
    let mut held: Vec<Arc<CmDevice>> = Vec::new();
    for dev in devices::family(addr.is_ipv4())? {
        match dev.service.bind_port(inner.ps, port) {
            Ok(p) => {
                port = p;
                held.push(dev);
            }
            Err(e) => {
                for d in &held {
                    d.service.release_port(inner.ps, port);
                }
                return Err(e.errno());
            }
        }
    }
    st.local = Some(SocketAddr::new(addr.ip(), port));
    st.port_held = true;
    st.wildcard = held;
    inner.publish_route(st);
    Ok(())
}

/// Releases a wildcard bind (to re-bind on the one device a route picks).
fn unbind_all(inner: &IdInner, st: &mut IdState) {
    if let Some(port) = st.local.map(|l| l.port()) {
        for dev in std::mem::take(&mut st.wildcard) {
            dev.service.release_port(inner.ps, port);
        }
    }
    st.port_held = false;
}

/// `rdma_bind_addr`: to the device whose address `addr` names (EADDRNOTAVAIL if none),
/// or to every device of the family for 0.0.0.0 / ::. EADDRINUSE if the port is taken.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_bind_addr(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: the caller passes a sockaddr (or NULL, refused).
    let Some(addr) = (unsafe { sockaddr::read(addr) }) else {
        return super::fail(libc::EAFNOSUPPORT);
    };
    let mut st = inner.state.lock();
    if st.phase != Phase::Idle {
        return super::fail(libc::EINVAL);
    }
    let done = if addr.ip().is_unspecified() {
        bind_all(&inner, &mut st, addr)
    } else {
        devices::device_at(addr.ip()).and_then(|dev| bind_on(&inner, &mut st, dev, addr))
    };
    match done {
        Ok(()) => {
            st.phase = Phase::Bound;
            0
        }
        Err(e) => super::fail(e),
    }
}

/// `rdma_resolve_addr`: binds (if not bound) to the device `src` names, or to the one
/// that reaches `dst`; ADDR_RESOLVED follows, or ADDR_ERROR (-EHOSTUNREACH) for a
/// loopback destination no device has.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_resolve_addr(
    id: *mut RdmaCmId,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: i32,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: the caller passes sockaddrs (or NULL for src).
    let (src, dst) = unsafe { (sockaddr::read(src), sockaddr::read(dst)) };
    let Some(dst) = dst else {
        return super::fail(libc::EINVAL);
    };
    let dst = SocketAddr::new(canonical(dst.ip()), dst.port());
    let mut st = inner.state.lock();
    let bound = match st.phase {
        Phase::Idle => (|| {
            let ip = match src {
                Some(s) if !s.ip().is_unspecified() => s.ip(),
                _ => devices::source_for(dst.ip())?,
            };
            let dev = devices::device_at(ip)?;
            let port = src.map_or(0, |s| s.port());
            bind_on(&inner, &mut st, dev, SocketAddr::new(ip, port))
        })(),
        // Bound to the wildcard: the route picks the device, the port stays.
        Phase::Bound if st.dev.is_none() => (|| {
            let port = st.local.map_or(0, |l| l.port());
            unbind_all(&inner, &mut st);
            let ip = devices::source_for(dst.ip())?;
            let dev = devices::device_at(ip)?;
            bind_on(&inner, &mut st, dev, SocketAddr::new(ip, port))
        })(),
        Phase::Bound => Ok(()),
        _ => Err(libc::EINVAL),
    };
    if let Err(e) = bound {
        return super::fail(e);
    }
    if st.local.is_some_and(|l| l.is_ipv4()) != dst.is_ipv4() {
        return super::fail(libc::EINVAL);
    }
    st.remote = Some(dst);
    inner.publish_route(&st);
    if devices::reachable(dst.ip()) {
        st.phase = Phase::AddrResolved;
        drop(st);
        inner.post_local(event::ADDR_RESOLVED, 0);
    } else {
        drop(st);
        inner.post_local(event::ADDR_ERROR, -libc::EHOSTUNREACH);
    }
    complete(&inner)
}

/// `rdma_resolve_route`: ROUTE_RESOLVED follows (a RoCE route is its two addresses).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_resolve_route(id: *mut RdmaCmId, _timeout_ms: i32) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let mut st = inner.state.lock();
    if st.phase != Phase::AddrResolved {
        return super::fail(libc::EINVAL);
    }
    st.phase = Phase::RouteResolved;
    drop(st);
    // SAFETY: live id; one path: the route's addresses.
    unsafe { (*id).route.num_paths = 1 };
    inner.post_local(event::ROUTE_RESOLVED, 0);
    complete(&inner)
}

/// `rdma_listen` on a bound id: requests for its port arrive as CONNECT_REQUEST events,
/// each with a new id. (The backlog is the CM's connection limit.)
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_listen(id: *mut RdmaCmId, _backlog: i32) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let mut st = inner.state.lock();
    if st.phase != Phase::Bound {
        return super::fail(libc::EINVAL);
    }
    let port = st.local.map_or(0, |l| l.port());
    let devices: Vec<Arc<CmDevice>> = if st.wildcard.is_empty() {
        st.dev.iter().cloned().collect()
    } else {
        st.wildcard.clone()
    };
    let wildcard = !st.wildcard.is_empty();
    for (i, dev) in devices.iter().enumerate() {
        let sink = inner.sink(wildcard.then_some(dev.ip));
        if let Err(e) = dev.service.listen(inner.ps, port, sink) {
            for d in &devices[..i] {
                let _ = d.service.unlisten(inner.ps, port);
            }
            return super::fail(e.errno());
        }
    }
    st.phase = Phase::Listening;
    0
}

fn port_of(storage: &SockaddrStorage) -> u16 {
    // SAFETY: a sockaddr_storage is room for any address and 8-aligned.
    unsafe { sockaddr::read(storage.0.as_ptr() as *const libc::sockaddr) }
        .map_or(0, |a| a.port().to_be())
}

/// `rdma_get_src_port`: the bound port, in network byte order (0 if unbound).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_src_port(id: *mut RdmaCmId) -> u16 {
    // SAFETY: checked live inside; the route is the library's own field.
    match unsafe { live_id(id) } {
        Some(_) => port_of(unsafe { &(*id).route.addr.src_storage }),
        None => 0,
    }
}

/// `rdma_get_dst_port`: the peer's port, in network byte order (0 if none).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_dst_port(id: *mut RdmaCmId) -> u16 {
    // SAFETY: checked live inside; the route is the library's own field.
    match unsafe { live_id(id) } {
        Some(_) => port_of(unsafe { &(*id).route.addr.dst_storage }),
        None => 0,
    }
}
