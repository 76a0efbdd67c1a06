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
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
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

/// What an async event names, read out of `struct ibv_async_event` before it is acked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RawElement {
    /// A CQ, by the id stored in its `cq_context`.
    Cq(u32),
    /// A QP, by number.
    Qp(u32),
    /// An SRQ, by the id stored in its `srq_context`.
    Srq(u32),
    /// A port.
    Port(u8),
    /// The device.
    Device,
}

/// `struct ibv_async_event`, copied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawAsyncEvent {
    /// `enum ibv_event_type`.
    pub event_type: u32,
    /// What it is about.
    pub element: RawElement,
}

impl RawContext {
    /// `ibv_open_device` of the device called `name`; ENODEV if there is none.
    pub(crate) fn open(name: &str) -> Result<RawContext, Errno> {
        let opened = with_device_list(|devs| {
            let dev = devs
                .iter()
                .copied()
                .find(|&d| device_entry(d).name == name)
                .ok_or(libc::ENODEV)?;
            // SAFETY: `dev` is an element of the live list; the context holds its own
            // reference on the device, so the list may be freed afterwards.
            non_null(unsafe { ibv_open_device(dev) })
        })??;
        let ctx = RawContext(opened);
        // SAFETY: the context is live; async_fd is a plain int field.
        let fd = unsafe { (*ctx.0.as_ptr()).async_fd };
        set_nonblocking(fd)?;
        Ok(ctx)
    }

    fn ptr(&self) -> *mut ibv_context {
        self.0.as_ptr()
    }

    /// The kernel device name.
    pub(crate) fn name(&self) -> String {
        // SAFETY: a live context's `device` is valid for the context's lifetime.
        let dev = unsafe { (*self.ptr()).device };
        device_entry(dev).name
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> Result<ibv_device_attr, Errno> {
        // SAFETY: ibv_device_attr is plain integers and arrays: all-zero is valid.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        rc(unsafe { ibv_query_device(self.ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_port`.
    pub(crate) fn query_port(&self, port_num: u8) -> Result<ibv_port_attr, Errno> {
        // SAFETY: ibv_port_attr is plain integers: all-zero is valid.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer of the full (new) struct size.
        rc(unsafe { ___ibv_query_port(self.ptr(), port_num, &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_gid`: the raw 16 bytes.
    pub(crate) fn query_gid(&self, port_num: u8, index: i32) -> Result<[u8; 16], Errno> {
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: live context, valid out-pointer.
        rc(unsafe { ibv_query_gid(self.ptr(), port_num, index, &mut gid) })?;
        // SAFETY: every bit pattern of the union is a valid byte array.
        Ok(unsafe { gid.raw })
    }

    /// The async event descriptor (non-blocking).
    pub(crate) fn async_fd(&self) -> RawFd {
        // SAFETY: the context is live; async_fd is a plain int field.
        unsafe { (*self.ptr()).async_fd }
    }

    /// `ibv_get_async_event` + `ibv_ack_async_event` without waiting: `Ok(None)` when no event
    /// is pending. The event is acknowledged at once (the element is copied out first), so
    /// that destroying its object never waits for an acknowledgement.
    pub(crate) fn take_async_event(&self) -> Result<Option<RawAsyncEvent>, Errno> {
        let mut ev = std::mem::MaybeUninit::<ibv_async_event>::uninit();
        // SAFETY: live context; the descriptor is non-blocking; `ev` is an out-pointer.
        if unsafe { ibv_get_async_event(self.ptr(), ev.as_mut_ptr()) } != 0 {
            let e = last_errno();
            return if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let evp = ev.as_mut_ptr();
        // The type is read as the raw integer: an unknown value must not become an invalid
        // Rust enum (rdma-sys declares `ibv_event_type` as one).
        // SAFETY: ibv_get_async_event filled the event; the field is a 32-bit C enum.
        let event_type = unsafe { ptr::addr_of!((*evp).event_type).cast::<u32>().read() };
        // SAFETY: the union member that is valid depends on the type, as verbs.h defines;
        // the objects it points to stay alive until the event is acked below.
        let element = unsafe {
            let el = ptr::addr_of!((*evp).element);
            match event_type {
                // CQ_ERR
                0 => RawElement::Cq((*(*el).cq).cq_context as usize as u32),
                // QP events, QP_LAST_WQE_REACHED
                1..=7 | 16 => RawElement::Qp((*(*el).qp).qp_num),
                // SRQ_ERR, SRQ_LIMIT_REACHED
                14 | 15 => RawElement::Srq((*(*el).srq).srq_context as usize as u32),
                // port events, GID change
                9..=13 | 17 | 18 => RawElement::Port((*el).port_num as u8),
                _ => RawElement::Device,
            }
        };
        // SAFETY: acknowledges exactly the event just taken.
        unsafe { ibv_ack_async_event(evp) };
        Ok(Some(RawAsyncEvent {
            event_type,
            element,
        }))
    }

    /// `ibv_alloc_pd`.
    pub(crate) fn alloc_pd(&self) -> Result<RawPd, Errno> {
        // SAFETY: live context.
        non_null(unsafe { ibv_alloc_pd(self.ptr()) }).map(RawPd)
    }

    /// `ibv_create_comp_channel`, its descriptor made non-blocking.
    pub(crate) fn create_comp_channel(&self) -> Result<RawChannel, Errno> {
        // SAFETY: live context.
        let ch = RawChannel(non_null(unsafe { ibv_create_comp_channel(self.ptr()) })?);
        if let Err(e) = set_nonblocking(ch.fd()) {
            let _ = ch.destroy();
            return Err(e);
        }
        Ok(ch)
    }

    /// `ibv_create_cq` with `cq_context` = `id` (so events name the CQ by id).
    pub(crate) fn create_cq(
        &self,
        cqe: i32,
        id: u32,
        channel: Option<&RawChannel>,
    ) -> Result<RawCq, Errno> {
        let ch = channel.map_or(ptr::null_mut(), |c| c.0.as_ptr());
        // SAFETY: live context; the channel (if any) is live and outlives the CQ (the
        // tables refuse to destroy a channel with CQs on it; libibverbs too).
        let cq = unsafe { ibv_create_cq(self.ptr(), cqe, id as usize as *mut c_void, ch, 0) };
        non_null(cq).map(RawCq)
    }
}

impl Drop for RawContext {
    fn drop(&mut self) {
        // SAFETY: the context is closed once; every object of it was destroyed (or leaked
        // on failure, which the kernel reclaims on close) by the table owner before.
        unsafe { ibv_close_device(self.ptr()) };
    }
}

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

impl RawPd {
    /// `ibv_reg_mr` of `[addr, addr + length)` (iova = addr, as `ibv_reg_mr` does).
    ///
    /// The caller keeps the region allocated until the MR is destroyed (the contract of
    /// `VerbsContext::reg_mr`, which the safe `Mr` handle fulfils by owning the buffer).
    pub(crate) fn reg_mr(&self, addr: u64, length: usize, access: u32) -> Result<RawMr, Errno> {
        // SAFETY: live PD. The kernel pins and maps the range (or fails with EFAULT for an
        // unmapped one); it is not dereferenced here. Its lifetime is the caller's contract.
        let mr = unsafe {
            ibv_reg_mr_iova2(
                self.0.as_ptr(),
                addr as usize as *mut c_void,
                length,
                addr,
                access,
            )
        };
        non_null(mr).map(RawMr)
    }

    /// `ibv_create_qp`; `init.cap` is updated to what was granted.
    pub(crate) fn create_qp(
        &self,
        qp_type: u32,
        send_cq: &RawCq,
        recv_cq: &RawCq,
        srq: Option<&RawSrq>,
        cap: &mut ibv_qp_cap,
        sq_sig_all: bool,
    ) -> Result<RawQp, Errno> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.0.as_ptr(),
            recv_cq: recv_cq.0.as_ptr(),
            srq: srq.map_or(ptr::null_mut(), |s| s.0.as_ptr()),
            cap: *cap,
            qp_type,
            sq_sig_all: i32::from(sq_sig_all),
        };
        // SAFETY: live PD, CQs and SRQ (the tables keep them until the QP is destroyed;
        // libibverbs refuses their destruction while the QP uses them); valid attr pointer.
        let qp = non_null(unsafe { ibv_create_qp(self.0.as_ptr(), &mut init) })?;
        *cap = init.cap;
        Ok(RawQp(qp))
    }

    /// `ibv_create_srq` with `srq_context` = `id`; `attr` is updated to what was granted.
    pub(crate) fn create_srq(&self, id: u32, attr: &mut ibv_srq_attr) -> Result<RawSrq, Errno> {
        let mut init = ibv_srq_init_attr {
            srq_context: id as usize as *mut c_void,
            attr: *attr,
        };
        // SAFETY: live PD, valid attr pointer.
        let srq = non_null(unsafe { ibv_create_srq(self.0.as_ptr(), &mut init) })?;
        *attr = init.attr;
        Ok(RawSrq(srq))
    }

    /// `ibv_create_ah`.
    pub(crate) fn create_ah(&self, attr: &ibv_ah_attr) -> Result<RawAh, Errno> {
        let mut attr = *attr;
        // SAFETY: live PD, valid attr pointer (copied, as libibverbs may not modify it).
        non_null(unsafe { ibv_create_ah(self.0.as_ptr(), &mut attr) }).map(RawAh)
    }

    /// `ibv_alloc_mw`.
    pub(crate) fn alloc_mw(&self, mw_type: u32) -> Result<RawMw, Errno> {
        // SAFETY: live PD; rdma-sys's inline version sets errno when the op is missing.
        match unsafe { ibv_alloc_mw(self.0.as_ptr(), mw_type) } {
            Some(p) => non_null(p).map(RawMw),
            None => Err(last_errno()),
        }
    }
}

impl RawMr {
    /// Local and remote keys.
    pub(crate) fn keys(&self) -> (u32, u32) {
        // SAFETY: live MR; plain integer fields set at registration.
        unsafe { ((*self.0.as_ptr()).lkey, (*self.0.as_ptr()).rkey) }
    }
}

impl RawChannel {
    /// The channel's (non-blocking) descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: live channel; plain int field.
        unsafe { (*self.0.as_ptr()).fd }
    }

    /// `ibv_get_cq_event` without waiting: the `cq_context` (CQ id) of the next event, or
    /// `Ok(None)` if none is pending.
    pub(crate) fn take_cq_event(&self) -> Result<Option<u32>, Errno> {
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: live channel with a non-blocking descriptor; valid out-pointers.
        if unsafe { ibv_get_cq_event(self.0.as_ptr(), &mut cq, &mut cq_ctx) } != 0 {
            let e = last_errno();
            return if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(cq_ctx as usize as u32))
    }
}

/// `struct ibv_wc`, copied out of the CQ.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// imm_data (network order) or invalidated_rkey, by `wc_flags`.
    pub imm_or_inv: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

impl RawCq {
    /// Granted number of entries.
    pub(crate) fn cqe(&self) -> i32 {
        // SAFETY: live CQ; plain int field.
        unsafe { (*self.0.as_ptr()).cqe }
    }

    /// `ibv_poll_cq` of up to `max` completions.
    pub(crate) fn poll(&self, max: usize) -> Result<Vec<RawWc>, Errno> {
        let n = i32::try_from(max).unwrap_or(i32::MAX);
        // Zeroed rather than uninitialised: a provider that leaves a field it considers
        // undefined (e.g. on error completions) unwritten then reads as 0, not as garbage.
        // SAFETY: ibv_wc is integers and a union of integers: all-zero is a valid value.
        let mut wcs: Vec<ibv_wc> = (0..max).map(|_| unsafe { std::mem::zeroed() }).collect();
        // SAFETY: live CQ; `wcs` holds `max` >= `n` entries, of which the provider fills the
        // first `got`.
        let got = unsafe { ibv_poll_cq(self.0.as_ptr(), n, wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(if got == -1 { last_errno() } else { -got });
        }
        wcs.truncate(got as usize);
        Ok(wcs
            .iter()
            .map(|w| RawWc {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                vendor_err: w.vendor_err,
                byte_len: w.byte_len,
                // SAFETY: both union members are u32; any bit pattern is valid.
                imm_or_inv: unsafe { w.imm_data_invalidated_rkey_union.imm_data },
                qp_num: w.qp_num,
                src_qp: w.src_qp,
                wc_flags: w.wc_flags,
                pkey_index: w.pkey_index,
                slid: w.slid,
                sl: w.sl,
                dlid_path_bits: w.dlid_path_bits,
            })
            .collect())
    }

    /// `ibv_req_notify_cq`.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<(), Errno> {
        // SAFETY: live CQ.
        rc(unsafe { ibv_req_notify_cq(self.0.as_ptr(), i32::from(solicited_only)) })
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_events(&self, count: u32) {
        // SAFETY: live CQ; the caller acks only events it took.
        unsafe { ibv_ack_cq_events(self.0.as_ptr(), count) }
    }
}

impl RawSrq {
    /// `ibv_modify_srq`.
    pub(crate) fn modify(&self, attr: &ibv_srq_attr, mask: i32) -> Result<(), Errno> {
        let mut attr = *attr;
        // SAFETY: live SRQ, valid attr pointer.
        rc(unsafe { ibv_modify_srq(self.0.as_ptr(), &mut attr, mask) })
    }

    /// `ibv_query_srq`.
    pub(crate) fn query(&self) -> Result<ibv_srq_attr, Errno> {
        let mut attr = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: live SRQ, valid out-pointer.
        rc(unsafe { ibv_query_srq(self.0.as_ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_post_srq_recv`; on failure, the index of the first WR not posted.
    pub(crate) fn post_recv(&self, wrs: &[RecvDesc]) -> Result<(), (usize, Errno)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: live SRQ; `head` is a well-formed list valid for this call.
            unsafe { ibv_post_srq_recv(self.0.as_ptr(), head, bad) }
        })
    }
}

impl RawMw {
    /// The window's current rkey (updated by libibverbs when a bind is posted).
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: live MW; plain integer field.
        unsafe { (*self.0.as_ptr()).rkey }
    }
}

/// A receive WR lent to a post call.
pub(crate) struct RecvDesc {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
}

/// Where a memory-window bind points (`struct ibv_mw_bind_info`).
pub(crate) struct BindDesc<'a> {
    /// The MR (None with length 0: unbind).
    pub mr: Option<&'a RawMr>,
    pub addr: u64,
    pub length: u64,
    pub access: u32,
}

impl BindDesc<'_> {
    fn to_c(&self) -> ibv_mw_bind_info {
        ibv_mw_bind_info {
            mr: self.mr.map_or(ptr::null_mut(), |m| m.0.as_ptr()),
            addr: self.addr,
            length: self.length,
            mw_access_flags: self.access,
        }
    }
}

/// The opcode-specific part of a send WR.
pub(crate) enum SendKind<'a> {
    /// SEND / SEND_WITH_IMM / SEND_WITH_INV / LOCAL_INV and the like: no remote address.
    Plain,
    /// RDMA WRITE / READ (and their variants): remote address and key.
    Rdma { remote_addr: u64, rkey: u32 },
    /// Atomics.
    Atomic {
        remote_addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
    /// UD destination.
    Ud {
        ah: &'a RawAh,
        remote_qpn: u32,
        remote_qkey: u32,
    },
    /// BIND_MW (type 2 windows).
    BindMw {
        mw: &'a RawMw,
        rkey: u32,
        bind: BindDesc<'a>,
    },
}

/// A send WR lent to a post call.
pub(crate) struct SendDesc<'a> {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
    pub opcode: u32,
    pub send_flags: u32,
    /// imm_data in network order, or the rkey to invalidate.
    pub imm_or_inv: u32,
    pub kind: SendKind<'a>,
}

/// The index of `bad` in the list starting at `base` (0 if libibverbs did not say).
fn bad_index<T>(base: *const T, len: usize, bad: *const T) -> usize {
    if bad.is_null() {
        return 0;
    }
    let offset = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<T>().max(1);
    if offset < len {
        offset
    } else {
        0
    }
}

/// Links `wrs` into an `ibv_recv_wr` list and hands it to `post`.
fn post_recv_list(
    wrs: &[RecvDesc],
    post: impl FnOnce(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32,
) -> Result<(), (usize, Errno)> {
    if wrs.is_empty() {
        return Ok(());
    }
    // Built in place and never moved again while linked: `next` points into this Vec, and
    // the SGE pointers into the caller's `wrs`, all alive until this function returns
    // (libibverbs copies the WRs into the queue during the call).
    let mut list: Vec<ibv_recv_wr> = wrs
        .iter()
        .map(|w| ibv_recv_wr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: w.sges.as_ptr() as *mut ibv_sge,
            num_sge: w.sges.len() as i32,
        })
        .collect();
    let base = list.as_mut_ptr();
    for i in 0..list.len() - 1 {
        // SAFETY: i + 1 < len: a pointer to an element of the same allocation.
        list[i].next = unsafe { base.add(i + 1) };
    }
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    match rc(post(base, &mut bad)) {
        Ok(()) => Ok(()),
        Err(e) => Err((bad_index(base, list.len(), bad), e)),
    }
}

impl RawQp {
    /// QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: live QP; plain integer field.
        unsafe { (*self.0.as_ptr()).qp_num }
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify(&self, mut attr: ibv_qp_attr, mask: i32) -> Result<(), Errno> {
        // SAFETY: live QP, valid attr pointer.
        rc(unsafe { ibv_modify_qp(self.0.as_ptr(), &mut attr, mask) })
    }

    /// `ibv_query_qp` of every attribute in `mask`.
    pub(crate) fn query(&self, mask: i32) -> Result<ibv_qp_attr, Errno> {
        // SAFETY: both structs are integers, pointers and unions of integers: all-zero is
        // valid (null pointers included).
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live QP, valid out-pointers.
        rc(unsafe { ibv_query_qp(self.0.as_ptr(), &mut attr, mask, &mut init) })?;
        Ok(attr)
    }

    /// `ibv_post_recv`; on failure, the index of the first WR not posted.
    pub(crate) fn post_recv(&self, wrs: &[RecvDesc]) -> Result<(), (usize, Errno)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: live QP; `head` is a well-formed list valid for this call.
            unsafe { ibv_post_recv(self.0.as_ptr(), head, bad) }
        })
    }

    /// `ibv_post_send`; on failure, the index of the first WR not posted. Inline data is
    /// copied by libibverbs during the call; the other SGEs address registered memory.
    pub(crate) fn post_send(&self, wrs: &[SendDesc<'_>]) -> Result<(), (usize, Errno)> {
        if wrs.is_empty() {
            return Ok(());
        }
        // As in post_recv_list: built in place, linked, alive until the call returns.
        let mut list: Vec<ibv_send_wr> = wrs
            .iter()
            .map(|w| {
                let mut wr = ibv_send_wr {
                    wr_id: w.wr_id,
                    next: ptr::null_mut(),
                    sg_list: w.sges.as_ptr() as *mut ibv_sge,
                    num_sge: w.sges.len() as i32,
                    opcode: w.opcode,
                    send_flags: w.send_flags,
                    imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                        imm_data: w.imm_or_inv,
                    },
                    wr: wr_t {
                        atomic: atomic_t {
                            remote_addr: 0,
                            compare_add: 0,
                            swap: 0,
                            rkey: 0,
                        },
                    },
                    qp_type: qp_type_t {
                        xrc: xrc_t { remote_srqn: 0 },
                    },
                    bind_mw_tso_union: bind_mw_tso_union_t {
                        tso: tso_t {
                            hdr: ptr::null_mut(),
                            hdr_sz: 0,
                            mss: 0,
                        },
                    },
                };
                match &w.kind {
                    SendKind::Plain => {}
                    SendKind::Rdma { remote_addr, rkey } => {
                        wr.wr = wr_t {
                            rdma: rdma_t {
                                remote_addr: *remote_addr,
                                rkey: *rkey,
                            },
                        }
                    }
                    SendKind::Atomic {
                        remote_addr,
                        rkey,
                        compare_add,
                        swap,
                    } => {
                        wr.wr = wr_t {
                            atomic: atomic_t {
                                remote_addr: *remote_addr,
                                compare_add: *compare_add,
                                swap: *swap,
                                rkey: *rkey,
                            },
                        }
                    }
                    SendKind::Ud {
                        ah,
                        remote_qpn,
                        remote_qkey,
                    } => {
                        wr.wr = wr_t {
                            ud: ud_t {
                                ah: ah.0.as_ptr(),
                                remote_qpn: *remote_qpn,
                                remote_qkey: *remote_qkey,
                            },
                        }
                    }
                    SendKind::BindMw { mw, rkey, bind } => {
                        wr.bind_mw_tso_union = bind_mw_tso_union_t {
                            bind_mw: bind_mw_t {
                                mw: mw.0.as_ptr(),
                                rkey: *rkey,
                                bind_info: bind.to_c(),
                            },
                        }
                    }
                }
                wr
            })
            .collect();
        let base = list.as_mut_ptr();
        for i in 0..list.len() - 1 {
            // SAFETY: i + 1 < len: a pointer to an element of the same allocation.
            list[i].next = unsafe { base.add(i + 1) };
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; the list, its SGE arrays, AHs, MWs and MRs all outlive the call
        // (borrowed from `wrs` and the tables); libibverbs copies what it needs.
        match rc(unsafe { ibv_post_send(self.0.as_ptr(), base, &mut bad) }) {
            Ok(()) => Ok(()),
            Err(e) => Err((bad_index(base, list.len(), bad), e)),
        }
    }

    /// `ibv_bind_mw` of type 1 window `mw`; returns its new rkey.
    pub(crate) fn bind_mw(
        &self,
        mw: &RawMw,
        wr_id: u64,
        send_flags: u32,
        bind: &BindDesc<'_>,
    ) -> Result<u32, Errno> {
        let mut b = ibv_mw_bind {
            wr_id,
            send_flags,
            bind_info: bind.to_c(),
        };
        // SAFETY: live QP, MW and MR (borrowed from the tables for the call); valid bind
        // pointer. libibverbs posts a bind WR and stores the new rkey in the MW.
        rc(unsafe { ibv_bind_mw(self.0.as_ptr(), mw.0.as_ptr(), &mut b) })?;
        Ok(mw.rkey())
    }
}

/// The 16 bytes of a GID.
pub(crate) fn gid_bytes(gid: &ibv_gid) -> [u8; 16] {
    // SAFETY: both union members are plain bytes/integers of the same 16 bytes; any bit
    // pattern is a valid byte array.
    unsafe { gid.raw }
}
