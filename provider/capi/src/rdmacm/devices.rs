//! librdmacm's devices: each emulated device an id binds to is opened once per process
//! (its `ibv_context` is every such id's `verbs`), with one PD that ids on it share
//! (`id->pd`, as librdmacm allocates per device) and its CM service running. They stay
//! open for the life of the process, as librdmacm keeps its device list.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use softverbs_emu::cm_service::CmService;
use softverbs_emu::engine;

use crate::abi::{IbvContext, IbvPd};
use crate::context::sv_ibv_open_device;
use crate::device::device_for;
use crate::handle::SvContext;
use crate::pd::sv_ibv_alloc_pd;

/// An emulated device as librdmacm holds it.
pub struct CmDevice {
    /// Its address (its GID).
    pub ip: IpAddr,
    /// The context ids on it expose as `verbs`.
    pub verbs: *mut IbvContext,
    /// The PD ids on it get as `pd`.
    pub pd: *mut IbvPd,
    /// The device's connection manager.
    pub service: Arc<CmService>,
}

// SAFETY: the pointers name library objects that live for the process and are themselves
// safe to use from any thread (the context's state is behind locks).
unsafe impl Send for CmDevice {}
// SAFETY: as above; CmDevice is never mutated after it is made.
unsafe impl Sync for CmDevice {}

fn opened() -> &'static Mutex<Vec<Arc<CmDevice>>> {
    static OPENED: OnceLock<Mutex<Vec<Arc<CmDevice>>>> = OnceLock::new();
    OPENED.get_or_init(|| Mutex::new(Vec::new()))
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The emulated devices configured now (name, address), in list order.
fn configured() -> Result<Vec<(String, IpAddr)>, i32> {
    engine::config::check_env().map_err(|e| e.errno())?;
    Ok(engine::device_list()
        .map_err(|e| e.errno())?
        .into_iter()
        .map(|d| (d.name, d.ip))
        .collect())
}

/// The device bound to `ip`, opened (EADDRNOTAVAIL if no device has that address).
pub fn device_at(ip: IpAddr) -> Result<Arc<CmDevice>, i32> {
    let ip = canonical(ip);
    let list = configured()?;
    let (index, name) = list
        .iter()
        .enumerate()
        .find(|(_, (_, a))| *a == ip)
        .map(|(i, (n, _))| (i, n.clone()))
        .ok_or(libc::EADDRNOTAVAIL)?;
    open(&name, index, ip)
}

fn open(name: &str, index: usize, ip: IpAddr) -> Result<Arc<CmDevice>, i32> {
    let mut devices = opened().lock();
    if let Some(d) = devices.iter().find(|d| d.ip == ip) {
        return Ok(d.clone());
    }
    // SAFETY: device_for returns the library's own ibv_device for `name`.
    let verbs = unsafe { sv_ibv_open_device(device_for(name, index)) };
    if verbs.is_null() {
        return Err(libc::ENODEV);
    }
    // SAFETY: verbs was just opened by this library and is never closed.
    let sv = unsafe { SvContext::from_ptr(verbs) }.ok_or(libc::ENODEV)?;
    let service = CmService::for_context(&sv.emu).map_err(|e| e.errno())?;
    // SAFETY: a live context of ours.
    let pd = unsafe { sv_ibv_alloc_pd(verbs) };
    if pd.is_null() {
        return Err(libc::ENOMEM);
    }
    let dev = Arc::new(CmDevice {
        ip,
        verbs,
        pd,
        service,
    });
    devices.push(dev.clone());
    Ok(dev)
}

/// Every configured device of one address family (v4 or v6), opened.
pub fn family(v4: bool) -> Result<Vec<Arc<CmDevice>>, i32> {
    let list = configured()?;
    let devices: Vec<Arc<CmDevice>> = list
        .iter()
        .enumerate()
        .filter(|(_, (_, ip))| ip.is_ipv4() == v4)
        .filter_map(|(i, (name, ip))| open(name, i, *ip).ok())
        .collect();
    if devices.is_empty() {
        return Err(libc::EADDRNOTAVAIL);
    }
    Ok(devices)
}

/// Every configured device, opened (rdma_get_devices).
pub fn all() -> Result<Vec<Arc<CmDevice>>, i32> {
    let list = configured()?;
    list.iter()
        .enumerate()
        .map(|(i, (name, ip))| open(name, i, *ip))
        .collect()
}

/// The local address to reach `dst` from when no source is given: the device bound to
/// `dst` itself, else the first one of its address family.
pub fn source_for(dst: IpAddr) -> Result<IpAddr, i32> {
    let dst = canonical(dst);
    let list = configured()?;
    list.iter()
        .find(|(_, ip)| *ip == dst)
        .or_else(|| list.iter().find(|(_, ip)| ip.is_ipv4() == dst.is_ipv4()))
        .map(|(_, ip)| *ip)
        .ok_or(libc::EADDRNOTAVAIL)
}

/// True if `dst` may be reached: a loopback address without a device is known not to be
/// (the kernel's ADDR_ERROR for a neighbour that never answers); any other may be a
/// kernel rdma_cm peer.
pub fn reachable(dst: IpAddr) -> bool {
    let dst = canonical(dst);
    !dst.is_loopback() || configured().is_ok_and(|l| l.iter().any(|(_, ip)| *ip == dst))
}
