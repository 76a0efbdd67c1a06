//! The open device: `RawContext`'s queries, its async events, and the objects created
//! directly on it (PDs, completion channels, CQs).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr;

use rdma_sys::*;

use super::{
    device_entry, last_errno, non_null, rc, set_nonblocking, with_device_list, Errno, RawChannel,
    RawContext, RawCq, RawPd,
};

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
