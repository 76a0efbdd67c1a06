//! Address resolution: from an IP address to the emulated device bound to it (each device
//! has one address, DESIGN.md), opened with its CM service running.

use std::net::IpAddr;
use std::sync::Arc;

use softverbs_api::{VerbsError, VerbsResult};
use softverbs_emu::cm_service::CmService;
use softverbs_emu::engine;

use crate::context::Context;
use crate::select::Provider;

/// A device an id is bound to: its open context and its CM.
#[derive(Clone)]
pub(crate) struct Device {
    pub(crate) ctx: Context,
    pub(crate) service: Arc<CmService>,
}

/// Why an address has no device, as the errno librdmacm reports.
pub(crate) fn no_device(ip: IpAddr) -> VerbsError {
    VerbsError::Io {
        errno: libc::EADDRNOTAVAIL,
        message: format!("no emulated device is bound to {ip}"),
    }
}

/// The name of the emulated device bound to `ip`, if one is configured or registered.
pub(crate) fn device_name_for(ip: IpAddr) -> VerbsResult<Option<String>> {
    engine::config::check_env()?;
    Ok(engine::device_list()?
        .into_iter()
        .find(|d| d.ip == canonical(ip))
        .map(|d| d.name))
}

/// Opens the device bound to `ip` (EADDRNOTAVAIL if none).
pub(crate) fn open_device_for(ip: IpAddr) -> VerbsResult<Device> {
    let name = device_name_for(ip)?.ok_or_else(|| no_device(ip))?;
    let ctx = Context::open_with(&name, Provider::Emu)?;
    let service = ctx
        .cm_service()
        .ok_or_else(|| VerbsError::NotSupported("no CM on this device".into()))?;
    Ok(Device { ctx, service })
}

/// Opens every emulated device of the address family (v4 or v6), each with its CM
/// running (EADDRNOTAVAIL if none can be opened).
pub(crate) fn open_family(v4: bool) -> VerbsResult<Vec<Device>> {
    engine::config::check_env()?;
    let devices: Vec<Device> = engine::device_list()?
        .into_iter()
        .filter(|d| d.ip.is_ipv4() == v4)
        .filter_map(|d| open_device_for(d.ip).ok())
        .collect();
    if devices.is_empty() {
        return Err(no_device_of_family(v4));
    }
    Ok(devices)
}

/// The local device to reach `dst` from when no source is given: the device bound to
/// `dst` itself, else the first one of the same address family.
pub(crate) fn source_for(dst: IpAddr) -> VerbsResult<IpAddr> {
    engine::config::check_env()?;
    let devices = engine::device_list()?;
    let dst = canonical(dst);
    devices
        .iter()
        .find(|d| d.ip == dst)
        .or_else(|| devices.iter().find(|d| d.ip.is_ipv4() == dst.is_ipv4()))
        .map(|d| d.ip)
        .ok_or_else(|| no_device(dst))
}

/// True if `dst` can be reached: an address outside loopback may be a kernel rdma_cm
/// peer, so only a loopback address without any device on it is known to be
/// unreachable (the kernel's ADDR_ERROR, -EHOSTUNREACH, for a neighbour that never
/// answers).
pub(crate) fn reachable(dst: IpAddr) -> VerbsResult<bool> {
    Ok(!canonical(dst).is_loopback() || device_name_for(dst)?.is_some())
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// EADDRNOTAVAIL for a wildcard of a family with no device.
fn no_device_of_family(v4: bool) -> VerbsError {
    VerbsError::Io {
        errno: libc::EADDRNOTAVAIL,
        message: format!(
            "no emulated device has an IPv{} address to bind the wildcard address on",
            if v4 { 4 } else { 6 }
        ),
    }
}
