//! The verbs that need no device: strings of enums, rate conversions, fork support, sysfs
//! helpers, and the stubs behind every unsupported symbol (see symbols/).

use std::os::raw::c_char;

use softverbs_api::WcStatus;

use crate::handle::{fail_null, set_errno};

/// Every unsupported `int`-returning symbol: EOPNOTSUPP, also in errno.
#[no_mangle]
pub extern "C" fn sv_stub_errno() -> i32 {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// Every unsupported pointer-returning symbol: NULL with errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_stub_null() -> *mut std::ffi::c_void {
    fail_null(libc::EOPNOTSUPP)
}

/// Every unsupported symbol that fails with -1 and errno (as `ibv_dm_export_dmabuf_fd`
/// without device memory): -1, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_stub_fail() -> i32 {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Every unsupported symbol that returns an `ssize_t` or `off_t` -1 with errno (rsocket's
/// rread, rsend, riomap ...): all 64 bits of -1, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_stub_fail_long() -> isize {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Every unsupported `void` symbol whose rdma-core fallback does nothing (freeing what the
/// failing allocator never handed out).
#[no_mangle]
pub extern "C" fn sv_stub_void() {}

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn sv_ibv_wc_status_str(status: u32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        WcStatus::ALL
            .iter()
            .map(|s| std::ffi::CString::new(s.as_str()).expect("no NUL"))
            .collect()
    });
    match names.get(status as usize) {
        Some(s) => s.as_ptr(),
        None => cstr!("unknown"),
    }
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn sv_ibv_event_type_str(event: u32) -> *const c_char {
    match event {
        0 => cstr!("CQ error"),
        1 => cstr!("local work queue catastrophic error"),
        2 => cstr!("invalid request local work queue error"),
        3 => cstr!("local access violation work queue error"),
        4 => cstr!("communication established"),
        5 => cstr!("send queue drained"),
        6 => cstr!("path migrated"),
        7 => cstr!("path migration request error"),
        8 => cstr!("local catastrophic error"),
        9 => cstr!("port active"),
        10 => cstr!("port error"),
        11 => cstr!("LID change"),
        12 => cstr!("P_Key change"),
        13 => cstr!("SM change"),
        14 => cstr!("SRQ catastrophic error"),
        15 => cstr!("SRQ limit reached"),
        16 => cstr!("last WQE reached"),
        17 => cstr!("client reregistration"),
        18 => cstr!("GID table change"),
        19 => cstr!("WQ fatal"),
        20 => cstr!("Device link speed change"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_wr_opcode_str` (IBVERBS_PRIVATE_34 since rdma-core 49, and every later private
/// node): the WR opcode's name; "unknown" for values `enum ibv_wr_opcode` does not name.
#[no_mangle]
pub extern "C" fn sv_ibv_wr_opcode_str(opcode: u32) -> *const c_char {
    match opcode {
        0 => cstr!("rdma-write"),
        1 => cstr!("rdma-write-with-imm"),
        2 => cstr!("send"),
        3 => cstr!("send-with-imm"),
        4 => cstr!("rdma-read"),
        5 => cstr!("atomic-cmp-and-swp"),
        6 => cstr!("atomic-fetch-and-add"),
        7 => cstr!("local-inv"),
        8 => cstr!("bind-mw"),
        9 => cstr!("send-with-inv"),
        10 => cstr!("tso"),
        11 => cstr!("driver1"),
        14 => cstr!("flush"),
        15 => cstr!("atomic-write"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn sv_ibv_node_type_str(node_type: i32) -> *const c_char {
    match node_type {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        5 => cstr!("usNIC"),
        6 => cstr!("usNIC UDP"),
        7 => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn sv_ibv_port_state_str(state: u32) -> *const c_char {
    match state {
        0 => cstr!("PORT_NOP"),
        1 => cstr!("PORT_DOWN"),
        2 => cstr!("PORT_INIT"),
        3 => cstr!("PORT_ARMED"),
        4 => cstr!("PORT_ACTIVE"),
        5 => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

/// `enum ibv_rate` values with their multiple of 2.5 Gb/s and their Mb/s.
const RATES: [(i32, i32, i32); 21] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (7, 12, 30000),
    (8, 16, 40000),
    (9, 24, 60000),
    (10, 32, 80000),
    (4, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 120, 300000),
    (20, 20, 50000),
    (21, 160, 400000),
    (22, 240, 600000),
];

/// `ibv_rate_to_mult`.
#[no_mangle]
pub extern "C" fn sv_ibv_rate_to_mult(rate: i32) -> i32 {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn sv_mult_to_ibv_rate(mult: i32) -> i32 {
    RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`.
#[no_mangle]
pub extern "C" fn sv_ibv_rate_to_mbps(rate: i32) -> i32 {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn sv_mbps_to_ibv_rate(mbps: i32) -> i32 {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_fork_init`: nothing to do; the emulator pins no pages, so a child's copy-on-write
/// memory is never accessed behind its back.
#[no_mangle]
pub extern "C" fn sv_ibv_fork_init() -> i32 {
    0
}

/// `ibv_is_fork_initialized`: IBV_FORK_UNNEEDED.
#[no_mangle]
pub extern "C" fn sv_ibv_is_fork_initialized() -> u32 {
    2
}

/// `ibv_dontfork_range`: nothing to protect (see `ibv_fork_init`).
#[no_mangle]
pub extern "C" fn sv_ibv_dontfork_range(_base: *mut std::ffi::c_void, _size: usize) -> i32 {
    0
}

/// `ibv_dofork_range`.
#[no_mangle]
pub extern "C" fn sv_ibv_dofork_range(_base: *mut std::ffi::c_void, _size: usize) -> i32 {
    0
}

/// `ibv_get_sysfs_path`: emulated devices have no sysfs entries; the conventional root.
#[no_mangle]
pub extern "C" fn sv_ibv_get_sysfs_path() -> *const c_char {
    cstr!("/sys")
}

/// `ibv_read_sysfs_file`: emulated devices have no sysfs files (-1, ENOENT).
#[no_mangle]
pub extern "C" fn sv_ibv_read_sysfs_file() -> i32 {
    set_errno(libc::ENOENT);
    -1
}

/// `ibv_read_ibdev_sysfs_file` (private node): as `ibv_read_sysfs_file`.
#[no_mangle]
pub extern "C" fn sv_ibv_read_ibdev_sysfs_file() -> i32 {
    set_errno(libc::ENOENT);
    -1
}
