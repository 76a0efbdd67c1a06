//! A QP's entry in its device's table (the QP under its lock, the CQs it completes into, its
//! SRQ), and the entry the receiver of the moment keeps of the QP of its last datagram.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use softverbs_api::QpInitAttr;

use super::cq::CompletionQueue;
use super::id_hash::IdHash;
use crate::transport::{SharedRecvQueue, TransportQp};

/// A device's QPs by number.
pub(crate) type QpTable = RwLock<HashMap<u32, Arc<QpEntry>, IdHash>>;

/// A QP, the CQs it completes into and the SRQ it receives from.
pub(crate) struct QpEntry {
    pub(crate) qp: Mutex<TransportQp>,
    pub(crate) init: QpInitAttr,
    pub(crate) send_cq: Arc<CompletionQueue>,
    pub(crate) recv_cq: Arc<CompletionQueue>,
    pub(crate) srq: Option<Arc<Mutex<SharedRecvQueue>>>,
    /// The context that created it (whose async queue gets its events).
    pub(crate) owner: u64,
    /// Set by `destroy_qp` while it holds `qp`'s lock, read by `on_qp` under that lock
    /// (kernel rxe's `qp->valid`): a caller that found the entry before the destroy and
    /// locks it after does nothing, so nothing runs on a QP once `destroy_qp` returned.
    pub(crate) destroyed: AtomicBool,
    /// Times the QP went to RESET, stamped on its completions (see `purge_completions`).
    pub(crate) resets: AtomicU32,
}

impl QpEntry {
    /// The QP went to RESET: its completions still queued leave its CQs, as on mlx5 (see
    /// `CompletionQueue::purge`). Called under the QP's lock.
    pub(crate) fn purge_completions(&self, qpn: u32) {
        let resets = self.resets.fetch_add(1, Ordering::Relaxed) + 1;
        self.send_cq.purge(qpn, resets);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.purge(qpn, resets);
        }
    }
}

/// The QP the receiver of the moment handed its last datagram to (it keeps this beside the
/// arrival order, under `rx_lock`): the datagrams of a stream or a ping-pong, one QP's in a
/// row, skip the QP table's read lock and a reference to the entry, four atomic
/// read-modify-writes per datagram. A QP destroyed since is looked up again (and found
/// gone); its entry is let go at the next lookup, or by `forget` when the QP goes.
#[derive(Default)]
pub(crate) struct LastQp(Option<(u32, Arc<QpEntry>)>);

impl LastQp {
    /// The entry of QP `qpn`, found in its device's table `qps` if it is not this one.
    pub(crate) fn entry(&mut self, qps: &QpTable, qpn: u32) -> Option<&QpEntry> {
        let live = |(n, e): &(u32, Arc<QpEntry>)| *n == qpn && !e.destroyed.load(Ordering::Relaxed);
        if !self.0.as_ref().is_some_and(live) {
            self.0 = qps.read().get(&qpn).map(|e| (qpn, e.clone()));
        }
        self.0.as_ref().map(|(_, e)| &**e)
    }

    /// Lets go of QP `qpn`'s entry, if this is it (the QP was destroyed).
    pub(crate) fn forget(&mut self, qpn: u32) {
        if self.0.as_ref().is_some_and(|(n, _)| *n == qpn) {
            self.0 = None;
        }
    }
}
