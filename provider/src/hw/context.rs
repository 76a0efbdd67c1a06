//! The hardware backend: [`HwContext`] implements the verbs contract over an rdma-core device,
//! keeping each libibverbs object in a table under the id the contract uses.
//!
//! Objects live in `Arc`s: a verb clones the `Arc` out of its table (under the table lock)
//! and calls libibverbs without the lock; destruction takes the object out of its table
//! only when no call holds it (`Arc::try_unwrap`), so an object is never destroyed while a
//! verb uses it (a destroy racing a verb is EBUSY, which the safe handles never cause).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use softverbs_api::backend::MrKeys;
use softverbs_api::{
    AccessFlags, AhAttr, AsyncEvent, DeviceAttr, Gid, GidEntry, MwBind, MwType, PortAttr,
    PostError, QpAttr, QpAttrMask, QpCap, QpInitAttr, RecvWr, SendWr, SrqAttr, SrqAttrMask,
    VerbsContext, VerbsError, VerbsResult, WorkCompletion, WrOpcode,
};

use super::convert::{self, error};
use super::ffi::post::{BindDesc, RecvDesc};
use super::ffi::{self, RawAh, RawChannel, RawContext, RawCq, RawMr, RawMw, RawPd, RawQp, RawSrq};
use super::table::{inval, not_found, Table};
use super::{attr, gid, wr};

mod events;

/// A CQ and its completion events handed out and not yet acknowledged (libibverbs would
/// block in `ibv_destroy_cq` until they are; the contract says EBUSY instead).
pub(crate) struct CqEntry {
    pub(crate) raw: RawCq,
    unacked: Mutex<u32>,
}

/// A QP and what it was created with (for `query_qp`).
pub(crate) struct QpEntry {
    pub(crate) raw: RawQp,
    init: QpInitAttr,
}

/// An open rdma-core device.
pub struct HwContext {
    // Field order is teardown order in `Drop`; `ctx` is closed last (it is dropped after
    // the explicit teardown).
    ctx: RawContext,
    name: String,
    next_id: AtomicU32,
    pds: Table<RawPd>,
    mrs: Table<RawMr>,
    cqs: Table<CqEntry>,
    channels: Table<RawChannel>,
    qps: Table<QpEntry>,
    srqs: Table<RawSrq>,
    ahs: Table<RawAh>,
    mws: Table<RawMw>,
}

impl HwContext {
    /// Opens rdma-core device `name` (`ibv_open_device`); NotFound if there is none.
    pub fn open(name: &str) -> VerbsResult<HwContext> {
        let ctx = RawContext::open(name).map_err(|e| error(e, &format!("opening {name}")))?;
        Ok(HwContext {
            name: ctx.name(),
            ctx,
            next_id: AtomicU32::new(1),
            pds: Table::new("PD"),
            mrs: Table::new("MR"),
            cqs: Table::new("CQ"),
            channels: Table::new("completion channel"),
            qps: Table::new("QP"),
            srqs: Table::new("SRQ"),
            ahs: Table::new("AH"),
            mws: Table::new("MW"),
        })
    }

    fn new_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn mr_opt(&self, lkey: u32, length: u64) -> VerbsResult<Option<Arc<RawMr>>> {
        if lkey == 0 && length == 0 {
            return Ok(None);
        }
        self.mrs.get(lkey, inval).map(Some)
    }
}

impl Drop for HwContext {
    fn drop(&mut self) {
        // Children before parents, as libibverbs requires; a failure leaks the object,
        // which the kernel reclaims when the device is closed (after this).
        for qp in self.qps.drain() {
            if let Ok(q) = Arc::try_unwrap(qp) {
                let _ = q.raw.destroy();
            }
        }
        macro_rules! teardown {
            ($table:expr) => {
                for obj in $table.drain() {
                    if let Ok(o) = Arc::try_unwrap(obj) {
                        let _ = o.destroy();
                    }
                }
            };
        }
        teardown!(self.mws);
        teardown!(self.ahs);
        teardown!(self.mrs);
        teardown!(self.srqs);
        for cq in self.cqs.drain() {
            if let Ok(c) = Arc::try_unwrap(cq) {
                let unacked = *c.unacked.lock();
                if unacked > 0 {
                    c.raw.ack_events(unacked);
                }
                let _ = c.raw.destroy();
            }
        }
        teardown!(self.channels);
        teardown!(self.pds);
    }
}

fn post_err(index: usize, e: ffi::Errno, what: &str) -> PostError {
    PostError {
        index,
        error: error(e, what),
    }
}

fn recv_descs(wrs: &[RecvWr]) -> Vec<RecvDesc> {
    wrs.iter()
        .map(|w| RecvDesc {
            wr_id: w.wr_id,
            sges: wr::sges(&w.sg_list),
        })
        .collect()
}

impl VerbsContext for HwContext {
    fn device_name(&self) -> String {
        self.name.clone()
    }

    fn query_device(&self) -> VerbsResult<DeviceAttr> {
        let a = self
            .ctx
            .query_device()
            .map_err(|e| error(e, "ibv_query_device"))?;
        Ok(attr::device_attr(&a))
    }

    fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr> {
        let a = self
            .ctx
            .query_port(port_num)
            .map_err(|e| error(e, &format!("ibv_query_port({port_num})")))?;
        Ok(attr::port_attr(&a))
    }

    fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry> {
        let port = self.query_port(port_num)?;
        if index >= port.gid_tbl_len {
            return Err(VerbsError::inval(format!(
                "GID index {index} beyond the table ({})",
                port.gid_tbl_len
            )));
        }
        let raw = self
            .ctx
            .query_gid(port_num, index as i32)
            .map_err(|e| error(e, &format!("ibv_query_gid({port_num}, {index})")))?;
        Ok(GidEntry {
            gid: softverbs_api::Gid(raw),
            gid_index: index,
            port_num,
            gid_type: gid::gid_type(&self.name, port_num, index),
        })
    }

    fn alloc_pd(&self) -> VerbsResult<u32> {
        let pd = self.ctx.alloc_pd().map_err(|e| error(e, "ibv_alloc_pd"))?;
        let id = self.new_id();
        self.pds.insert(id, pd);
        Ok(id)
    }

    fn dealloc_pd(&self, pd: u32) -> VerbsResult<()> {
        self.pds.remove_with(pd, inval, RawPd::destroy)
    }

    fn reg_mr(&self, pd: u32, addr: u64, length: u64, access: AccessFlags) -> VerbsResult<MrKeys> {
        let p = self.pds.get(pd, inval)?;
        let len = usize::try_from(length)
            .map_err(|_| VerbsError::inval(format!("MR length {length} too large")))?;
        let mr = p
            .reg_mr(addr, len, access.bits())
            .map_err(|e| error(e, "ibv_reg_mr"))?;
        let (lkey, rkey) = mr.keys();
        self.mrs.insert(lkey, mr);
        Ok(MrKeys { lkey, rkey })
    }

    fn dereg_mr(&self, lkey: u32) -> VerbsResult<()> {
        self.mrs.remove_with(lkey, inval, RawMr::destroy)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> VerbsResult<(u32, u32)> {
        let cqe_i = i32::try_from(cqe.max(1))
            .map_err(|_| VerbsError::inval(format!("CQ size {cqe} too large")))?;
        let ch = match channel {
            Some(c) => Some(self.channels.get(c, inval)?),
            None => None,
        };
        let id = self.new_id();
        let cq = self
            .ctx
            .create_cq(cqe_i, id, ch.as_deref())
            .map_err(|e| error(e, "ibv_create_cq"))?;
        let granted = cq.cqe().max(0) as u32;
        self.cqs.insert(
            id,
            CqEntry {
                raw: cq,
                unacked: Mutex::new(0),
            },
        );
        Ok((id, granted))
    }

    fn destroy_cq(&self, cq: u32) -> VerbsResult<()> {
        if *self.cqs.get(cq, inval)?.unacked.lock() > 0 {
            return Err(VerbsError::Busy(format!(
                "CQ {cq:#x} has unacknowledged events"
            )));
        }
        self.cqs.remove_with(cq, inval, |c| {
            c.raw.destroy().map_err(|(raw, e)| {
                (
                    CqEntry {
                        raw,
                        unacked: c.unacked,
                    },
                    e,
                )
            })
        })
    }

    fn resize_cq(&self, cq: u32, cqe: u32) -> VerbsResult<u32> {
        let c = self.cqs.get(cq, inval)?;
        let want = i32::try_from(cqe).map_err(|_| VerbsError::inval("cqe beyond i32"))?;
        c.raw.resize(want).map_err(|e| error(e, "ibv_resize_cq"))?;
        Ok(c.raw.cqe().max(0) as u32)
    }

    fn poll_cq(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let c = self.cqs.get(cq, inval)?;
        let wcs = c.raw.poll(out.len()).map_err(|e| error(e, "ibv_poll_cq"))?;
        for (slot, w) in out.iter_mut().zip(&wcs) {
            *slot = WorkCompletion::from(w);
        }
        Ok(wcs.len())
    }

    fn create_qp(&self, pd: u32, init: &QpInitAttr) -> VerbsResult<(u32, QpCap)> {
        let p = self.pds.get(pd, inval)?;
        let send_cq = self.cqs.get(init.send_cq, inval)?;
        let recv_cq = self.cqs.get(init.recv_cq, inval)?;
        let srq = match init.srq {
            Some(s) => Some(self.srqs.get(s, not_found)?),
            None => None,
        };
        let mut cap = attr::cap_to_c(&init.cap);
        let qp = p
            .create_qp(
                convert::qp_type_raw(init.qp_type),
                &send_cq.raw,
                &recv_cq.raw,
                srq.as_deref(),
                &mut cap,
                init.sq_sig_all,
            )
            .map_err(|e| error(e, "ibv_create_qp"))?;
        let granted = attr::cap_from_c(&cap);
        let qpn = qp.qp_num();
        let mut stored = *init;
        stored.cap = granted;
        self.qps.insert(
            qpn,
            QpEntry {
                raw: qp,
                init: stored,
            },
        );
        Ok((qpn, granted))
    }

    fn modify_qp(&self, qpn: u32, a: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        let qp = self.qps.get(qpn, not_found)?;
        let c = attr::qp_attr_to_c(a, mask)?;
        qp.raw
            .modify(c, mask.0 as i32)
            .map_err(|e| error(e, "ibv_modify_qp"))
    }

    fn query_qp(&self, qpn: u32) -> VerbsResult<(QpAttr, QpInitAttr)> {
        let qp = self.qps.get(qpn, not_found)?;
        let c = qp
            .raw
            .query(attr::QUERY_MASK)
            .map_err(|e| error(e, "ibv_query_qp"))?;
        Ok((attr::qp_attr_from_c(c)?, qp.init))
    }

    fn destroy_qp(&self, qpn: u32) -> VerbsResult<()> {
        self.qps.remove_with(qpn, not_found, |q| {
            q.raw
                .destroy()
                .map_err(|(raw, e)| (QpEntry { raw, init: q.init }, e))
        })
    }

    fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), PostError> {
        let qp = self
            .qps
            .get(qpn, not_found)
            .map_err(|error| PostError { index: 0, error })?;
        // The AHs, MWs and MRs the WRs name, held (kept from destruction) for the post.
        // A WR naming an unknown one fails at its index, after the WRs before it are posted.
        let mut held = Vec::with_capacity(wrs.len());
        let mut refused = None;
        for (index, w) in wrs.iter().enumerate() {
            match self.hold(w).and_then(|h| wr::check_send(w).map(|()| h)) {
                Ok(h) => held.push(h),
                Err(error) => {
                    refused = Some(PostError { index, error });
                    break;
                }
            }
        }
        let descs: Vec<_> = wrs
            .iter()
            .zip(&held)
            .map(|(w, h)| wr::send_desc(w, h))
            .collect();
        qp.raw
            .post_send(&descs)
            .map_err(|(i, e)| post_err(i, e, "ibv_post_send"))?;
        refused.map_or(Ok(()), Err)
    }

    fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let qp = self
            .qps
            .get(qpn, not_found)
            .map_err(|error| PostError { index: 0, error })?;
        qp.raw
            .post_recv(&recv_descs(wrs))
            .map_err(|(i, e)| post_err(i, e, "ibv_post_recv"))
    }

    fn post_srq_recv(&self, srq: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let s = self
            .srqs
            .get(srq, not_found)
            .map_err(|error| PostError { index: 0, error })?;
        s.post_recv(&recv_descs(wrs))
            .map_err(|(i, e)| post_err(i, e, "ibv_post_srq_recv"))
    }

    fn create_srq(&self, pd: u32, a: &SrqAttr) -> VerbsResult<(u32, SrqAttr)> {
        let p = self.pds.get(pd, inval)?;
        let id = self.new_id();
        let mut c = attr::srq_attr_to_c(a);
        let srq = p
            .create_srq(id, &mut c)
            .map_err(|e| error(e, "ibv_create_srq"))?;
        self.srqs.insert(id, srq);
        Ok((id, attr::srq_attr_from_c(&c)))
    }

    fn modify_srq(&self, srq: u32, a: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        let s = self.srqs.get(srq, not_found)?;
        s.modify(&attr::srq_attr_to_c(a), mask.0 as i32)
            .map_err(|e| error(e, "ibv_modify_srq"))
    }

    fn query_srq(&self, srq: u32) -> VerbsResult<SrqAttr> {
        let s = self.srqs.get(srq, not_found)?;
        let c = s.query().map_err(|e| error(e, "ibv_query_srq"))?;
        Ok(attr::srq_attr_from_c(&c))
    }

    fn destroy_srq(&self, srq: u32) -> VerbsResult<()> {
        self.srqs.remove_with(srq, not_found, RawSrq::destroy)
    }

    fn attach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        let qp = self.qps.get(qpn, not_found)?;
        qp.raw
            .multicast(gid.0, true)
            .map_err(|e| error(e, "ibv_attach_mcast"))
    }

    fn detach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        let qp = self.qps.get(qpn, not_found)?;
        qp.raw
            .multicast(gid.0, false)
            .map_err(|e| error(e, "ibv_detach_mcast"))
    }

    fn create_ah(&self, pd: u32, a: &AhAttr) -> VerbsResult<u32> {
        let p = self.pds.get(pd, inval)?;
        let c = attr::ah_attr_to_c(a)?;
        let ah = p.create_ah(&c).map_err(|e| error(e, "ibv_create_ah"))?;
        let id = self.new_id();
        self.ahs.insert(id, ah);
        Ok(id)
    }

    fn destroy_ah(&self, ah: u32) -> VerbsResult<()> {
        self.ahs.remove_with(ah, inval, RawAh::destroy)
    }

    fn alloc_mw(&self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        let p = self.pds.get(pd, inval)?;
        let mw = p
            .alloc_mw(mw_type.to_raw())
            .map_err(|e| error(e, "ibv_alloc_mw"))?;
        let rkey = mw.rkey();
        let id = self.new_id();
        self.mws.insert(id, mw);
        Ok((id, rkey))
    }

    fn dealloc_mw(&self, mw: u32) -> VerbsResult<()> {
        self.mws.remove_with(mw, inval, RawMw::destroy)
    }

    fn bind_mw(&self, qpn: u32, mw: u32, bind: &MwBind) -> VerbsResult<u32> {
        let qp = self.qps.get(qpn, not_found)?;
        let w = self.mws.get(mw, inval)?;
        let info = &bind.bind_info;
        let mr = self.mr_opt(info.mr_lkey, info.length)?;
        let desc = BindDesc {
            mr: mr.as_deref(),
            addr: info.addr,
            length: info.length,
            access: info.mw_access_flags.bits(),
        };
        qp.raw
            .bind_mw(&w, bind.wr_id, bind.send_flags.bits(), &desc)
            .map_err(|e| error(e, "ibv_bind_mw"))
    }

    fn create_comp_channel(&self) -> VerbsResult<u32> {
        let ch = self
            .ctx
            .create_comp_channel()
            .map_err(|e| error(e, "ibv_create_comp_channel"))?;
        let id = self.new_id();
        self.channels.insert(id, ch);
        Ok(id)
    }

    fn destroy_comp_channel(&self, channel: u32) -> VerbsResult<()> {
        self.channels
            .remove_with(channel, inval, RawChannel::destroy)
    }

    fn comp_channel_fd(&self, channel: u32) -> VerbsResult<RawFd> {
        Ok(self.channels.get(channel, inval)?.fd())
    }

    fn req_notify_cq(&self, cq: u32, solicited_only: bool) -> VerbsResult<()> {
        self.cqs
            .get(cq, inval)?
            .raw
            .req_notify(solicited_only)
            .map_err(|e| error(e, "ibv_req_notify_cq"))
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> VerbsResult<Option<u32>> {
        self.wait_cq_event(channel, timeout)
    }

    fn ack_cq_events(&self, cq: u32, count: u32) -> VerbsResult<()> {
        self.ack_cq(cq, count)
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<AsyncEvent>> {
        self.wait_async_event(timeout)
    }

    fn async_event_fd(&self) -> VerbsResult<RawFd> {
        Ok(self.ctx.async_fd())
    }

    fn ack_async_event(&self, _event: &AsyncEvent) -> VerbsResult<()> {
        // Already acknowledged when taken (see RawContext::take_async_event).
        Ok(())
    }
}

impl HwContext {
    /// Takes hold of the objects send WR `w` names.
    fn hold(&self, w: &SendWr) -> VerbsResult<wr::Held> {
        if let Some(ud) = &w.ud {
            return Ok(wr::Held::Ah(self.ahs.get(ud.ah, inval)?));
        }
        if let (WrOpcode::BindMw, Some(b)) = (w.opcode, &w.bind_mw) {
            let mw = self.mws.get(b.mw, inval)?;
            let mr = self.mr_opt(b.bind_info.mr_lkey, b.bind_info.length)?;
            return Ok(wr::Held::Bind(mw, mr));
        }
        Ok(wr::Held::Nothing)
    }
}
