//! An open emulated device (one `ibv_context`): the verbs calls of [`VerbsContext`] as a
//! thin layer over the device's tables (`device`), its data path (`datapath`) and its
//! engine thread (`engine_thread`), plus what belongs to one open context (its async event
//! queue and completion channels).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use softverbs_api::backend::{CqDataPath, MrKeys, PostError, QpDataPath};
use softverbs_api::mw::{BindMwWr, MwBind, MwType};
use softverbs_api::qp_transition::{validate_modify, ModifyLimits};
use softverbs_api::{
    AccessFlags, AhAttr, AsyncElement, AsyncEvent, AsyncEventKind, DeviceAttr, Gid, GidEntry,
    PortAttr, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, RecvWr, SendWr, SrqAttr, SrqAttrMask,
    VerbsContext, VerbsError, VerbsResult, WorkCompletion,
};

use super::async_events::AsyncEventQueue;
use super::bound_calls::{entry_to_post, post_alone_on, post_on, EmuCqPath, EmuQpPath};
use super::comp_channel::CompChannel;
use super::cq::CompletionQueue;
use super::device::*;
use super::engine_thread::DeviceRuntime;
use crate::transport::qp::ROCE_UDP_PORT;
use crate::transport::{AddressVector, SharedRecvQueue, TransportQp};

/// What belongs to one open context rather than to the device: its async event queue and
/// its completion channels.
pub(crate) struct ContextLocal {
    id: u64,
    events: Arc<AsyncEventQueue>,
    channels: Mutex<HashMap<u32, Arc<CompChannel>>>,
    next_channel: AtomicU32,
    device: Weak<Device>,
}

impl Drop for ContextLocal {
    fn drop(&mut self) {
        if let Some(device) = self.device.upgrade() {
            device.contexts.lock().remove(&self.id);
        }
    }
}

/// An open emulated device (one `ibv_context`). Cheap to clone (clones are the same
/// context); the device and its engine thread live while any context does.
///
/// Each open has its own async event queue and descriptor: it receives the events of the
/// objects it created, and every port event. Completion channels belong to the context that
/// made them too.
///
/// Where it differs from libibverbs, on purpose (never a hang): `destroy_cq` of a CQ with
/// completion events taken and not acknowledged fails with EBUSY instead of blocking until
/// they are; async events need not be acknowledged before their object is destroyed (they
/// name objects by id, and queued events of a destroyed QP or CQ are dropped, as the kernel
/// drops them); arming a CQ that has no channel is accepted and has no effect.
#[derive(Clone)]
pub struct EmuContext {
    pub(crate) runtime: Arc<DeviceRuntime>,
    local: Arc<ContextLocal>,
}

impl EmuContext {
    /// A new context of the device `runtime` runs.
    pub(crate) fn new(runtime: Arc<DeviceRuntime>) -> VerbsResult<EmuContext> {
        let device = &runtime.device;
        let id = device.next_context.fetch_add(1, Ordering::Relaxed);
        let events = Arc::new(AsyncEventQueue::new()?);
        device.contexts.lock().insert(id, Arc::downgrade(&events));
        let local = Arc::new(ContextLocal {
            id,
            events,
            channels: Mutex::new(HashMap::new()),
            next_channel: AtomicU32::new(1),
            device: Arc::downgrade(device),
        });
        Ok(EmuContext { runtime, local })
    }

    pub(super) fn dev(&self) -> &Device {
        &self.runtime.device
    }

    fn channel(&self, channel: u32) -> VerbsResult<Arc<CompChannel>> {
        self.local
            .channels
            .lock()
            .get(&channel)
            .cloned()
            .ok_or_else(|| VerbsError::inval(format!("no completion channel {channel}")))
    }

    /// Takes port 1 down (`false`) or brings it up (`true`), as unplugging or plugging a
    /// cable would: `query_port` reports the new state and every context of the device gets
    /// `IBV_EVENT_PORT_ERR` or `IBV_EVENT_PORT_ACTIVE` (only on a change). While the port is
    /// down, nothing is sent and arriving datagrams are dropped (both counted in
    /// [`DeviceCounters::port_down_drops`]); QPs keep their state, so RC requesters
    /// retransmit and either recover once the port is up or fail with RETRY_EXC_ERR.
    pub fn set_port_active(&self, active: bool) {
        let dev = self.dev();
        if dev.port_active.swap(active, Ordering::AcqRel) == active {
            return;
        }
        let kind = if active {
            AsyncEventKind::PortActive
        } else {
            AsyncEventKind::PortErr
        };
        dev.raise_async_all(AsyncEvent {
            kind,
            element: AsyncElement::Port(1),
        });
    }

    /// Async events this context lost because its queue was full.
    pub fn async_events_lost(&self) -> u64 {
        self.local.events.lost()
    }

    /// The back-off of an application that polls CQs: blocks up to `timeout` until a
    /// datagram reaches the device (the next poll then receives it in the calling thread),
    /// instead of sleeping blind or yielding. Returns whether something arrived. Links that
    /// cannot be waited on this way sleep `timeout`.
    pub fn wait_for_traffic(&self, timeout: Duration) -> bool {
        super::app_wait::wait_for_traffic(self.dev(), timeout)
    }
}

impl VerbsContext for EmuContext {
    fn device_name(&self) -> String {
        self.dev().config.name.clone()
    }

    fn query_device(&self) -> VerbsResult<DeviceAttr> {
        Ok(self.dev().device_attr())
    }

    fn query_port(&self, port_num: u8) -> VerbsResult<PortAttr> {
        self.dev().port_attr(port_num)
    }

    fn query_gid(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry> {
        self.dev().gid_entry(port_num, index)
    }

    fn alloc_pd(&self) -> VerbsResult<u32> {
        self.dev().check_opened_here()?;
        let mut pds = self.dev().pds.lock();
        DeviceLimits::room("PD", pds.len(), self.dev().config.limits.max_pd)?;
        let pd = self.dev().next_pd.fetch_add(1, Ordering::Relaxed);
        pds.insert(pd, ());
        Ok(pd)
    }

    fn dealloc_pd(&self, pd: u32) -> VerbsResult<()> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        let qp_uses = dev.qps.read().values().any(|e| e.qp.lock().pd == pd);
        let srq_uses = dev.srqs.read().values().any(|s| s.lock().pd == pd);
        if qp_uses || srq_uses || dev.mem.pd_in_use(pd) || dev.ahs.read().pd_in_use(pd) {
            return Err(VerbsError::Busy(format!(
                "PD {pd} still has MRs, QPs, SRQs or AHs"
            )));
        }
        dev.pds.lock().remove(&pd);
        Ok(())
    }

    fn reg_mr(&self, pd: u32, addr: u64, length: u64, access: AccessFlags) -> VerbsResult<MrKeys> {
        self.dev().check_opened_here()?;
        self.dev().check_pd(pd)?;
        self.dev().mem.register(pd, addr, length, access)
    }

    fn dereg_mr(&self, lkey: u32) -> VerbsResult<()> {
        self.dev().mem.deregister(lkey)
    }

    /// In place: the keys stay (see `MrTable::reregister`).
    fn rereg_mr(
        &self,
        lkey: u32,
        pd: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> VerbsResult<MrKeys> {
        self.dev().check_opened_here()?;
        self.dev().check_pd(pd)?;
        self.dev().mem.reregister(lkey, pd, addr, length, access)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> VerbsResult<(u32, u32)> {
        self.dev().check_opened_here()?;
        self.dev().config.limits.check_cqe(cqe)?;
        // Held until the CQ is attached, so that the channel cannot be destroyed meanwhile.
        let channels = self.local.channels.lock();
        let channel = match channel {
            Some(id) => Some(channels.get(&id).cloned().ok_or_else(|| {
                VerbsError::inval(format!("no completion channel {id} on this context"))
            })?),
            None => None,
        };
        let mut cqs = self.dev().cqs.write();
        DeviceLimits::room("CQ", cqs.len(), self.dev().config.limits.max_cq)?;
        let id = self.dev().next_cq.fetch_add(1, Ordering::Relaxed);
        if let Some(channel) = &channel {
            channel.attach(id);
        }
        let cq = CompletionQueue::for_context(cqe as usize, id, self.local.id, channel);
        cqs.insert(id, Arc::new(cq));
        Ok((id, cqe))
    }

    fn destroy_cq(&self, cq: u32) -> VerbsResult<()> {
        self.dev().destroy_cq(cq)
    }

    fn resize_cq(&self, cq: u32, cqe: u32) -> VerbsResult<u32> {
        let dev = self.dev();
        dev.check_opened_here()?;
        dev.config.limits.check_cqe(cqe)?;
        dev.cq(cq)?.resize(cqe as usize)?;
        Ok(cqe)
    }

    fn poll_cq(&self, cq: u32, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let dev = self.dev();
        super::app_poll::poll_cq(dev, None, out, |out| dev.poll_cq_now(cq, out))
    }

    fn cq_data_path(&self, cq: u32) -> Option<Arc<dyn CqDataPath>> {
        let cq = self.dev().cq(cq).ok()?;
        let runtime = self.runtime.clone();
        Some(Arc::new(EmuCqPath { runtime, cq }))
    }

    fn create_qp(&self, pd: u32, init: &QpInitAttr) -> VerbsResult<(u32, QpCap)> {
        let dev = self.dev();
        dev.check_opened_here()?;
        dev.check_pd(pd)?;
        let srq = init.srq.map(|id| dev.srq(id)).transpose()?;
        let mut c = init.cap;
        if srq.is_some() {
            // The SRQ is the receive queue; the QP has none of its own (as in rxe).
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        if c.max_send_wr == 0 && c.max_recv_wr == 0 && srq.is_none() {
            return Err(VerbsError::inval("a QP needs a send or a receive queue"));
        }
        dev.config.limits.check_qp_cap(&c)?;
        let send_cq = dev.cq(init.send_cq)?;
        let recv_cq = dev.cq(init.recv_cq)?;
        let mut qps = dev.qps.write();
        DeviceLimits::room("QP", qps.len(), dev.config.limits.max_qp)?;
        let qpn = dev.allocate_qpn(&qps)?;
        let granted = QpCap {
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if srq.is_some() {
                0
            } else {
                c.max_recv_sge.max(1)
            },
            ..c
        };
        let qp = TransportQp::new(qpn, init.qp_type, pd, init.sq_sig_all, granted)
            .with_srq(init.srq)
            .with_port_mtu(dev.active_mtu())
            .with_ack_coalescing(dev.config.ack_coalescing);
        qps.insert(
            qpn,
            Arc::new(QpEntry {
                qp: Mutex::new(qp),
                init: *init,
                send_cq,
                recv_cq,
                srq,
                owner: self.local.id,
                destroyed: AtomicBool::new(false),
                resets: AtomicU32::new(0),
            }),
        );
        dev.publish_qp_count(qps.len());
        Ok((qpn, granted))
    }

    fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        let dev = self.dev();
        dev.check_opened_here()?;
        dev.flush_owed_acks();
        let entry = dev.qp_entry(qpn)?;
        let limits = ModifyLimits {
            max_qp_rd_atom: dev.config.limits.max_rd_atomic,
            max_qp_init_rd_atom: dev.config.limits.max_rd_atomic,
        };
        dev.check_path(attr, mask)?;
        let mut attr = *attr;
        if mask.contains(QpAttrMask::AV) {
            attr.ah_attr.udp_dport = dev.udp_dport_of(&attr.ah_attr);
        }
        dev.on_qp(&entry, None, |qp, _, out| {
            validate_modify(qp.qp_type, qp.state(), &attr, mask, &limits)?;
            qp.apply_modify(&attr, mask, out);
            if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset {
                entry.purge_completions(qp.qpn);
            }
            Ok(())
        })
        .unwrap_or_else(|| Err(VerbsError::NotFound(format!("QP {qpn:#x} was destroyed"))))
    }

    fn query_qp(&self, qpn: u32) -> VerbsResult<(QpAttr, QpInitAttr)> {
        let entry = self.dev().qp_entry(qpn)?;
        let qp = entry.qp.lock();
        let mut attr = qp.attr;
        attr.cur_qp_state = attr.qp_state;
        attr.cap = qp.cap;
        // The PSNs in effect now, as rxe_qp_to_attr reports them.
        attr.sq_psn = qp.req.next_psn().value();
        attr.rq_psn = qp.resp.epsn().value();
        Ok((attr, entry.init))
    }

    fn destroy_qp(&self, qpn: u32) -> VerbsResult<()> {
        let dev = self.dev();
        dev.check_detached(qpn)?;
        dev.flush_owed_acks();
        let entry = {
            let mut qps = dev.qps.write();
            let entry = qps
                .remove(&qpn)
                .ok_or_else(|| VerbsError::NotFound(format!("no QP {qpn:#x}")))?;
            dev.publish_qp_count(qps.len());
            entry
        };
        // Under the QP's lock: a call running on it finishes first, and one that found the
        // entry before the removal and locks it after sees the mark and does nothing.
        let counters = {
            let qp = entry.qp.lock();
            entry.destroyed.store(true, Ordering::Relaxed);
            qp.counters
        };
        // After the mark, so that events of a call that was running go too.
        dev.forget_async(entry.owner, AsyncElement::Qp(qpn));
        dev.retired_qp_counters.lock().add(&counters);
        // Type 2 windows bound through it can never be used again: free their regions.
        dev.mem.release_qp_windows(qpn);
        // The receiver's last QP may be this one: let go of it now, not at the next datagram
        // (a receiver busy at this moment finds it destroyed).
        if let Some(mut receiver) = dev.rx_lock.try_lock() {
            receiver.qp.forget(qpn);
        }
        Ok(())
    }

    fn attach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        self.dev().attach_mcast(&self.runtime.device, qpn, gid)
    }

    fn detach_mcast(&self, qpn: u32, gid: &Gid) -> VerbsResult<()> {
        self.dev().detach_mcast(qpn, gid)
    }

    fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), PostError> {
        let entry = entry_to_post(self.dev(), qpn)?;
        post_on(self.dev(), &entry, qpn, |qp, env, out| {
            qp.post_send(wrs, env, out)
        })
    }

    fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let entry = entry_to_post(self.dev(), qpn)?;
        post_alone_on(self.dev(), &entry, qpn, |qp, out| qp.post_recv(wrs, out))
    }

    fn qp_data_path(&self, qpn: u32) -> Option<Arc<dyn QpDataPath>> {
        let entry = self.dev().qp_entry(qpn).ok()?;
        let runtime = self.runtime.clone();
        Some(Arc::new(EmuQpPath {
            runtime,
            entry,
            qpn,
        }))
    }

    fn post_srq_recv(&self, srq: u32, wrs: &[RecvWr]) -> Result<(), PostError> {
        let queue = self
            .dev()
            .srq(srq)
            .map_err(|error| PostError { index: 0, error })?;
        let mut queue = queue.lock();
        queue.post(wrs)
    }

    fn create_srq(&self, pd: u32, attr: &SrqAttr) -> VerbsResult<(u32, SrqAttr)> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        dev.config.limits.check_srq_attr(attr)?;
        let mut srqs = dev.srqs.write();
        DeviceLimits::room("SRQ", srqs.len(), dev.config.limits.max_srq)?;
        let granted = SrqAttr {
            max_sge: attr.max_sge.max(1),
            ..*attr
        };
        let id = dev.next_srq.fetch_add(1, Ordering::Relaxed);
        let queue = SharedRecvQueue::new(id, pd, &granted);
        srqs.insert(id, Arc::new(Mutex::new(queue)));
        Ok((id, granted))
    }

    fn modify_srq(&self, srq: u32, attr: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        let max_wr = self.dev().config.limits.max_srq_wr;
        self.dev().srq(srq)?.lock().modify(attr, mask, max_wr)
    }

    fn query_srq(&self, srq: u32) -> VerbsResult<SrqAttr> {
        Ok(self.dev().srq(srq)?.lock().attr())
    }

    fn destroy_srq(&self, srq: u32) -> VerbsResult<()> {
        let dev = self.dev();
        let queue = dev.srq(srq)?;
        let in_use = dev
            .qps
            .read()
            .values()
            .any(|e| e.srq.as_ref().is_some_and(|s| Arc::ptr_eq(s, &queue)));
        if in_use {
            return Err(VerbsError::Busy(format!("SRQ {srq} still has QPs")));
        }
        dev.srqs.write().remove(&srq);
        Ok(())
    }

    fn create_ah(&self, pd: u32, attr: &AhAttr) -> VerbsResult<u32> {
        let dev = self.dev();
        dev.check_pd(pd)?;
        dev.check_av(attr)?;
        if attr.port_num > 1 {
            return Err(VerbsError::inval(format!(
                "no port {} (ports: 1)",
                attr.port_num
            )));
        }
        let av = AddressVector {
            pd,
            dst_ip: attr.dgid.to_ip(),
            udp_dst_port: dev.udp_dport_of(attr).unwrap_or(ROCE_UDP_PORT),
        };
        dev.ahs
            .write()
            .insert(av, dev.config.limits.max_ah as usize)
            .ok_or_else(|| VerbsError::nomem("address handle table full"))
    }

    fn destroy_ah(&self, ah: u32) -> VerbsResult<()> {
        if self.dev().ahs.write().remove(ah) {
            Ok(())
        } else {
            Err(VerbsError::NotFound(format!("no address handle {ah}")))
        }
    }

    // Memory windows.

    fn alloc_mw(&self, pd: u32, mw_type: MwType) -> VerbsResult<(u32, u32)> {
        self.dev().check_pd(pd)?;
        self.dev().mem.alloc_window(pd, mw_type)
    }

    fn dealloc_mw(&self, mw: u32) -> VerbsResult<()> {
        self.dev().mem.dealloc_window(mw)
    }

    fn bind_mw(&self, qpn: u32, mw: u32, bind: &MwBind) -> VerbsResult<u32> {
        // As libibverbs with rxe: check what can be checked now, then post a BIND_MW work
        // request carrying the next rkey; the window gets it when the WR executes.
        let info = bind.bind_info;
        if info.mr_lkey == 0 && (info.addr != 0 || info.length != 0) {
            return Err(VerbsError::inval(
                "bind_mw: an address or length without a memory region",
            ));
        }
        let rkey = self.dev().mem.prepare_type1_bind(
            mw,
            info.mr_lkey,
            info.length,
            info.mw_access_flags,
        )?;
        let wr = SendWr {
            wr_id: bind.wr_id,
            opcode: softverbs_api::WrOpcode::BindMw,
            send_flags: bind.send_flags,
            bind_mw: Some(BindMwWr {
                mw,
                rkey,
                bind_info: info,
            }),
            ..SendWr::send(bind.wr_id, Vec::new())
        };
        if let Err(e) = self.post_send(qpn, std::slice::from_ref(&wr)) {
            self.dev().mem.cancel_type1_bind(mw, rkey);
            return Err(e.error);
        }
        Ok(rkey)
    }

    fn create_comp_channel(&self) -> VerbsResult<u32> {
        let mut channels = self.local.channels.lock();
        if channels.len() >= MAX_COMP_CHANNELS {
            return Err(VerbsError::nomem(format!(
                "at most {MAX_COMP_CHANNELS} completion channels per context"
            )));
        }
        let channel = Arc::new(CompChannel::new()?);
        let id = self.local.next_channel.fetch_add(1, Ordering::Relaxed);
        channels.insert(id, channel);
        Ok(id)
    }

    fn destroy_comp_channel(&self, channel: u32) -> VerbsResult<()> {
        let mut channels = self.local.channels.lock();
        let target = channels
            .get(&channel)
            .ok_or_else(|| VerbsError::inval(format!("no completion channel {channel}")))?;
        let cqs = target.attached();
        if cqs > 0 {
            return Err(VerbsError::Busy(format!(
                "completion channel {channel} still has {cqs} CQ(s)"
            )));
        }
        // A thread still waiting in get_cq_event keeps the channel (and its descriptor)
        // alive through its own reference and times out normally.
        channels.remove(&channel);
        Ok(())
    }

    fn comp_channel_fd(&self, channel: u32) -> VerbsResult<RawFd> {
        Ok(self.channel(channel)?.fd())
    }

    fn req_notify_cq(&self, cq: u32, solicited_only: bool) -> VerbsResult<()> {
        // The application is about to sleep: nothing it owes its peers may wait for it, and
        // the engine thread must not nap on, leaving the link to a thread that sleeps.
        let dev = self.dev();
        dev.flush_deferred_acks();
        dev.cq(cq)?.req_notify(solicited_only);
        dev.wake_engine();
        Ok(())
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> VerbsResult<Option<u32>> {
        Ok(self.channel(channel)?.get(timeout))
    }

    fn ack_cq_events(&self, cq: u32, count: u32) -> VerbsResult<()> {
        let target = self.dev().cq(cq)?;
        match target.channel() {
            Some(channel) => channel.ack(cq, count),
            None if count == 0 => Ok(()),
            None => Err(VerbsError::inval(format!(
                "CQ {cq} has no completion channel, so no events to acknowledge"
            ))),
        }
    }

    fn async_event_fd(&self) -> VerbsResult<RawFd> {
        Ok(self.local.events.fd())
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> VerbsResult<Option<AsyncEvent>> {
        Ok(self.local.events.get(timeout))
    }

    fn ack_async_event(&self, event: &AsyncEvent) -> VerbsResult<()> {
        self.local.events.ack(event)
    }
}
