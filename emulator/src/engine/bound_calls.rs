//! The post calls and the poll that a caller keeping a QP's or a CQ's handle binds once
//! (`VerbsContext::qp_data_path`, `cq_data_path`; the `softverbs` crate's `Qp` and `Cq` do),
//! and the post calls by QP number, which share them.
//!
//! Why bound: a post by number finds the QP's entry under the table's read lock and takes a
//! reference to it, four atomic read-modify-writes (each drains the CPU's store buffer) and
//! some 75 instructions per call; a poll by number takes the CQ table's read lock, two more
//! per poll, empty ones included. A bound path holds the entry and the CQ itself.

use std::sync::Arc;

use softverbs_api::backend::{CqDataPath, PostError, QpDataPath};
use softverbs_api::{RecvWr, SendWr, VerbsError, VerbsResult, WorkCompletion};

use super::cq::CompletionQueue;
use super::device::{Device, QpEntry};
use super::engine_thread::DeviceRuntime;
use crate::transport::{Env, Outputs, TransportQp};

/// Runs post call `call` on the QP of `entry` (number `qpn`) under its lock, from this
/// process, and delivers what it produced.
pub(super) fn post_on(
    dev: &Device,
    entry: &QpEntry,
    qpn: u32,
    call: impl FnOnce(&mut TransportQp, &Env<'_>, &mut Outputs) -> Result<(), PostError>,
) -> Result<(), PostError> {
    dev.check_opened_here().map_err(at_first)?;
    dev.on_qp(entry, None, call)
        .unwrap_or_else(|| Err(destroyed_since(qpn)))
}

/// [`post_on`] for a post call that needs no environment (see `Device::on_qp_alone`).
pub(super) fn post_alone_on(
    dev: &Device,
    entry: &QpEntry,
    qpn: u32,
    call: impl FnOnce(&mut TransportQp, &mut Outputs) -> Result<(), PostError>,
) -> Result<(), PostError> {
    dev.check_opened_here().map_err(at_first)?;
    dev.on_qp_alone(entry, call)
        .unwrap_or_else(|| Err(destroyed_since(qpn)))
}

/// The entry of QP `qpn`, for a post call by number: a forked child is refused (EPERM)
/// before the lookup, whether or not the QP exists, as a bound call would refuse it.
pub(super) fn entry_to_post(dev: &Device, qpn: u32) -> Result<Arc<QpEntry>, PostError> {
    dev.check_opened_here().map_err(at_first)?;
    dev.qp_entry(qpn).map_err(at_first)
}

/// A failure of the whole list, before its first WR.
pub(super) fn at_first(error: VerbsError) -> PostError {
    PostError { index: 0, error }
}

/// The error of a post call whose QP was destroyed after it was looked up.
fn destroyed_since(qpn: u32) -> PostError {
    at_first(VerbsError::NotFound(format!("QP {qpn:#x} was destroyed")))
}

/// A QP's post calls, bound to its entry (see the module doc).
pub(super) struct EmuQpPath {
    pub(super) runtime: Arc<DeviceRuntime>,
    pub(super) entry: Arc<QpEntry>,
    pub(super) qpn: u32,
}

impl QpDataPath for EmuQpPath {
    fn post_send(&self, wrs: &[SendWr]) -> Result<(), PostError> {
        let dev = &self.runtime.device;
        post_on(dev, &self.entry, self.qpn, |qp, env, out| {
            qp.post_send(wrs, env, out)
        })
    }

    fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), PostError> {
        let dev = &self.runtime.device;
        post_alone_on(dev, &self.entry, self.qpn, |qp, out| qp.post_recv(wrs, out))
    }
}

/// A CQ's poll, bound to the queue (see the module doc).
pub(super) struct EmuCqPath {
    pub(super) runtime: Arc<DeviceRuntime>,
    pub(super) cq: Arc<CompletionQueue>,
}

impl CqDataPath for EmuCqPath {
    fn poll(&self, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let dev = &self.runtime.device;
        super::app_poll::poll_cq(dev, Some(&self.cq), out, |out| self.cq.poll(out))
    }
}

#[cfg(test)]
mod tests {
    use softverbs_api::{
        QpAttr, QpAttrMask, QpState, RecvWr, SendWr, VerbsContext, WcStatus, WorkCompletion,
    };

    use super::super::tests::{device_and_peer, rc_qp};

    /// A QP's bound calls post to it and its CQ's bound poll takes what it completed; once
    /// the QP is destroyed its bound calls fail (ENOENT), and none are handed out for it.
    #[test]
    fn bound_calls_reach_their_qp_and_cq_and_fail_once_the_qp_is_gone() {
        let (ctx, _peer) = device_and_peer();
        let (_, cq, qpn) = rc_qp(&ctx);
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        ctx.modify_qp(qpn, &init, mask).unwrap();
        let qp = ctx.qp_data_path(qpn).expect("a QP's bound calls");
        let polled = ctx.cq_data_path(cq).expect("a CQ's bound poll");

        let recv = RecvWr {
            wr_id: 0x5eed,
            sg_list: vec![],
        };
        qp.post_recv(std::slice::from_ref(&recv)).unwrap();
        // To ERR: the receive posted through the bound call is flushed to the CQ.
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        ctx.modify_qp(qpn, &err, QpAttrMask::STATE).unwrap();
        let mut wc = [WorkCompletion::default(); 2];
        assert_eq!(polled.poll(&mut wc).unwrap(), 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (0x5eed, WcStatus::WrFlushErr));
        assert_eq!(wc[0].qp_num, qpn);
        assert_eq!(polled.poll(&mut wc).unwrap(), 0, "taken once");

        ctx.destroy_qp(qpn).unwrap();
        let e = qp.post_recv(std::slice::from_ref(&recv)).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, libc::ENOENT), "{}", e.error);
        let e = qp.post_send(&[SendWr::send(1, vec![])]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, libc::ENOENT), "{}", e.error);
        assert!(
            ctx.qp_data_path(qpn).is_none(),
            "no bound calls for a gone QP"
        );
        assert!(
            ctx.cq_data_path(cq + 100).is_none(),
            "nor for a CQ that never was"
        );
    }
}
