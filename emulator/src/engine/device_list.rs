//! The list of emulated devices: those of `SOFTVERBS_DEVICES` (or the embedded default of
//! two loopback devices, with the faults of `SOFTVERBS_FAULTS` if set) plus those
//! registered through the API. Opening one is `registry`'s job.

use std::net::{IpAddr, Ipv4Addr};

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::config::{DeviceConfig, LinkConfig};
use crate::transport::qp::ROCE_UDP_PORT;

pub use super::config::DEVICES_ENV;

/// The environment variable giving fault injection to every device of [`DEVICES_ENV`] (or of
/// the default list), e.g. `loss=100,burst=50,burst_max=4,dup=50,reorder=50,corrupt=10,seed=7`
/// (see [`crate::net::fault::FaultSetting::parse`]).
pub const FAULTS_ENV: &str = "SOFTVERBS_FAULTS";

/// Devices registered through [`register_device`].
static REGISTERED: Mutex<Vec<DeviceConfig>> = Mutex::new(Vec::new());

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
    let mut registered = REGISTERED.lock();
    let taken = registered.iter().any(|d| d.name == config.name)
        || env_devices()?.iter().any(|d| d.name == config.name);
    if taken {
        return Err(VerbsError::inval(format!(
            "a device named {:?} already exists",
            config.name
        )));
    }
    registered.push(config);
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
    list.extend(REGISTERED.lock().iter().cloned());
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
