//! The backend traits: what a verbs implementation (the emulator, the hardware passthrough)
//! provides. They work on raw regions (address + length, as `ibv_reg_mr` does) and plain WR
//! structs so that the passthrough and a C ABI can sit on them; ownership and lifetimes are
//! enforced one layer up, by the safe handles of the `softverbs` crate.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::device::{DeviceAttr, Gid, GidEntry, PortAttr};
use crate::error::{VerbsError, VerbsResult};
use crate::event::AsyncEvent;
use crate::flags::AccessFlags;
use crate::mw::{MwBind, MwType};
use crate::qp::AhAttr;
use crate::qp::{QpAttr, QpAttrMask, QpInitAttr};
use crate::srq::{SrqAttr, SrqAttrMask};
use crate::wc::WorkCompletion;
use crate::wr::{RecvWr, SendWr};

/// A post call failed at WR number `index` of the list (what libibverbs returns as `bad_wr`);
/// the WRs before it were posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} rejected: {error}")]
pub struct PostError {
    /// Index of the first WR that was not posted.
    pub index: usize,
    /// Why.
    pub error: VerbsError,
}

/// A failed post as a plain [`VerbsError`], so that `qp.post_send(&wrs)?` works in a
/// function returning [`crate::VerbsResult`]: the same kind and errno, the message saying
/// which WR of the list failed (the WRs before it were posted).
impl From<PostError> for VerbsError {
    fn from(e: PostError) -> VerbsError {
        let at = |m: String| format!("work request {} of the list: {m}", e.index);
        match e.error {
            VerbsError::InvalidArgument(m) => VerbsError::InvalidArgument(at(m)),
            VerbsError::OutOfResources(m) => VerbsError::OutOfResources(at(m)),
            VerbsError::PermissionDenied(m) => VerbsError::PermissionDenied(at(m)),
            VerbsError::NotFound(m) => VerbsError::NotFound(at(m)),
            VerbsError::Busy(m) => VerbsError::Busy(at(m)),
            VerbsError::NotSupported(m) => VerbsError::NotSupported(at(m)),
            VerbsError::Io { errno, message } => VerbsError::Io {
                errno,
                message: at(message),
            },
        }
    }
}

/// What a device list entry says about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (e.g. `softrxe0`).
    pub name: String,
    /// Node GUID.
    pub guid: u64,
    /// Which backend serves it (`emu` or `hw`).
    pub backend: &'static str,
}

/// Keys of a registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key (for SGEs).
    pub lkey: u32,
    /// Remote key (for peers' RDMA and atomics).
    pub rkey: u32,
}

/// An open device: the verbs calls, on backend ids (PD, CQ and QP numbers, MR lkeys).
///
/// Ids are only meaningful to the context that issued them. Every method is safe to call
/// from any thread.
pub trait VerbsContext: Send + Sync {
    /// Device name.
    fn device_name(&self) -> String;
    /// `ibv_query_device`.
    fn query_device(&self) -> VerbsResult<DeviceAttr>;
    /// `ibv_query_port`.
    fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr>;
    /// `ibv_query_gid_ex`: one GID table entry.
    fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry>;
    /// `ibv_alloc_pd`: returns the PD id.
    fn alloc_pd(&self) -> VerbsResult<u32>;
    /// `ibv_dealloc_pd`: EBUSY while MRs or QPs use it.
    fn dealloc_pd(&self, pd: u32) -> VerbsResult<()>;
    /// `ibv_reg_mr` over `[addr, addr + length)`.
    ///
    /// The backend reads and writes that memory until [`VerbsContext::dereg_mr`] returns, from
    /// its own threads: the caller must keep the region allocated (and not otherwise borrowed
    /// in a way Rust forbids to alias) for that long. The safe `softverbs::Mr` guarantees it.
    fn reg_mr(&self, pd: u32, addr: u64, length: u64, access: AccessFlags) -> VerbsResult<MrKeys>;
    /// `ibv_dereg_mr`: once it returns, the backend no longer touches the region.
    fn dereg_mr(&self, lkey: u32) -> VerbsResult<()>;
    /// `ibv_rereg_mr`: makes the region of `lkey` cover `[addr, addr + length)` of PD `pd`
    /// with `access` (the caller passes the old values for what does not change) and
    /// returns its keys, which may differ from the old ones (ibv_rereg_mr(3) allows it).
    /// On an error the old region is still registered, unchanged.
    ///
    /// The default registers the new region, then deregisters the old one (undoing the new
    /// registration if that fails, for example with EBUSY while windows are bound to it), so
    /// the keys always change; a backend that can re-register in place overrides it. The
    /// memory contract of [`VerbsContext::reg_mr`] applies to the new range.
    fn rereg_mr(
        &self,
        lkey: u32,
        pd: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> VerbsResult<MrKeys> {
        let keys = self.reg_mr(pd, addr, length, access)?;
        if let Err(e) = self.dereg_mr(lkey) {
            // Best effort: the new region was never handed out, so nothing can hold it.
            let _ = self.dereg_mr(keys.lkey);
            return Err(e);
        }
        Ok(keys)
    }
    /// `ibv_create_cq` with at least `cqe` entries, reporting to completion channel
    /// `channel` when given; returns the CQ id and the granted size.
    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> VerbsResult<(u32, u32)>;
    /// `ibv_destroy_cq`: EBUSY while QPs use it.
    fn destroy_cq(&self, cq: u32) -> VerbsResult<()>;
    /// `ibv_resize_cq`: makes CQ `cq` hold at least `cqe` completions, keeping those queued;
    /// returns the granted size. EINVAL for a size the device does not offer or below the
    /// completions queued. The default: not supported (EOPNOTSUPP).
    fn resize_cq(&self, cq: u32, cqe: u32) -> VerbsResult<u32> {
        let _ = (cq, cqe);
        Err(VerbsError::NotSupported("ibv_resize_cq".into()))
    }
    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, oldest first; returns how
    /// many. Never blocks; call again whenever more completions are wanted.
    fn poll_cq(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize>;
    /// `ibv_create_qp`: returns the QP number and the granted capacities.
    fn create_qp(&self, pd: u32, init: &QpInitAttr) -> VerbsResult<(u32, crate::qp::QpCap)>;
    /// `ibv_modify_qp`, with the attribute checks of ibv_modify_qp(3).
    fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()>;
    /// `ibv_query_qp`: current attributes and the creation attributes.
    fn query_qp(&self, qpn: u32) -> VerbsResult<(QpAttr, QpInitAttr)>;
    /// `ibv_destroy_qp`: outstanding WRs are dropped without completions, as in verbs.
    fn destroy_qp(&self, qpn: u32) -> VerbsResult<()>;
    /// `ibv_post_send` of a WR list; on failure, the index of the first WR not posted.
    fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), PostError>;
    /// `ibv_post_recv` of a WR list; on failure, the index of the first WR not posted.
    fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), PostError>;
    /// QP `qpn`'s post calls bound to it, for a caller that keeps the QP's handle (the
    /// `softverbs` crate's `Qp` asks once, at creation). `None` (the default): the caller
    /// posts through [`VerbsContext::post_send`] / [`VerbsContext::post_recv`].
    fn qp_data_path(&self, qpn: u32) -> Option<std::sync::Arc<dyn QpDataPath>> {
        let _ = qpn;
        None
    }
    /// CQ `cq`'s poll bound to it, as [`VerbsContext::qp_data_path`] for a QP. `None` (the
    /// default): the caller polls through [`VerbsContext::poll_cq`].
    fn cq_data_path(&self, cq: u32) -> Option<std::sync::Arc<dyn CqDataPath>> {
        let _ = cq;
        None
    }

    /// `ibv_post_srq_recv` of a WR list; on failure, the index of the first WR not posted.
    fn post_srq_recv(&self, srq: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let _ = (srq, wrs);
        Err(PostError {
            index: 0,
            error: unsupported("shared receive queues"),
        })
    }
    /// `ibv_create_srq` in PD `pd`: returns the SRQ id and the granted attributes.
    fn create_srq(&self, pd: u32, attr: &SrqAttr) -> VerbsResult<(u32, SrqAttr)> {
        let _ = (pd, attr);
        Err(unsupported("shared receive queues"))
    }
    /// `ibv_modify_srq`: resize (MAX_WR) or arm the limit (LIMIT).
    fn modify_srq(&self, srq: u32, attr: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        let _ = (srq, attr, mask);
        Err(unsupported("shared receive queues"))
    }
    /// `ibv_query_srq`: the current attributes (`srq_limit` 0 once the limit event fired).
    fn query_srq(&self, srq: u32) -> VerbsResult<SrqAttr> {
        let _ = srq;
        Err(unsupported("shared receive queues"))
    }
    /// `ibv_destroy_srq`: EBUSY while QPs use it; posted WRs are dropped.
    fn destroy_srq(&self, srq: u32) -> VerbsResult<()> {
        let _ = srq;
        Err(unsupported("shared receive queues"))
    }

    /// `ibv_create_ah` in PD `pd`: returns the address handle id (for UD sends).
    fn create_ah(&self, pd: u32, attr: &AhAttr) -> VerbsResult<u32> {
        let _ = (pd, attr);
        Err(unsupported("address handles"))
    }
    /// `ibv_destroy_ah`.
    fn destroy_ah(&self, ah: u32) -> VerbsResult<()> {
        let _ = ah;
        Err(unsupported("address handles"))
    }

    /// `ibv_attach_mcast`: UD QP `qpn` receives the datagrams sent to multicast group
    /// `gid` (destination QPN 0xFFFFFF). Attaching twice is not an error.
    fn attach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        let _ = (qpn, gid);
        Err(unsupported("multicast groups"))
    }
    /// `ibv_detach_mcast`: EINVAL when `qpn` is not attached to `gid`.
    fn detach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        let _ = (qpn, gid);
        Err(unsupported("multicast groups"))
    }

    /// `ibv_alloc_mw` in PD `pd`: returns the window id and its initial rkey.
    fn alloc_mw(&self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        let _ = (pd, mw_type);
        Err(unsupported("memory windows"))
    }
    /// `ibv_dealloc_mw`: invalidates the window if bound.
    fn dealloc_mw(&self, mw: u32) -> VerbsResult<()> {
        let _ = mw;
        Err(unsupported("memory windows"))
    }
    /// `ibv_bind_mw` of type 1 window `mw` through QP `qpn`'s send queue; returns the
    /// window's new rkey (valid once the bind completes, like any send WR).
    fn bind_mw(&self, qpn: u32, mw: u32, bind: &MwBind) -> VerbsResult<u32> {
        let _ = (qpn, mw, bind);
        Err(unsupported("memory windows"))
    }

    /// `ibv_create_comp_channel`: returns the channel id.
    fn create_comp_channel(&self) -> VerbsResult<u32> {
        Err(unsupported("completion channels"))
    }
    /// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
    fn destroy_comp_channel(&self, channel: u32) -> VerbsResult<()> {
        let _ = channel;
        Err(unsupported("completion channels"))
    }
    /// The channel's file descriptor: readable while a completion event is pending (one
    /// token per event), for poll/epoll. It belongs to the backend; do not close it.
    fn comp_channel_fd(&self, channel: u32) -> VerbsResult<RawFd> {
        let _ = channel;
        Err(unsupported("completion channels"))
    }
    /// `ibv_req_notify_cq`: arm CQ `cq` so that its next completion (or next solicited one)
    /// raises one event on its channel.
    fn req_notify_cq(&self, cq: u32, solicited_only: bool) -> VerbsResult<()> {
        let _ = (cq, solicited_only);
        Err(unsupported("completion channels"))
    }
    /// `ibv_get_cq_event`: the CQ id of the next event on `channel`; waits up to `timeout`
    /// (`None`: without limit; zero: not at all) and gives `Ok(None)` when none came.
    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> VerbsResult<Option<u32>> {
        let _ = (channel, timeout);
        Err(unsupported("completion channels"))
    }
    /// `ibv_ack_cq_events`: acknowledge `count` events of CQ `cq` (destroying a CQ waits for
    /// its events to be acknowledged).
    fn ack_cq_events(&self, cq: u32, count: u32) -> VerbsResult<()> {
        let _ = (cq, count);
        Err(unsupported("completion channels"))
    }

    /// The async event file descriptor (`ibv_context::async_fd`): readable while an async
    /// event is pending. It belongs to the backend; do not close it.
    fn async_event_fd(&self) -> VerbsResult<RawFd> {
        Err(unsupported("async events"))
    }
    /// `ibv_get_async_event`: waits up to `timeout` (`None`: without limit; zero: not at all)
    /// and gives `Ok(None)` when no event came.
    fn get_async_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<AsyncEvent>> {
        let _ = timeout;
        Err(unsupported("async events"))
    }
    /// `ibv_ack_async_event`.
    fn ack_async_event(&self, event: &AsyncEvent) -> VerbsResult<()> {
        let _ = event;
        Err(unsupported("async events"))
    }
}

/// The post calls of one QP, bound to it (see [`VerbsContext::qp_data_path`]): the same
/// calls as the context's, without finding the QP by its number each time. Why: a polling
/// application posts millions of times a second, and that lookup (a table lock and a
/// reference count, four atomic read-modify-writes) was a sizable share of a post. They
/// fail as the context's calls do once the QP is destroyed.
pub trait QpDataPath: Send + Sync {
    /// [`VerbsContext::post_send`] on this QP.
    fn post_send(&self, wrs: &[SendWr]) -> Result<(), PostError>;
    /// [`VerbsContext::post_recv`] on this QP.
    fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), PostError>;
}

/// The poll of one CQ, bound to it (see [`VerbsContext::cq_data_path`]).
pub trait CqDataPath: Send + Sync {
    /// [`VerbsContext::poll_cq`] on this CQ.
    fn poll(&self, out: &mut [WorkCompletion]) -> VerbsResult<usize>;
}

/// The post calls of a QP whose handle the caller keeps (the `softverbs` crate's `Qp`, the
/// C ABI's): through the backend's bound calls when it offers them, else by number.
pub struct QpPoster {
    qpn: u32,
    bound: Option<std::sync::Arc<dyn QpDataPath>>,
}

impl QpPoster {
    /// Asks `ctx` for QP `qpn`'s bound calls, once.
    pub fn new(ctx: &dyn VerbsContext, qpn: u32) -> QpPoster {
        QpPoster {
            qpn,
            bound: ctx.qp_data_path(qpn),
        }
    }

    /// [`VerbsContext::post_send`] on this QP of `ctx`.
    pub fn post_send(&self, ctx: &dyn VerbsContext, wrs: &[SendWr]) -> Result<(), PostError> {
        match &self.bound {
            Some(bound) => bound.post_send(wrs),
            None => ctx.post_send(self.qpn, wrs),
        }
    }

    /// [`VerbsContext::post_recv`] on this QP of `ctx`.
    pub fn post_recv(&self, ctx: &dyn VerbsContext, wrs: &[RecvWr]) -> Result<(), PostError> {
        match &self.bound {
            Some(bound) => bound.post_recv(wrs),
            None => ctx.post_recv(self.qpn, wrs),
        }
    }
}

/// The poll of a CQ whose handle the caller keeps, as [`QpPoster`] for a QP.
pub struct CqPoller {
    cq: u32,
    bound: Option<std::sync::Arc<dyn CqDataPath>>,
}

impl CqPoller {
    /// Asks `ctx` for CQ `cq`'s bound poll, once.
    pub fn new(ctx: &dyn VerbsContext, cq: u32) -> CqPoller {
        CqPoller {
            cq,
            bound: ctx.cq_data_path(cq),
        }
    }

    /// [`VerbsContext::poll_cq`] on this CQ of `ctx`.
    pub fn poll(&self, ctx: &dyn VerbsContext, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        match &self.bound {
            Some(bound) => bound.poll(out),
            None => ctx.poll_cq(self.cq, out),
        }
    }
}

fn unsupported(what: &str) -> VerbsError {
    VerbsError::NotSupported(format!("{what} are not supported by this backend"))
}

#[cfg(test)]
mod post_error_tests {
    use super::*;

    fn post() -> Result<(), PostError> {
        Err(PostError {
            index: 2,
            error: VerbsError::nomem("send queue full"),
        })
    }

    fn caller() -> crate::VerbsResult<()> {
        post()?;
        Ok(())
    }

    #[test]
    fn a_post_error_converts_with_question_mark_keeping_errno_and_index() {
        let e = caller().unwrap_err();
        assert_eq!(e.errno(), 12);
        assert!(e.to_string().contains("work request 2"), "{e}");
    }
}
