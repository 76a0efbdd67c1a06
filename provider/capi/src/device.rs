//! Devices and contexts: `ibv_get_device_list`, `ibv_open_device`, `ibv_close_device` and the
//! device, port, GID and P_Key queries.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::sync::OnceLock;

use parking_lot::Mutex;

use softverbs_emu::engine;

use crate::abi::*;
use crate::convert;
use crate::handle::{fail_null, live_context, set_errno, SvContext};

/// Devices handed out, by name: they live as long as the process (as in rdma-core, a
/// device pointer stays valid after `ibv_free_device_list`).
fn devices() -> &'static Mutex<HashMap<String, usize>> {
    static DEVICES: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn copy_str(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// The `ibv_device` of emulated device `name` (number `index` in the list), made once.
pub(crate) fn device_for(name: &str, index: usize) -> *mut IbvDevice {
    let mut map = devices().lock();
    if let Some(&p) = map.get(name) {
        return p as *mut IbvDevice;
    }
    let mut dev = Box::new(IbvDevice {
        ops: [0; 2],
        node_type: 1,      // IBV_NODE_CA
        transport_type: 0, // IBV_TRANSPORT_IB (RoCE reports IB)
        name: [0; SYSFS_NAME_MAX],
        dev_name: [0; SYSFS_NAME_MAX],
        dev_path: [0; SYSFS_PATH_MAX],
        ibdev_path: [0; SYSFS_PATH_MAX],
    });
    copy_str(&mut dev.name, name);
    copy_str(&mut dev.dev_name, &format!("uverbs{index}"));
    copy_str(
        &mut dev.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    copy_str(
        &mut dev.ibdev_path,
        &format!("/sys/class/infiniband/{name}"),
    );
    let p = Box::into_raw(dev);
    map.insert(name.to_string(), p as usize);
    p
}

/// The message for `SOFTVERBS_PROVIDER=hw` under the drop-in.
const HW_REFUSED: &str =
    "softverbs libibverbs.so.1: SOFTVERBS_PROVIDER=hw asks for real RDMA devices, \
but this library only serves emulated ones. Run the program without softverbs (without \
`softverbs run` and without this library on LD_LIBRARY_PATH) to use the system's rdma-core.";

/// True (after saying why on stderr, once) when the environment asks for hardware.
fn hardware_requested() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    if std::env::var("SOFTVERBS_PROVIDER").is_ok_and(|v| v.trim() == "hw") {
        SAID.call_once(|| eprintln!("{HW_REFUSED}"));
        return true;
    }
    false
}

/// `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_device_list(num_devices: *mut i32) -> *mut *mut IbvDevice {
    if hardware_requested() {
        return fail_null(libc::ENOSYS);
    }
    let list = match engine::device_list() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("softverbs libibverbs.so.1: {e}");
            return fail_null(e.errno());
        }
    };
    // SAFETY: calloc of (n + 1) pointers; freed by ibv_free_device_list with free().
    let array = unsafe { libc::calloc(list.len() + 1, std::mem::size_of::<usize>()) }
        as *mut *mut IbvDevice;
    if array.is_null() {
        return fail_null(libc::ENOMEM);
    }
    for (i, d) in list.iter().enumerate() {
        // SAFETY: i < list.len(), inside the allocation.
        unsafe { *array.add(i) = device_for(&d.name, i) };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int (or NULL, checked).
        unsafe { *num_devices = list.len() as i32 };
    }
    array
}

/// `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: list came from calloc in sv_ibv_get_device_list (or is NULL: free ignores it).
    unsafe { libc::free(list as *mut c_void) };
}

/// The device name of `device` (NULL for NULL).
pub(crate) unsafe fn device_name<'a>(device: *const IbvDevice) -> Option<&'a str> {
    if device.is_null() {
        return None;
    }
    // SAFETY: a device pointer the application got from us; its name is NUL-terminated.
    unsafe { CStr::from_ptr((*device).name.as_ptr()) }
        .to_str()
        .ok()
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
    if device.is_null() {
        return fail_null::<c_char>(libc::EINVAL);
    }
    // SAFETY: non-NULL device pointer from our list.
    unsafe { (*device).name.as_ptr() }
}

/// `ibv_get_device_index`: the position in the device list.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_device_index(device: *mut IbvDevice) -> i32 {
    // SAFETY: device is NULL or ours.
    let Some(name) = (unsafe { device_name(device) }) else {
        return -1;
    };
    match engine::device_list() {
        Ok(list) => list
            .iter()
            .position(|d| d.name == name)
            .map_or(-1, |i| i as i32),
        Err(_) => -1,
    }
}

/// `ibv_get_device_guid`: the node GUID in network order.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
    // SAFETY: device is NULL or ours.
    let Some(name) = (unsafe { device_name(device) }) else {
        set_errno(libc::EINVAL);
        return 0;
    };
    engine::device_list()
        .ok()
        .and_then(|l| l.into_iter().find(|d| d.name == name))
        .map_or(0, |d| d.node_guid().to_be())
}

/// `ibv_query_device`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_device(
    context: *mut IbvContext,
    attr: *mut IbvDeviceAttr,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    match device_attr(ctx) {
        Ok(a) => {
            // SAFETY: attr is a writable ibv_device_attr (non-NULL, checked).
            unsafe { attr.write(a) };
            0
        }
        Err(e) => e,
    }
}

fn device_attr(ctx: &SvContext) -> Result<IbvDeviceAttr, i32> {
    let d = ctx.backend().query_device().map_err(|e| e.errno())?;
    let pkeys = ctx
        .backend()
        .query_port(1)
        .map(|p| p.pkey_tbl_len)
        .unwrap_or(1);
    Ok(convert::device_attr(&d, pkeys))
}

/// `verbs_context.query_device_ex`: the basic attributes, the rest zero (no ODP, TSO,
/// RSS, tag matching ...), and `phys_port_cnt_ex`.
pub(crate) unsafe extern "C" fn sv_query_device_ex(
    context: *mut IbvContext,
    input: *const c_void,
    attr: *mut c_void,
    attr_size: usize,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || attr_size < std::mem::size_of::<IbvDeviceAttr>() {
        return libc::EINVAL;
    }
    // SAFETY: input is NULL or an ibv_query_device_ex_input (a u32 comp_mask).
    if !input.is_null() && unsafe { *(input as *const u32) } != 0 {
        return libc::EINVAL;
    }
    let a = match device_attr(ctx) {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: attr has attr_size writable bytes, at least an ibv_device_attr (checked).
    unsafe {
        std::ptr::write_bytes(attr as *mut u8, 0, attr_size);
        (attr as *mut IbvDeviceAttr).write(a);
        // device_cap_flags_ex repeats the basic flags in its low 32 bits; above them, what
        // the emulator executes of the kernel's extended flags, as rxe advertises them
        // (librpma uses native ATOMIC WRITE and FLUSH where a device has them).
        if attr_size >= DEVICE_ATTR_EX_CAP_FLAGS_EX + 8 {
            ((attr as *mut u8).add(DEVICE_ATTR_EX_CAP_FLAGS_EX) as *mut u64)
                .write_unaligned(a.device_cap_flags as u64 | EXTENDED_CAPS);
        }
        if attr_size >= DEVICE_ATTR_EX_SIZE {
            ((attr as *mut u8).add(DEVICE_ATTR_EX_PHYS_PORT_CNT) as *mut u32)
                .write_unaligned(a.phys_port_cnt as u32);
        }
    }
    0
}

/// IB_UVERBS_DEVICE_FLUSH_GLOBAL | _FLUSH_PERSISTENT | _ATOMIC_WRITE (the kernel's
/// ib_user_ioctl_verbs.h, bits 38-40 of device_cap_flags_ex; newer than Debian 12's
/// headers): the emulator executes FLUSH of both types and ATOMIC WRITE.
pub const EXTENDED_CAPS: u64 = (1 << 38) | (1 << 39) | (1 << 40);

/// `ibv_query_port` as exported (the old entry point; verbs.h calls the extended one).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_port(
    context: *mut IbvContext,
    port_num: u8,
    attr: *mut IbvPortAttr,
) -> i32 {
    // The exported symbol takes the older `_compat_ibv_port_attr`, which is the same
    // structure without its last fields (`link_layer` onward are the compat tail).
    // SAFETY: forwarded with the compat structure's size.
    unsafe { sv_query_port_ex(context, port_num, attr, COMPAT_PORT_ATTR_SIZE) }
}

/// `sizeof(struct _compat_ibv_port_attr)`: `ibv_port_attr` up to `link_layer` and `flags`
/// (without `port_cap_flags2`), padded: 48 bytes.
const COMPAT_PORT_ATTR_SIZE: usize = 48;

/// `verbs_context.query_port`: fills `port_attr_len` bytes (an older, shorter structure
/// gets its prefix).
pub(crate) unsafe extern "C" fn sv_query_port_ex(
    context: *mut IbvContext,
    port_num: u8,
    attr: *mut IbvPortAttr,
    port_attr_len: usize,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let p = match ctx.backend().query_port(port_num) {
        Ok(p) => convert::port_attr(&p),
        Err(e) => return e.errno(),
    };
    let n = port_attr_len.min(std::mem::size_of::<IbvPortAttr>());
    // SAFETY: attr has port_attr_len writable bytes; we write at most that many. A longer
    // structure (headers newer than 44 append `active_speed_ex`) gets its tail zeroed, as
    // libibverbs does: a zero `active_speed_ex` tells the program to read `active_speed`.
    unsafe {
        std::ptr::copy_nonoverlapping(&p as *const IbvPortAttr as *const u8, attr as *mut u8, n);
        std::ptr::write_bytes((attr as *mut u8).add(n), 0, port_attr_len - n);
    }
    0
}

/// `ibv_query_port_speed` (IBVERBS_1.16): the port's bandwidth in units of 100 Mb/s, its
/// lanes (`active_width`) times the data rate of one lane (`active_speed`).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_port_speed(
    context: *mut IbvContext,
    port_num: u32,
    speed: *mut u64,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    let Ok(port_num) = u8::try_from(port_num) else {
        return libc::EINVAL;
    };
    if speed.is_null() {
        return libc::EINVAL;
    }
    let p = match ctx.backend().query_port(port_num) {
        Ok(p) => convert::port_attr(&p),
        Err(e) => return e.errno(),
    };
    match port_speed_100mbps(p.active_width, p.active_speed) {
        Some(v) => {
            // SAFETY: writable, non-NULL.
            unsafe { speed.write(v) };
            0
        }
        None => libc::EINVAL,
    }
}

/// `enum ibv_port_width` × the data rate of `enum ibv_port_speed`'s lane, in 100 Mb/s.
fn port_speed_100mbps(width: u8, speed: u8) -> Option<u64> {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return None,
    };
    let lane = match speed {
        1 => 25,      // SDR 2.5 Gb/s
        2 => 50,      // DDR
        4 | 8 => 100, // QDR, FDR10
        16 => 140,    // FDR
        32 => 250,    // EDR
        64 => 500,    // HDR
        128 => 1000,  // NDR
        _ => return None,
    };
    Some(lanes * lane)
}

/// `ibv_query_gid`: an entry beyond the filled part of the table reads as zero.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_gid(
    context: *mut IbvContext,
    port_num: u8,
    index: i32,
    gid: *mut [u8; 16],
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if gid.is_null() || index < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let port = match ctx.backend().query_port(port_num) {
        Ok(p) => p,
        Err(e) => {
            set_errno(e.errno());
            return -1;
        }
    };
    if index as u32 >= port.gid_tbl_len {
        set_errno(libc::EINVAL);
        return -1;
    }
    let value = ctx
        .backend()
        .query_gid(port_num, index as u32)
        .map(|g| g.gid.0)
        .unwrap_or([0; 16]);
    // SAFETY: gid is a writable union ibv_gid (16 bytes), non-NULL.
    unsafe { gid.write(value) };
    0
}

fn gid_type_raw(t: softverbs_api::GidType) -> u32 {
    match t {
        softverbs_api::GidType::Ib => 0,
        softverbs_api::GidType::RoceV1 => 1,
        softverbs_api::GidType::RoceV2 => 2,
    }
}

/// `ibv_query_gid_ex` (exported as `_ibv_query_gid_ex`).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_gid_ex(
    context: *mut IbvContext,
    port_num: u32,
    gid_index: u32,
    entry: *mut IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if entry.is_null() || flags != 0 || entry_size < std::mem::size_of::<IbvGidEntry>() {
        return libc::EINVAL;
    }
    let Ok(port) = u8::try_from(port_num) else {
        return libc::EINVAL;
    };
    match ctx.backend().query_gid(port, gid_index) {
        Ok(g) => {
            // SAFETY: entry is writable and at least one ibv_gid_entry long (checked).
            unsafe {
                entry.write(IbvGidEntry {
                    gid: IbvGid(g.gid.0),
                    gid_index,
                    port_num,
                    gid_type: gid_type_raw(g.gid_type),
                    ndev_ifindex: 0,
                })
            };
            0
        }
        // An index beyond the table: no data there.
        Err(_) if ctx.backend().query_port(port).is_ok() => libc::ENODATA,
        Err(e) => e.errno(),
    }
}

/// `ibv_query_gid_table` (exported as `_ibv_query_gid_table`): every valid GID of every port.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_gid_table(
    context: *mut IbvContext,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return -(libc::EINVAL as isize);
    };
    if (entries.is_null() && max_entries > 0)
        || flags != 0
        || entry_size < std::mem::size_of::<IbvGidEntry>()
    {
        return -(libc::EINVAL as isize);
    }
    let ports = ctx.backend().query_device().map_or(1, |d| d.phys_port_cnt);
    let mut n = 0usize;
    for port in 1..=ports {
        let Ok(p) = ctx.backend().query_port(port) else {
            continue;
        };
        for index in 0..p.gid_tbl_len {
            let Ok(g) = ctx.backend().query_gid(port, index) else {
                continue;
            };
            if g.gid.is_zero() {
                continue;
            }
            if n >= max_entries {
                return -(libc::EINVAL as isize);
            }
            // SAFETY: n < max_entries, each entry entry_size bytes apart (checked large enough).
            unsafe {
                ((entries as *mut u8).add(n * entry_size) as *mut IbvGidEntry).write_unaligned(
                    IbvGidEntry {
                        gid: IbvGid(g.gid.0),
                        gid_index: index,
                        port_num: port as u32,
                        gid_type: gid_type_raw(g.gid_type),
                        ndev_ifindex: 0,
                    },
                )
            };
            n += 1;
        }
    }
    n as isize
}

/// `ibv_query_gid_type` (private node, used by perftest and pyverbs): the sysfs GID type,
/// IBV_GID_TYPE_SYSFS_ROCE_V2 (1) for every emulated GID.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_gid_type(
    context: *mut IbvContext,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    if gid_type.is_null() {
        return libc::EINVAL;
    }
    match ctx.backend().query_gid(port_num, index) {
        Ok(g) => {
            let raw = match g.gid_type {
                softverbs_api::GidType::RoceV2 => 1,
                _ => 0,
            };
            // SAFETY: writable, non-NULL.
            unsafe { gid_type.write(raw) };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_query_pkey`: the one entry, the default P_Key 0xffff.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_pkey(
    context: *mut IbvContext,
    port_num: u8,
    index: i32,
    pkey: *mut u16,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return libc::EINVAL;
    };
    let Ok(port) = ctx.backend().query_port(port_num) else {
        return libc::EINVAL;
    };
    if pkey.is_null() || index < 0 || index as u32 >= port.pkey_tbl_len as u32 {
        return libc::EINVAL;
    }
    // SAFETY: writable, non-NULL.
    unsafe { pkey.write(0xffff) };
    0
}

/// `ibv_get_pkey_index`: index 0 holds the default P_Key.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_pkey_index(
    context: *mut IbvContext,
    port_num: u8,
    pkey: u16,
) -> i32 {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return -libc::EINVAL;
    };
    if ctx.backend().query_port(port_num).is_err() {
        return -libc::EINVAL;
    }
    // Full and limited membership of the default partition both match entry 0.
    if pkey | 0x8000 == 0xffff || pkey.swap_bytes() | 0x8000 == 0xffff {
        0
    } else {
        -libc::ENOENT
    }
}
