//! Device discovery: the devices of `SOFTVERBS_DEVICES` (or the embedded default of two
//! loopback devices) plus those registered through the API; opening one starts its engine.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::config::{DeviceConfig, LinkConfig};
use super::context::{Device, DeviceRuntime, EmuContext};
use crate::net::channel::ChannelLink;
use crate::net::udp::UdpLink;
use crate::net::Link;

/// The environment variable listing emulated devices (see [`DeviceConfig::parse_list`]).
pub const DEVICES_ENV: &str = "SOFTVERBS_DEVICES";

/// How long an open waits for a closing instance of the same device to release its address.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Registry {
    registered: Vec<DeviceConfig>,
    /// Open devices: the runtime (alive while contexts exist) and the device itself (alive
    /// until its engine thread has exited and its socket is closed).
    open: HashMap<String, (Weak<DeviceRuntime>, Weak<Device>)>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The embedded default when `SOFTVERBS_DEVICES` is unset: two devices on loopback.
fn default_devices() -> Vec<DeviceConfig> {
    vec![
        DeviceConfig::new("softrxe0", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
        DeviceConfig::new("softrxe1", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
    ]
}

fn env_devices() -> VerbsResult<Vec<DeviceConfig>> {
    match std::env::var(DEVICES_ENV) {
        Ok(spec) => DeviceConfig::parse_list(&spec),
        Err(std::env::VarError::NotPresent) => Ok(default_devices()),
        Err(std::env::VarError::NotUnicode(_)) => Err(VerbsError::inval(format!(
            "{DEVICES_ENV} is not valid UTF-8"
        ))),
    }
}

/// Adds a device to the list. Its name must be new.
pub fn register_device(config: DeviceConfig) -> VerbsResult<()> {
    let mut guard = REGISTRY.lock();
    let reg = guard.get_or_insert_with(Registry::default);
    let taken = reg.registered.iter().any(|d| d.name == config.name)
        || env_devices()?.iter().any(|d| d.name == config.name);
    if taken {
        return Err(VerbsError::inval(format!(
            "a device named {:?} already exists",
            config.name
        )));
    }
    reg.registered.push(config);
    Ok(())
}

/// Every known device: those of the environment (or the default), then registered ones.
pub fn device_list() -> VerbsResult<Vec<DeviceConfig>> {
    let mut list = env_devices()?;
    if let Some(reg) = REGISTRY.lock().as_ref() {
        list.extend(reg.registered.iter().cloned());
    }
    Ok(list)
}

/// Opens device `name`: the first open binds its link and starts its engine thread; later
/// opens share them.
pub fn open_device(name: &str) -> VerbsResult<EmuContext> {
    let config = device_list()?
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| VerbsError::NotFound(format!("no device named {name:?}")))?;
    let mut guard = REGISTRY.lock();
    let reg = guard.get_or_insert_with(Registry::default);
    if let Some((runtime, device)) = reg.open.get(name) {
        if let Some(runtime) = runtime.upgrade() {
            return Ok(EmuContext { runtime });
        }
        // The last context just went away and the device is shutting down: wait until it
        // has released its address rather than fail to bind it.
        let started = Instant::now();
        while device.strong_count() > 0 {
            if started.elapsed() > CLOSE_WAIT {
                return Err(VerbsError::Busy(format!("device {name} is still closing")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let link: Box<dyn Link> =
        match &config.link {
            LinkConfig::Udp => Box::new(UdpLink::bind(config.ip, config.udp_port).map_err(
                |e| VerbsError::Io {
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                    message: format!("binding {}:{} for {name}: {e}", config.ip, config.udp_port),
                },
            )?),
            LinkConfig::Channel(net) => {
                let link: ChannelLink = net
                    .attach(std::net::SocketAddr::new(config.ip, config.udp_port))
                    .map_err(|e| VerbsError::Io {
                        errno: libc::EADDRINUSE,
                        message: format!("attaching {name} to the channel network: {e}"),
                    })?;
                Box::new(link)
            }
        };
    let device = Arc::new(Device::new(config, link));
    let device_weak = Arc::downgrade(&device);
    let runtime = Arc::new(DeviceRuntime::start(device)?);
    reg.open
        .insert(name.to_string(), (Arc::downgrade(&runtime), device_weak));
    Ok(EmuContext { runtime })
}
