//! The hardware passthrough (cargo feature `hw`): the verbs contract over rdma-core's
//! libibverbs through `rdma-sys`, so that a program tested on the emulator drives a real
//! RDMA device (or kernel rxe) unchanged.
//!
//! `ffi` holds every `unsafe` call; the other modules translate between the contract types
//! and libibverbs values in safe code.

mod attr;
mod context;
mod convert;
mod ffi;
mod gid;
mod table;
mod wr;

pub use context::HwContext;
use softverbs_api::{DeviceInfo, VerbsResult};

/// The rdma-core devices (`ibv_get_device_list`), each tagged as the `hw` backend. An
/// rdma-core without any device (or without kernel support) gives an empty list.
pub fn devices() -> VerbsResult<Vec<DeviceInfo>> {
    match ffi::list_devices() {
        Ok(list) => Ok(list
            .into_iter()
            .map(|d| DeviceInfo {
                name: d.name,
                guid: d.guid,
                backend: "hw",
            })
            .collect()),
        Err(libc::ENODEV) | Err(libc::ENOENT) => Ok(Vec::new()),
        Err(e) => Err(convert::error(e, "ibv_get_device_list")),
    }
}
