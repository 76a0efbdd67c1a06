//! One CM service per emulated device, shared by every user of the device in the process:
//! the first user starts it (installs its QP1 handler), the last one's drop removes it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use softverbs_api::{VerbsContext, VerbsResult};

use super::comm_est::CommEstInlet;
use super::inlet::GsiInlet;
use super::service::CmService;
use crate::cm::{CmConfig, CmManager};
use crate::engine::EmuContext;

/// Live services by device name.
static SERVICES: Mutex<Option<HashMap<String, Weak<CmService>>>> = Mutex::new(None);

impl CmService {
    /// The CM service of the device `ctx` is open on, started if it does not run yet.
    pub fn for_context(ctx: &EmuContext) -> VerbsResult<Arc<CmService>> {
        let name = ctx.device_name();
        let mut guard = SERVICES.lock();
        let services = guard.get_or_insert_with(HashMap::new);
        if let Some(service) = services.get(&name).and_then(Weak::upgrade) {
            return Ok(service);
        }
        let ip = ctx.local_addr().ip();
        let guid = ctx.query_device()?.node_guid;
        let mut cfg = CmConfig::new(ip, guid, fresh_seed());
        // On a shared device, the IDs MADs answer name this process's slot (see
        // net::shared_port::mad_route).
        cfg.comm_id_prefix = ctx.shared_slot();
        let service = CmService::new(ctx.clone(), CmManager::new(cfg));
        ctx.set_gsi_handler(Some(Arc::new(GsiInlet {
            service: Arc::downgrade(&service),
        })));
        ctx.set_comm_est_handler(Some(Arc::new(CommEstInlet {
            service: Arc::downgrade(&service),
        })));
        services.insert(name, Arc::downgrade(&service));
        Ok(service)
    }
}

impl Drop for CmService {
    fn drop(&mut self) {
        // Unless a new service for the device already replaced this one (it installed its
        // own handler under the same lock), QP1 goes back to counting and dropping.
        let name = self.ctx.device_name();
        let mut guard = SERVICES.lock();
        let replaced = guard
            .as_ref()
            .and_then(|s| s.get(&name))
            .is_some_and(|w| w.strong_count() > 0);
        if !replaced {
            self.ctx.set_gsi_handler(None);
            self.ctx.set_comm_est_handler(None);
            if let Some(services) = guard.as_mut() {
                services.remove(&name);
            }
        }
    }
}

/// Randomness for communication IDs and PSNs, so that a restarted process does not reuse
/// its previous IDs (the peer may still hold them in time-wait).
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}
