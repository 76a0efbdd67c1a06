//! Devices and open contexts.

use std::sync::Arc;

use softverbs_api::{DeviceAttr, DeviceInfo, GidEntry, PortAttr, VerbsContext, VerbsResult};
use softverbs_emu::cm_service::CmService;
use softverbs_emu::engine::{self, EmuContext};

use crate::select::Provider;

/// The devices the provider chosen by `SOFTVERBS_PROVIDER` offers (`ibv_get_device_list`):
/// see [`devices_for`].
pub fn devices() -> VerbsResult<Vec<DeviceInfo>> {
    devices_for(Provider::from_env()?)
}

/// The devices `provider` offers, each saying its backend: `emu` the emulated devices,
/// `hw` the rdma-core devices (feature `hw`), `auto` the rdma-core devices when there are
/// any, else the emulated ones.
pub fn devices_for(provider: Provider) -> VerbsResult<Vec<DeviceInfo>> {
    match provider.resolve()? {
        Provider::Hw => hw_devices(),
        _ => emu_devices(),
    }
}

/// Every device of both backends (rdma-core devices first), each saying which it is: what
/// `softverbs devices` shows, whatever `SOFTVERBS_PROVIDER` says.
pub fn all_devices() -> VerbsResult<Vec<DeviceInfo>> {
    let mut list = if cfg!(feature = "hw") {
        hw_devices()?
    } else {
        Vec::new()
    };
    list.extend(emu_devices()?);
    Ok(list)
}

fn emu_devices() -> VerbsResult<Vec<DeviceInfo>> {
    engine::config::check_env()?;
    Ok(engine::device_list()?
        .into_iter()
        .map(|d| DeviceInfo {
            guid: d.node_guid(),
            name: d.name,
            backend: "emu",
        })
        .collect())
}

#[cfg(feature = "hw")]
fn hw_devices() -> VerbsResult<Vec<DeviceInfo>> {
    crate::hw::devices()
}

#[cfg(not(feature = "hw"))]
fn hw_devices() -> VerbsResult<Vec<DeviceInfo>> {
    Err(softverbs_api::VerbsError::NotSupported(
        "the hardware passthrough is not built in (cargo feature `hw`)".into(),
    ))
}

pub(crate) struct ContextInner {
    pub(crate) backend: Arc<dyn VerbsContext>,
    emu: Option<EmuContext>,
    kind: Provider,
    /// The connection manager of an emulated device: it runs (answers CM MADs on QP1)
    /// while the device is open in this process.
    cm: Option<Arc<CmService>>,
}

/// An open device (`ibv_context`). Cloning shares it.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// Opens device `name` (`ibv_open_device`) with the provider `SOFTVERBS_PROVIDER` names:
    /// see [`Context::open_with`].
    pub fn open(name: &str) -> VerbsResult<Context> {
        Context::open_with(name, Provider::from_env()?)
    }

    /// Opens device `name` of `provider`: `emu` an emulated device, `hw` an rdma-core
    /// device; `auto` the emulated device of that name if one is configured or registered
    /// (a program that set up emulated devices meant them), else the rdma-core one.
    pub fn open_with(name: &str, provider: Provider) -> VerbsResult<Context> {
        let provider = match provider {
            Provider::Auto => {
                let emulated = engine::device_list()?.iter().any(|d| d.name == name);
                if emulated || !cfg!(feature = "hw") {
                    Provider::Emu
                } else {
                    Provider::Hw
                }
            }
            p => p.resolve()?,
        };
        if provider == Provider::Hw {
            return open_hw(name);
        }
        engine::config::check_env()?;
        let emu = engine::open_device(name)?;
        let cm = CmService::for_context(&emu)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                backend: Arc::new(emu.clone()),
                emu: Some(emu),
                kind: Provider::Emu,
                cm: Some(cm),
            }),
        })
    }

    /// Which backend serves this context: [`Provider::Emu`] or [`Provider::Hw`].
    pub fn provider(&self) -> Provider {
        self.inner.kind
    }

    /// The backend verbs layer, for calls the safe API does not wrap.
    pub fn backend(&self) -> &Arc<dyn VerbsContext> {
        &self.inner.backend
    }

    /// The emulated device behind this context, if it is one (for counters and addresses).
    pub fn emulator(&self) -> Option<&EmuContext> {
        self.inner.emu.as_ref()
    }

    /// The connection manager running on this emulated device (`None` on rdma-core
    /// devices, whose CM is the kernel's).
    pub fn cm_service(&self) -> Option<Arc<CmService>> {
        self.inner.cm.clone()
    }

    /// Back-off for a thread that busy-polls this device's CQs and found them empty: waits
    /// up to `timeout` (at most 100 µs on the emulator) until traffic reaches the device,
    /// so that the next poll finds work, without burning the CPU the device needs. Returns
    /// whether traffic arrived (a hint: poll again either way).
    pub fn wait_for_traffic(&self, timeout: std::time::Duration) -> bool {
        match &self.inner.emu {
            Some(emu) => emu.wait_for_traffic(timeout),
            None => {
                std::thread::sleep(timeout);
                false
            }
        }
    }

    /// Device name.
    pub fn name(&self) -> String {
        self.inner.backend.device_name()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> VerbsResult<DeviceAttr> {
        self.inner.backend.query_device()
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr> {
        self.inner.backend.query_port(port_num)
    }

    /// `ibv_query_gid_ex`.
    pub fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry> {
        self.inner.backend.query_gid(port_num, index)
    }
}

#[cfg(feature = "hw")]
fn open_hw(name: &str) -> VerbsResult<Context> {
    let hw = crate::hw::HwContext::open(name)?;
    Ok(Context {
        inner: Arc::new(ContextInner {
            backend: Arc::new(hw),
            emu: None,
            kind: Provider::Hw,
            cm: None,
        }),
    })
}

#[cfg(not(feature = "hw"))]
fn open_hw(_name: &str) -> VerbsResult<Context> {
    Err(softverbs_api::VerbsError::NotSupported(
        "the hardware passthrough is not built in (cargo feature `hw`)".into(),
    ))
}
