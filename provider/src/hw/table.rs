//! The tables of the hardware backend: libibverbs objects of one kind by contract id, each in
//! an `Arc`, so that a verb holds its object without the table lock and destruction waits for
//! no verb (it refuses with EBUSY while one holds it).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use softverbs_api::{VerbsError, VerbsResult};

use super::convert::error;
use super::ffi;

/// One table of objects of one kind, by contract id.
pub(super) struct Table<T> {
    map: Mutex<HashMap<u32, Arc<T>>>,
    what: &'static str,
}

impl<T> Table<T> {
    pub(super) fn new(what: &'static str) -> Self {
        Table {
            map: Mutex::new(HashMap::new()),
            what,
        }
    }

    pub(super) fn insert(&self, id: u32, obj: T) {
        self.map.lock().insert(id, Arc::new(obj));
    }

    /// The object `id`, or `missing` (the error the emulator gives for an unknown id).
    pub(super) fn get(&self, id: u32, missing: fn(String) -> VerbsError) -> VerbsResult<Arc<T>> {
        self.map
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| missing(format!("no {} {id:#x}", self.what)))
    }

    /// Destroys object `id` with `destroy` when no verb holds it; on failure it stays.
    pub(super) fn remove_with(
        &self,
        id: u32,
        missing: fn(String) -> VerbsError,
        destroy: impl FnOnce(T) -> Result<(), (T, ffi::Errno)>,
    ) -> VerbsResult<()> {
        let mut map = self.map.lock();
        let arc = map
            .remove(&id)
            .ok_or_else(|| missing(format!("no {} {id:#x}", self.what)))?;
        let obj = match Arc::try_unwrap(arc) {
            Ok(obj) => obj,
            Err(arc) => {
                map.insert(id, arc);
                return Err(VerbsError::Busy(format!("{} {id:#x} is in use", self.what)));
            }
        };
        destroy(obj).map_err(|(obj, e)| {
            map.insert(id, Arc::new(obj));
            error(e, &format!("destroying {} {id:#x}", self.what))
        })
    }

    /// Every object, for teardown.
    pub(super) fn drain(&self) -> Vec<Arc<T>> {
        self.map.lock().drain().map(|(_, v)| v).collect()
    }
}

/// The error of an unknown id where the argument is the caller's (EINVAL).
pub(super) fn inval(msg: String) -> VerbsError {
    VerbsError::InvalidArgument(msg)
}

/// The error of an unknown object (ENOENT-like NotFound).
pub(super) fn not_found(msg: String) -> VerbsError {
    VerbsError::NotFound(msg)
}
