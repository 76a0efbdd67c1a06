//! Opening devices (of `device_list`): the first open of a device binds its link and
//! starts its engine thread; later opens share them until the last context closes.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::config::{DeviceConfig, LinkConfig};
use super::context::EmuContext;
use super::device::Device;
use super::device_list::device_list;
use super::engine_thread::DeviceRuntime;
use crate::net::channel::ChannelLink;
use crate::net::fault::{FaultCounters, FaultyLink};
use crate::net::qemu_socket::QemuSocketLink;
use crate::net::shared_port::link::SharedLink;
use crate::net::shared_port::qemu_link::SharedQemuLink;
use crate::net::udp::UdpLink;
use crate::net::Link;

/// How long an open waits for a closing instance of the same device to release its address.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long the exit hook waits for an open or close in progress on another thread.
const EXIT_WAIT: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Registry {
    /// Open devices: the runtime (alive while contexts exist) and the device itself (alive
    /// until its engine thread has exited and its socket is closed).
    open: HashMap<String, (Weak<DeviceRuntime>, Weak<Device>)>,
    /// Fault counters of devices opened with faults, by name (the last open's).
    fault_counters: HashMap<String, Arc<FaultCounters>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

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
    // Devices a forked child inherited are its parent's: opened anew here (see fork_guard).
    let inherited = reg
        .open
        .get(name)
        .is_some_and(|(_, device)| device.upgrade().is_some_and(|device| !device.opened_here()));
    if inherited {
        reg.open.remove(name);
    }
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
    if link.shared_port().is_some() {
        super::exit_hook::install(hand_over_shared_ports);
    }
    let device = Arc::new(Device::new(config, link));
    let device_weak = Arc::downgrade(&device);
    let runtime = Arc::new(DeviceRuntime::start(device)?);
    reg.open
        .insert(name.to_string(), (Arc::downgrade(&runtime), device_weak));
    EmuContext::new(runtime)
}

/// Hands over the shared ports of the devices this process opened and still has open (the
/// exit hook's work, see `exit_hook`). A device a forked child inherited is its parent's.
pub(crate) fn hand_over_shared_ports() {
    let Some(guard) = REGISTRY.try_lock_for(EXIT_WAIT) else {
        return;
    };
    let devices: Vec<Arc<Device>> = guard
        .iter()
        .flat_map(|reg| reg.open.values())
        .filter_map(|(_, device)| device.upgrade())
        .collect();
    drop(guard);
    for device in devices.iter().filter(|d| d.opened_here()) {
        if let Err(e) = device.link.hand_over_shared_port() {
            tracing::debug!(error = %e, device = %device.config.name, "hand-over at exit failed");
        }
    }
}

/// Binds the socket (or attaches to the channel network) that device `config` receives on.
fn bind_link(config: &DeviceConfig) -> VerbsResult<Box<dyn Link>> {
    let name = &config.name;
    Ok(match &config.link {
        LinkConfig::Udp if config.share_port => Box::new(
            SharedLink::join(config.ip, config.udp_port).map_err(|e| VerbsError::Io {
                errno: e.raw_os_error().unwrap_or(match e.kind() {
                    std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
                    std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
                    _ => libc::EIO,
                }),
                message: format!(
                    "joining the processes sharing {}:{} for {name}: {e}{}",
                    config.ip,
                    config.udp_port,
                    if e.raw_os_error() == Some(libc::EADDRINUSE) {
                        " (a process holds the port without sharing it: kernel rxe, or a \
                         softverbs process with SOFTVERBS_SHARE_PORT=0)"
                    } else {
                        ""
                    }
                ),
            })?,
        ),
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
        // Shared as a UDP port is: see docs/shared-devices.md, "How the lab device is shared".
        LinkConfig::QemuSocket {
            frames_local,
            frames_peer,
        } if config.share_port => Box::new(
            SharedQemuLink::join(
                *frames_local,
                *frames_peer,
                config.mac(),
                config.ip,
                config.udp_port,
            )
            .map_err(|e| VerbsError::Io {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
                message: format!(
                    "joining the processes sharing frames socket {frames_local} for {name}: {e}"
                ),
            })?,
        ),
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
    use crate::engine::device_list::{register_device, DEVICES_ENV, FAULTS_ENV};
    use crate::net::channel::ChannelNetwork;
    use crate::net::fault::{FaultConfig, FaultSetting};
    use std::net::{IpAddr, Ipv4Addr};

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
