//! Devices and open contexts.

use std::sync::Arc;

use softverbs_api::{DeviceAttr, DeviceInfo, GidEntry, PortAttr, VerbsContext, VerbsResult};
use softverbs_emu::engine::{self, EmuContext};

use crate::channel::CompChannel;
use crate::cq::Cq;
use crate::events::AsyncEvents;
use crate::pd::Pd;
use crate::select::Provider;

/// The devices the selected provider offers (`ibv_get_device_list`).
pub fn devices() -> VerbsResult<Vec<DeviceInfo>> {
    // Only the emulator is built in today; `resolve` refuses `hw` without the feature.
    Provider::from_env()?.resolve()?;
    Ok(engine::device_list()?
        .into_iter()
        .map(|d| DeviceInfo {
            guid: d.node_guid(),
            name: d.name,
            backend: "emu",
        })
        .collect())
}

pub(crate) struct ContextInner {
    pub(crate) backend: Arc<dyn VerbsContext>,
    emu: Option<EmuContext>,
}

/// An open device (`ibv_context`). Cloning shares it.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// Opens device `name` (`ibv_open_device`).
    pub fn open(name: &str) -> VerbsResult<Context> {
        Provider::from_env()?.resolve()?;
        let emu = engine::open_device(name)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                backend: Arc::new(emu.clone()),
                emu: Some(emu),
            }),
        })
    }

    /// The backend verbs layer, for calls the safe API does not wrap.
    pub fn backend(&self) -> &Arc<dyn VerbsContext> {
        &self.inner.backend
    }

    /// The emulated device behind this context, if it is one (for counters and addresses).
    pub fn emulator(&self) -> Option<&EmuContext> {
        self.inner.emu.as_ref()
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

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> VerbsResult<Pd> {
        Pd::alloc(self)
    }

    /// `ibv_create_cq` with room for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> VerbsResult<Cq> {
        Cq::create(self, cqe, None)
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> VerbsResult<CompChannel> {
        CompChannel::create(self)
    }

    /// `ibv_create_cq` reporting to `channel` (of this context), which it keeps alive.
    pub fn create_cq_with_channel(&self, cqe: u32, channel: &CompChannel) -> VerbsResult<Cq> {
        Cq::create(self, cqe, Some(channel))
    }

    /// This context's async events (`ibv_get_async_event` and `async_fd`).
    pub fn async_events(&self) -> VerbsResult<AsyncEvents> {
        AsyncEvents::new(self)
    }
}
