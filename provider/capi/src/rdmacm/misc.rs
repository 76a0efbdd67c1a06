//! The calls that need no connection: `rdma_event_str`, `rdma_set_option`,
//! `rdma_get_devices` / `rdma_free_devices`, and the ECE calls (the emulated devices have
//! no enhanced connection establishment options: EOPNOTSUPP, as on devices without them).

use std::ffi::c_void;
use std::os::raw::c_char;

use super::abi::*;
use super::conn::sv_rdma_reject;
use super::devices;
use super::shared::live_id;
use crate::abi::IbvContext;

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// `rdma_event_str`: the event's name as librdmacm spells it.
#[no_mangle]
pub extern "C" fn sv_rdma_event_str(event: u32) -> *const c_char {
    match event {
        event::ADDR_RESOLVED => cstr!("RDMA_CM_EVENT_ADDR_RESOLVED"),
        event::ADDR_ERROR => cstr!("RDMA_CM_EVENT_ADDR_ERROR"),
        event::ROUTE_RESOLVED => cstr!("RDMA_CM_EVENT_ROUTE_RESOLVED"),
        event::ROUTE_ERROR => cstr!("RDMA_CM_EVENT_ROUTE_ERROR"),
        event::CONNECT_REQUEST => cstr!("RDMA_CM_EVENT_CONNECT_REQUEST"),
        event::CONNECT_RESPONSE => cstr!("RDMA_CM_EVENT_CONNECT_RESPONSE"),
        event::CONNECT_ERROR => cstr!("RDMA_CM_EVENT_CONNECT_ERROR"),
        event::UNREACHABLE => cstr!("RDMA_CM_EVENT_UNREACHABLE"),
        event::REJECTED => cstr!("RDMA_CM_EVENT_REJECTED"),
        event::ESTABLISHED => cstr!("RDMA_CM_EVENT_ESTABLISHED"),
        event::DISCONNECTED => cstr!("RDMA_CM_EVENT_DISCONNECTED"),
        event::DEVICE_REMOVAL => cstr!("RDMA_CM_EVENT_DEVICE_REMOVAL"),
        event::MULTICAST_JOIN => cstr!("RDMA_CM_EVENT_MULTICAST_JOIN"),
        event::MULTICAST_ERROR => cstr!("RDMA_CM_EVENT_MULTICAST_ERROR"),
        event::ADDR_CHANGE => cstr!("RDMA_CM_EVENT_ADDR_CHANGE"),
        event::TIMEWAIT_EXIT => cstr!("RDMA_CM_EVENT_TIMEWAIT_EXIT"),
        _ => cstr!("UNKNOWN EVENT"),
    }
}

/// RDMA_OPTION_ID and its options; RDMA_OPTION_IB's path option.
const OPTION_ID: i32 = 0;
const OPTION_IB: i32 = 1;
const ID_TOS: i32 = 0;
const ID_REUSEADDR: i32 = 1;
const ID_AFONLY: i32 = 2;
const ID_ACK_TIMEOUT: i32 = 3;
const IB_PATH: i32 = 1;

/// `rdma_set_option`: the kernel's options with its length checks (EINVAL for a wrong
/// length, ENOSYS for an unknown option). The ACK timeout reaches the QP; TOS, REUSEADDR
/// and AFONLY are accepted (no use on emulated paths; ports are per device here); IB path
/// records are for IB, not RoCE: EOPNOTSUPP.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_set_option(
    id: *mut RdmaCmId,
    level: i32,
    optname: i32,
    optval: *mut c_void,
    optlen: usize,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    if optval.is_null() {
        return super::fail(libc::EINVAL);
    }
    let read_u8 = || {
        // SAFETY: optval is non-null and optlen (checked to be 1 by the caller) readable.
        unsafe { *(optval as *const u8) }
    };
    match (level, optname) {
        (OPTION_ID, ID_TOS) | (OPTION_ID, ID_ACK_TIMEOUT) if optlen != 1 => {
            super::fail(libc::EINVAL)
        }
        // The type of service has no use on emulated paths: accepted.
        (OPTION_ID, ID_TOS) => 0,
        (OPTION_ID, ID_ACK_TIMEOUT) => {
            inner.state.lock().ack_timeout = Some(read_u8().min(31));
            0
        }
        (OPTION_ID, ID_REUSEADDR) | (OPTION_ID, ID_AFONLY) => {
            if optlen != std::mem::size_of::<i32>() {
                super::fail(libc::EINVAL)
            } else {
                0
            }
        }
        (OPTION_IB, IB_PATH) => super::fail(libc::EOPNOTSUPP),
        _ => super::fail(libc::ENOSYS),
    }
}

/// `rdma_get_devices`: the contexts of every emulated device (opened by the library, as
/// every id on them uses), NULL-terminated, in a malloc'd array.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_devices(num_devices: *mut i32) -> *mut *mut IbvContext {
    let list = match devices::all() {
        Ok(l) => l,
        Err(e) => {
            if !num_devices.is_null() {
                // SAFETY: the caller's writable int.
                unsafe { *num_devices = 0 };
            }
            crate::handle::set_errno(e);
            return std::ptr::null_mut();
        }
    };
    // SAFETY: calloc of n + 1 pointers, freed by rdma_free_devices with free().
    let array = unsafe { libc::calloc(list.len() + 1, std::mem::size_of::<usize>()) }
        as *mut *mut IbvContext;
    if array.is_null() {
        crate::handle::set_errno(libc::ENOMEM);
        return array;
    }
    for (i, d) in list.iter().enumerate() {
        // SAFETY: i < len, inside the allocation.
        unsafe { *array.add(i) = d.verbs };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller's writable int.
        unsafe { *num_devices = list.len() as i32 };
    }
    array
}

/// `rdma_free_devices`: frees the array (the contexts stay open, as in librdmacm).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_free_devices(list: *mut *mut IbvContext) {
    // SAFETY: an array rdma_get_devices allocated with calloc (or NULL).
    unsafe { libc::free(list as *mut c_void) };
}

/// `rdma_set_local_ece`: no ECE options on emulated devices.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_set_local_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> i32 {
    // SAFETY: checked live inside.
    if ece.is_null() || unsafe { live_id(id) }.is_none() {
        return super::fail(libc::EINVAL);
    }
    super::fail(libc::EOPNOTSUPP)
}

/// `rdma_get_remote_ece`: no ECE options on emulated devices.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_remote_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> i32 {
    // SAFETY: checked live inside.
    if ece.is_null() || unsafe { live_id(id) }.is_none() {
        return super::fail(libc::EINVAL);
    }
    super::fail(libc::EOPNOTSUPP)
}

/// `rdma_reject_ece`: a reject (the ECE reason only differs in the REJ's reason code,
/// which carries no options here).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_reject_ece(
    id: *mut RdmaCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> i32 {
    // SAFETY: forwarded as given.
    unsafe { sv_rdma_reject(id, private_data, private_data_len) }
}
