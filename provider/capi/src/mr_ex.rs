//! The extensible registration of rdma-core 59 onward: `ibv_reg_mr_ex` (IBVERBS_1.15), and
//! the library-allocated buffers of 64 onward that it can register: `ibv_alloc_buf`,
//! `ibv_reg_buf_mr`, `ibv_free_buf` (IBVERBS_1.17), `ibv_export_buf_dmabuf_fd` (1.18).
//! The emulator has no dma-buf and no DMA handles: what needs them fails as libibverbs
//! fails it for a provider without them (EOPNOTSUPP), the rest registers memory in place
//! as `ibv_reg_mr` does.

use std::ffi::c_void;

use crate::abi::{IbvMr, IbvMrInitAttr, IbvPd};
use crate::handle::{fail_null, is_live, live_pd, register, set_errno, unregister, Kind};
use crate::mr::register_mr;

/// IBV_REG_MR_MASK_IOVA.
const MASK_IOVA: u64 = 1;
/// IBV_REG_MR_MASK_ADDR.
const MASK_ADDR: u64 = 1 << 1;
/// IBV_REG_MR_MASK_FD (a dma-buf fd).
const MASK_FD: u64 = 1 << 2;
/// IBV_REG_MR_MASK_FD_OFFSET.
const MASK_FD_OFFSET: u64 = 1 << 3;
/// IBV_REG_MR_MASK_BUF (a handle of `ibv_alloc_buf`).
const MASK_BUF: u64 = 1 << 5;

/// A buffer of `ibv_alloc_buf`: page-aligned memory of the library's, which the
/// application registers and frees through the handle. Opaque to applications (verbs.h
/// only declares `struct ibv_buf`); laid out as rdma-core's driver.h defines it all the
/// same.
#[repr(C)]
struct SvBuf {
    addr: *mut c_void,
    size: usize,
    pd: *mut IbvPd,
    /// Always -1: no buffer here is backed by a dma-buf.
    dmabuf_fd: i32,
}

/// `ibv_reg_mr_ex`: the fields `comp_mask` names. An address range (ADDR, with IOVA equal
/// to the address or absent) or an `ibv_alloc_buf` range (BUF + ADDR) is registered;
/// a dma-buf (FD), a DMA handle and unknown bits get EOPNOTSUPP; contradictory masks and
/// ranges outside the buffer EINVAL, as libibverbs answers them.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr_ex(
    pd: *mut IbvPd,
    attr: *const IbvMrInitAttr,
) -> *mut IbvMr {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL; each field is read on its own (no reference to the whole), and
    // those after `comp_mask` only when their bit is set, so the shorter structure of
    // release 59 (without `buf`) is never read beyond its end.
    let (length, access, mask) = unsafe { ((*attr).length, (*attr).access, (*attr).comp_mask) };
    let field = |bit: u64| mask & bit != 0;
    // SAFETY: as above.
    let iova = unsafe {
        if field(MASK_IOVA) {
            (*attr).iova
        } else {
            0
        }
    };
    // SAFETY: as above.
    let addr = unsafe {
        if field(MASK_ADDR) {
            (*attr).addr
        } else {
            std::ptr::null_mut()
        }
    };
    // SAFETY: as above.
    let buf = unsafe {
        if field(MASK_BUF) {
            (*attr).buf
        } else {
            std::ptr::null_mut()
        }
    };
    if field(MASK_BUF) {
        // SAFETY: checked against the live table before any read.
        if let Err(e) = unsafe { check_in_buf(pd, buf, mask, addr, length) } {
            return fail_null(e);
        }
    }
    let mask = mask & !MASK_BUF;
    if mask & !(MASK_IOVA | MASK_ADDR | MASK_FD | MASK_FD_OFFSET) != 0 {
        // A DMA handle or a bit of a later release.
        return fail_null(libc::EOPNOTSUPP);
    }
    if field(MASK_FD) {
        if field(MASK_ADDR) || !field(MASK_FD_OFFSET) || !field(MASK_IOVA) {
            return fail_null(libc::EINVAL);
        }
        // ibv_reg_dmabuf_mr: no dma-buf importer in the emulator.
        return fail_null(libc::EOPNOTSUPP);
    }
    if !field(MASK_ADDR) || field(MASK_FD_OFFSET) {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: register_mr checks pd against the live table and the range's arguments.
    unsafe {
        register_mr(
            pd,
            addr,
            length,
            if field(MASK_IOVA) { iova } else { addr as u64 },
            access as u32,
        )
    }
}

/// The checks of an `ibv_alloc_buf` registration: a live buffer of the same PD, with ADDR
/// (and no fd), and the range inside the buffer.
///
/// # Safety
/// `buf` is any pointer: it is read only once found in the live table.
unsafe fn check_in_buf(
    pd: *mut IbvPd,
    buf: *mut c_void,
    mask: u64,
    addr: *mut c_void,
    length: usize,
) -> Result<(), i32> {
    if !is_live(buf, Kind::Buf) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live SvBuf of ours.
    let b = unsafe { &*(buf as *const SvBuf) };
    if b.pd != pd || mask & MASK_ADDR == 0 || mask & (MASK_FD | MASK_FD_OFFSET) != 0 {
        return Err(libc::EINVAL);
    }
    let offset = (addr as usize)
        .checked_sub(b.addr as usize)
        .ok_or(libc::EINVAL)?;
    if offset > b.size || length > b.size - offset {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `ibv_alloc_buf`: `size` bytes of page-aligned memory (what libibverbs allocates for a
/// provider without its own allocator), and its handle in `*buf`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_alloc_buf(
    pd: *mut IbvPd,
    size: usize,
    buf: *mut *mut c_void,
) -> *mut c_void {
    // SAFETY: checked live.
    if unsafe { live_pd(pd) }.is_none() || buf.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let mut memory: *mut c_void = std::ptr::null_mut();
    // SAFETY: memory is a valid out-pointer; page is a power of two multiple of a pointer.
    let rc = unsafe { libc::posix_memalign(&mut memory, page, size) };
    if rc != 0 {
        return fail_null(rc);
    }
    let handle = Box::into_raw(Box::new(SvBuf {
        addr: memory,
        size,
        pd,
        dmabuf_fd: -1,
    }));
    register(handle, Kind::Buf);
    // SAFETY: buf is a writable pointer slot (non-NULL, checked).
    unsafe { buf.write(handle as *mut c_void) };
    memory
}

/// `ibv_free_buf`: frees the buffer and its handle; a handle that is not live is ignored
/// (the function returns nothing to report it with).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_free_buf(buf: *mut c_void) {
    if !unregister(buf, Kind::Buf) {
        return;
    }
    // SAFETY: made by Box::into_raw in sv_ibv_alloc_buf; unregistered: freed once.
    let b = unsafe { Box::from_raw(buf as *mut SvBuf) };
    // SAFETY: allocated by posix_memalign, freed once with its handle.
    unsafe { libc::free(b.addr) };
}

/// `ibv_reg_buf_mr`: `ibv_reg_mr_ex` of `[addr, addr + length)` inside the buffer.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_buf_mr(
    pd: *mut IbvPd,
    buf: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: i32,
) -> *mut IbvMr {
    let attr = IbvMrInitAttr {
        length,
        access,
        comp_mask: MASK_BUF | MASK_ADDR,
        iova: 0,
        addr,
        fd: -1,
        fd_offset: 0,
        dmah: std::ptr::null_mut(),
        buf,
    };
    // SAFETY: a whole ibv_mr_init_attr; the callee checks pd and buf.
    unsafe { sv_ibv_reg_mr_ex(pd, &attr) }
}

/// `ibv_export_buf_dmabuf_fd`: no buffer here is backed by a dma-buf, so -1 with errno
/// ENODATA, as libibverbs answers for such a buffer (EINVAL for a handle that is not live).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_export_buf_dmabuf_fd(buf: *mut c_void) -> i32 {
    set_errno(if is_live(buf, Kind::Buf) {
        libc::ENODATA
    } else {
        libc::EINVAL
    });
    -1
}
