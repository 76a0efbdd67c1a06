//! Device discovery: the devices of `SOFTVERBS_DEVICES` (or the embedded default of two
//! loopback devices, with the faults of `SOFTVERBS_FAULTS` if set) plus those registered
//! through the API; opening one starts its engine.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::config::{DeviceConfig, LinkConfig};
use super::context::{Device, DeviceRuntime, EmuContext};
use crate::net::channel::ChannelLink;
use crate::net::fault::{FaultCounters, FaultyLink};
use crate::net::qemu_socket::QemuSocketLink;
use crate::net::udp::UdpLink;
use crate::net::Link;
use crate::transport::qp::ROCE_UDP_PORT;

/// The environment variable listing emulated devices (see [`DeviceConfig::parse_list`]).
pub const DEVICES_ENV: &str = "SOFTVERBS_DEVICES";

/// The environment variable giving fault injection to every device of [`DEVICES_ENV`] (or of
/// the default list), e.g. `loss=100,burst=50,burst_max=4,dup=50,reorder=50,corrupt=10,seed=7`
/// (see [`crate::net::fault::FaultSetting::parse`]).
pub const FAULTS_ENV: &str = "SOFTVERBS_FAULTS";

/// How long an open waits for a closing instance of the same device to release its address.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Registry {
    registered: Vec<DeviceConfig>,
    /// Open devices: the runtime (alive while contexts exist) and the device itself (alive
    /// until its engine thread has exited and its socket is closed).
    open: HashMap<String, (Weak<DeviceRuntime>, Weak<Device>)>,
    /// Fault counters of devices opened with faults, by name (the last open's).
    fault_counters: HashMap<String, Arc<FaultCounters>>,
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
/// EINVAL if `SOFTVERBS_DEVICES` or `SOFTVERBS_FAULTS` is malformed.
pub fn device_list() -> VerbsResult<Vec<DeviceConfig>> {
    let mut list = env_devices()?;
    // Applied here, not in env_devices: registering a device only needs the names.
    match std::env::var(FAULTS_ENV) {
        Ok(spec) => DeviceConfig::apply_fault_spec(&mut list, &spec, FAULTS_ENV)?,
        Err(std::env::VarError::NotPresent) => {}
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(VerbsError::inval(format!(
                "{FAULTS_ENV} is not valid UTF-8"
            )))
        }
    }
    if let Some(reg) = REGISTRY.lock().as_ref() {
        list.extend(reg.registered.iter().cloned());
    }
    Ok(list)
}

/// The UDP port of the process's UDP device at `ip` (of [`device_list`]) when it is not
/// 4791: where a peer that names no port must be sent to. perftest's connection keys, and
/// so `softverbs perf` between two processes, carry no port; two devices on other ports
/// (beside a kernel rxe, which holds 4791 on every address) would otherwise send each
/// other's packets to rxe, and retry forever.
pub(crate) fn udp_port_of(ip: IpAddr) -> Option<u16> {
    let ip = ip.to_canonical();
    device_list()
        .ok()?
        .into_iter()
        .find(|d| matches!(d.link, LinkConfig::Udp) && d.ip.to_canonical() == ip)
        .map(|d| d.udp_port)
        .filter(|&port| port != ROCE_UDP_PORT)
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
    // A previous instance whose last context just went away may still be closing: wait
    // until it has released its address rather than fail to bind it.
    let mut closing_since = None;
    if let Some((runtime, device)) = reg.open.get(name) {
        if let Some(runtime) = runtime.upgrade() {
            return EmuContext::new(runtime);
        }
        let started = Instant::now();
        while device.strong_count() > 0 {
            if started.elapsed() > CLOSE_WAIT {
                return Err(VerbsError::Busy(format!("device {name} is still closing")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        closing_since = Some(started);
    }
    // The strong count reaches zero just before the old device's fields (its socket) are
    // dropped, so a bind can still meet the old socket for a moment: retry it then.
    let link = loop {
        match bind_link(&config) {
            Err(e) if e.errno() == libc::EADDRINUSE => match closing_since {
                Some(started) if started.elapsed() <= CLOSE_WAIT => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => return Err(e),
            },
            other => break other?,
        }
    };
    let link = crate::net::pcap::tap::tap_from_env(link)?; // SOFTVERBS_PCAP: capture it
    let link: Box<dyn Link> = match &config.faults {
        Some(setting) => {
            reg.fault_counters
                .insert(name.to_string(), Arc::clone(&setting.counters));
            Box::new(FaultyLink::new(link, setting))
        }
        None => {
            reg.fault_counters.remove(name);
            link
        }
    };
    let device = Arc::new(Device::new(config, link));
    let device_weak = Arc::downgrade(&device);
    let runtime = Arc::new(DeviceRuntime::start(device)?);
    reg.open
        .insert(name.to_string(), (Arc::downgrade(&runtime), device_weak));
    EmuContext::new(runtime)
}

/// Binds the socket (or attaches to the channel network) that device `config` receives on.
fn bind_link(config: &DeviceConfig) -> VerbsResult<Box<dyn Link>> {
    let name = &config.name;
    Ok(match &config.link {
        LinkConfig::Udp => {
            Box::new(
                UdpLink::bind(config.ip, config.udp_port).map_err(|e| VerbsError::Io {
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                    message: format!("binding {}:{} for {name}: {e}", config.ip, config.udp_port),
                })?,
            )
        }
        LinkConfig::Channel(net) => {
            let link: ChannelLink = net
                .attach(std::net::SocketAddr::new(config.ip, config.udp_port))
                .map_err(|e| VerbsError::Io {
                    errno: libc::EADDRINUSE,
                    message: format!("attaching {name} to the channel network: {e}"),
                })?;
            Box::new(link)
        }
        LinkConfig::QemuSocket {
            frames_local,
            frames_peer,
        } => Box::new(
            QemuSocketLink::bind(
                *frames_local,
                *frames_peer,
                config.mac(),
                config.ip,
                config.udp_port,
            )
            .map_err(|e| VerbsError::Io {
                errno: e.raw_os_error().unwrap_or(libc::EINVAL),
                message: format!("binding frames socket {frames_local} for {name}: {e}"),
            })?,
        ),
    })
}

/// The fault counters of device `name` as last opened, if it was opened with faults (from
/// its [`DeviceConfig::faults`] or from `SOFTVERBS_FAULTS`).
pub fn fault_counters(name: &str) -> Option<Arc<FaultCounters>> {
    REGISTRY.lock().as_ref()?.fault_counters.get(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::channel::ChannelNetwork;
    use crate::net::fault::{FaultConfig, FaultSetting};

    // The only test of this crate that touches the environment or the device list, so
    // setting the variable cannot disturb another test.
    #[test]
    fn faults_env_applies_to_listed_devices_and_bad_syntax_is_einval() {
        std::env::remove_var(DEVICES_ENV);
        std::env::set_var(FAULTS_ENV, "loss=5,dup=1,seed=3");
        let list = device_list().unwrap();
        let seeds: Vec<_> = list
            .iter()
            .map(|d| d.faults.as_ref().map(|f| (f.config.loss_per_mille, f.seed)))
            .collect();
        assert_eq!(seeds, vec![Some((5, 3)), Some((5, 4))]);

        std::env::set_var(FAULTS_ENV, "loss=oops");
        assert_eq!(device_list().unwrap_err().errno(), 22);
        assert_eq!(open_device("softrxe0").err().map(|e| e.errno()), Some(22));
        std::env::remove_var(FAULTS_ENV);
        assert!(device_list().unwrap().iter().all(|d| d.faults.is_none()));

        // A registered device keeps its own setting; its counters are reachable by name.
        let setting = FaultSetting::new(FaultConfig::harsh(), 1);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
        register_device(DeviceConfig {
            link: LinkConfig::Channel(ChannelNetwork::new()),
            faults: Some(setting.clone()),
            ..DeviceConfig::new("fault-registry-test", ip)
        })
        .unwrap();
        assert!(fault_counters("fault-registry-test").is_none());
        let ctx = open_device("fault-registry-test").unwrap();
        let counters = fault_counters("fault-registry-test").unwrap();
        assert!(Arc::ptr_eq(&counters, &setting.counters));
        drop(ctx);
    }
}
