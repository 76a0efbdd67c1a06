//! Every `unsafe` call into rdma-core's libibverbs (through `rdma-sys`), and nothing else.
//!
//! Each libibverbs object is held by one owner type here (`RawPd`, `RawQp`, ...) that is the
//! only way to reach its pointer; the owner is destroyed explicitly (`destroy(self)`, which
//! gives the owner back on failure so that a busy object is never lost or freed twice).
//! Work requests and scatter/gather arrays are built inside the post functions from data the
//! caller lends for the duration of the call: libibverbs copies WRs into the send/receive
//! queue before `ibv_post_*` returns, so nothing handed to the NIC points into memory that is
//! freed afterwards. The memory an SGE addresses is a registered region, which the safe
//! handles keep allocated until `ibv_dereg_mr` has returned.
//!
//! This file holds the owner types, the return-code helpers and the device list; the verbs
//! of each object are in the submodules: `context` (the device and its async events),
//! `pd` (what a PD creates: MRs, QPs, SRQs, AHs, MWs), `cq` (CQs and completion channels)
//! and `post` (QPs and SRQs: modify, query, post).
#![allow(unsafe_code)]

pub(crate) mod context;
pub(crate) mod cq;
pub(crate) mod layout;
mod pd;
pub(crate) mod post;

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::time::Duration;

use rdma_sys::*;

/// An errno value reported by libibverbs (or the kernel below it).
pub(crate) type Errno = i32;

fn last_errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}

/// A pointer returned by a libibverbs constructor, or the errno it set.
fn non_null<T>(p: *mut T) -> Result<NonNull<T>, Errno> {
    NonNull::new(p).ok_or_else(last_errno)
}

/// A return code of the "0 or errno" kind (most destroy / modify / post calls), also
/// accepting the "-1 and errno" kind some calls use.
fn rc(ret: i32) -> Result<(), Errno> {
    match ret {
        0 => Ok(()),
        -1 => Err(last_errno()),
        e if e < 0 => Err(-e),
        e => Err(e),
    }
}

/// Declares a libibverbs object owner: a non-null pointer that is `Send + Sync`.
macro_rules! owner {
    ($(#[$doc:meta])* $name:ident, $c:ty) => {
        $(#[$doc])*
        pub(crate) struct $name(NonNull<$c>);
        // SAFETY: libibverbs objects are not tied to the thread that created them, and every
        // verb on them is thread-safe (rdma-core's libibverbs(7): "all verbs are thread
        // safe"); the pointer is only dereferenced by libibverbs or read-only here.
        unsafe impl Send for $name {}
        // SAFETY: as above; shared references only lead to thread-safe verbs.
        unsafe impl Sync for $name {}
    };
}

/// One entry of `ibv_get_device_list`.
pub(crate) struct DeviceEntry {
    /// Kernel device name (e.g. `rxe0`, `mlx5_0`).
    pub name: String,
    /// Node GUID in host order.
    pub guid: u64,
}

/// Calls `f` with the device list while it is held (an empty one without kernel support).
fn with_device_list<R>(f: impl FnOnce(&[*mut ibv_device]) -> R) -> Result<R, Errno> {
    let mut num: i32 = 0;
    // SAFETY: `num` is a valid out-pointer; the list is freed below and never used after.
    let list = unsafe { ibv_get_device_list(&mut num) };
    if list.is_null() {
        return match last_errno() {
            // No kernel RDMA support (no uverbs): no devices, rather than a failure.
            libc::ENOSYS => Ok(f(&[])),
            e => Err(e),
        };
    }
    let len = usize::try_from(num).unwrap_or(0);
    // SAFETY: libibverbs returns an array of `num` device pointers (NULL-terminated).
    let devices = unsafe { std::slice::from_raw_parts(list, len) }.to_vec();
    let out = f(&devices);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; opened contexts keep
    // their own reference on their device.
    unsafe { ibv_free_device_list(list) };
    Ok(out)
}

/// Name and GUID of a listed device.
fn device_entry(dev: *mut ibv_device) -> DeviceEntry {
    // SAFETY: `dev` is an element of a live device list; the name is a NUL-terminated
    // string inside the device, copied out before the list is freed.
    let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let guid = u64::from_be(unsafe { ibv_get_device_guid(dev) });
    DeviceEntry { name, guid }
}

/// `ibv_get_device_list`: the RDMA devices rdma-core sees (empty when there are none).
pub(crate) fn list_devices() -> Result<Vec<DeviceEntry>, Errno> {
    with_device_list(|devs| devs.iter().map(|&d| device_entry(d)).collect())
}

/// Waits up to `timeout` (`None`: without limit) for `fd` to become readable.
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> Result<bool, Errno> {
    let timeout_ms: i32 = match timeout {
        None => -1,
        Some(t) => i32::try_from(t.as_millis().min(i32::MAX as u128)).unwrap_or(i32::MAX),
    };
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        match n {
            0 => return Ok(false),
            n if n > 0 => return Ok(true),
            _ if last_errno() == libc::EINTR => continue,
            _ => return Err(last_errno()),
        }
    }
}

/// Puts `fd` in non-blocking mode, so that `ibv_get_*_event` never blocks (waits happen in
/// [`wait_readable`], with a timeout).
fn set_nonblocking(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: fcntl on a descriptor the caller owns; no pointers involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(last_errno());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_errno());
    }
    Ok(())
}

owner!(
    /// An open device (`ibv_context`); closed on drop, after its objects (the owner of the
    /// tables destroys them first).
    RawContext,
    ibv_context
);

owner!(
    /// A protection domain (`ibv_pd`).
    RawPd,
    ibv_pd
);
owner!(
    /// A memory region (`ibv_mr`).
    RawMr,
    ibv_mr
);
owner!(
    /// A completion queue (`ibv_cq`).
    RawCq,
    ibv_cq
);
owner!(
    /// A completion channel (`ibv_comp_channel`).
    RawChannel,
    ibv_comp_channel
);
owner!(
    /// A queue pair (`ibv_qp`).
    RawQp,
    ibv_qp
);
owner!(
    /// A shared receive queue (`ibv_srq`).
    RawSrq,
    ibv_srq
);
owner!(
    /// An address handle (`ibv_ah`).
    RawAh,
    ibv_ah
);
owner!(
    /// A memory window (`ibv_mw`).
    RawMw,
    ibv_mw
);

/// `destroy(self)` for an owner: calls `$f` once; on failure the owner comes back.
macro_rules! destroy_with {
    ($name:ident, $f:ident) => {
        impl $name {
            /// Destroys the object; on failure (EBUSY ...) gives the owner back, still valid.
            pub(crate) fn destroy(self) -> Result<(), (Self, Errno)> {
                // SAFETY: `self` owns the object, which is destroyed at most once: on
                // success the owner is consumed, on failure it is returned unchanged.
                match rc(unsafe { $f(self.0.as_ptr()) }) {
                    Ok(()) => Ok(()),
                    Err(e) => Err((self, e)),
                }
            }
        }
    };
}
destroy_with!(RawPd, ibv_dealloc_pd);
destroy_with!(RawMr, ibv_dereg_mr);
destroy_with!(RawCq, ibv_destroy_cq);
destroy_with!(RawChannel, ibv_destroy_comp_channel);
destroy_with!(RawQp, ibv_destroy_qp);
destroy_with!(RawSrq, ibv_destroy_srq);
destroy_with!(RawAh, ibv_destroy_ah);
destroy_with!(RawMw, ibv_dealloc_mw);
