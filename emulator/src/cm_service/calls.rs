//! The calls rdma_cm makes on a device's CM: ports, listen, connect, accept, reject,
//! disconnect, destroy and SIDR. Each routes the id's events to a sink and runs the core
//! through [`CmService::with_core`], which does what the core asks.

use std::net::IpAddr;
use std::sync::Arc;

use super::service::{CmEventSink, CmService};
use crate::cm::{AcceptParams, CmError, CmId, ConnInfo, ConnectParams, RtrAttrs, RtsAttrs};
use crate::wire::cm::{ip_service_id, PortSpace};

impl CmService {
    /// rdma_bind_addr's port: takes `port` of `space` (0: an ephemeral one) and returns it.
    /// EADDRINUSE if taken.
    pub fn bind_port(&self, space: PortSpace, port: u16) -> Result<u16, CmError> {
        self.state.lock().ports.bind(space, port)
    }

    /// Gives a bound port back.
    pub fn release_port(&self, space: PortSpace, port: u16) {
        self.state.lock().ports.release(space, port);
    }

    /// rdma_listen on a bound port: requests for it (SIDR requests for the UDP space) go
    /// to `sink` as CONNECT_REQUEST events, each with a new id. Returns the service ID.
    pub fn listen(
        &self,
        space: PortSpace,
        port: u16,
        sink: Arc<dyn CmEventSink>,
    ) -> Result<u64, CmError> {
        let sid = self.with_core(|st, _| {
            let sid = st.mgr.listen(space, port)?;
            st.listeners.insert(sid, sink);
            Ok(sid)
        })?;
        // Other processes sharing the device pass requests for it on to this one.
        if self.ctx.share_listen(sid).is_err() {
            let _ = self.unlisten(space, port);
            return Err(CmError::AddressInUse(sid));
        }
        Ok(sid)
    }

    /// Stops listening on `space`/`port`; requests already delivered are not affected.
    pub fn unlisten(&self, space: PortSpace, port: u16) -> Result<(), CmError> {
        let sid = ip_service_id(space, port);
        self.ctx.share_unlisten(sid);
        self.with_core(|st, _| {
            st.listeners.remove(&sid);
            st.mgr.unlisten(sid)
        })
    }

    /// rdma_connect (RC): sends the REQ; the outcome comes to `sink`.
    pub fn connect(
        &self,
        params: &ConnectParams,
        sink: Arc<dyn CmEventSink>,
    ) -> Result<CmId, CmError> {
        self.with_core(|st, now_ns| {
            let id = st.mgr.connect(now_ns, params)?;
            st.routes.insert(id.0, sink);
            st.qp_owner.insert(params.qpn, id);
            Ok(id)
        })
    }

    /// rdma_accept of a CONNECT_REQUEST: moves the QP to RTR and RTS, sends the REP.
    pub fn accept(&self, id: CmId, params: &AcceptParams) -> Result<(), CmError> {
        self.with_core(|st, now_ns| {
            st.mgr.accept(now_ns, id, params)?;
            st.qp_owner.insert(params.qpn, id);
            Ok(())
        })
    }

    /// rdma_reject of a CONNECT_REQUEST (REJ "consumer reject" with `private_data`).
    pub fn reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        self.with_core(|st, _| {
            st.mgr.reject(id, private_data)?;
            st.routes.remove(&id.0);
            Ok(())
        })
    }

    /// rdma_disconnect: QP to ERR, DREQ; DISCONNECTED and TIMEWAIT_EXIT follow.
    pub fn disconnect(&self, id: CmId) -> Result<(), CmError> {
        self.with_core(|st, now_ns| st.mgr.disconnect(now_ns, id))
    }

    /// rdma_destroy_id of a connection: no more events for it; the core finishes the
    /// protocol (REJ or DREQ as the state needs) on its own.
    pub fn destroy(&self, id: CmId) -> Result<(), CmError> {
        self.with_core(|st, now_ns| {
            st.routes.remove(&id.0);
            st.qp_owner.retain(|_, owner| *owner != id);
            st.mgr.destroy(now_ns, id)
        })
    }

    /// rdma_destroy_id of an id's connection or SIDR request in `space`: [`Self::destroy`]
    /// or [`Self::sidr_destroy`].
    pub fn destroy_in(&self, space: PortSpace, id: CmId) -> Result<(), CmError> {
        match space {
            PortSpace::Udp => self.sidr_destroy(id),
            _ => self.destroy(id),
        }
    }

    /// Ends a request that reached a listener destroyed before the application took it:
    /// a SIDR reject (UDP space) or a REJ, and the core forgets it.
    pub fn end_untaken_request(&self, space: PortSpace, id: CmId) {
        let _ = match space {
            PortSpace::Udp => self
                .sidr_reject(id, &[])
                .and_then(|()| self.sidr_destroy(id)),
            _ => self.destroy(id),
        };
    }

    /// Routes the events of `id` to `sink` from now on (rdma_migrate_id, or a request's
    /// new id getting its own sink).
    pub fn reroute(&self, id: CmId, sink: Arc<dyn CmEventSink>) {
        self.state.lock().routes.insert(id.0, sink);
    }

    /// rdma_establish: sends the RTU of a connection whose application moved its own QP
    /// after CONNECT_RESPONSE.
    pub fn establish(&self, id: CmId) -> Result<(), CmError> {
        self.with_core(|st, _| st.mgr.establish(id))
    }

    /// The RTR and RTS attributes of connection `id`'s QP (rdma_init_qp_attr).
    pub fn qp_attrs(&self, id: CmId) -> Option<(RtrAttrs, RtsAttrs)> {
        self.state.lock().mgr.qp_attrs(id)
    }

    /// A snapshot of connection `id`.
    pub fn info(&self, id: CmId) -> Option<ConnInfo> {
        self.state.lock().mgr.info(id)
    }

    /// rdma_connect on a UDP id: SIDR_REQ to `peer`; SidrResolved or SidrFailed to `sink`.
    pub fn sidr_resolve(
        &self,
        peer: IpAddr,
        src_port: u16,
        dst_port: u16,
        private_data: &[u8],
        sink: Arc<dyn CmEventSink>,
    ) -> Result<CmId, CmError> {
        self.with_core(|st, now_ns| {
            let id = st
                .mgr
                .sidr_resolve(now_ns, peer, src_port, dst_port, private_data)?;
            st.routes.insert(id.0, sink);
            Ok(id)
        })
    }

    /// rdma_accept of a SIDR request: answers with UD QP `qpn` and `qkey`.
    pub fn sidr_accept(
        &self,
        id: CmId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.with_core(|st, now_ns| st.mgr.sidr_accept(now_ns, id, qpn, qkey, private_data))
    }

    /// rdma_reject of a SIDR request.
    pub fn sidr_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        self.with_core(|st, now_ns| st.mgr.sidr_reject(now_ns, id, private_data))
    }

    /// rdma_destroy_id of a UD id with a SIDR request in either role.
    pub fn sidr_destroy(&self, id: CmId) -> Result<(), CmError> {
        self.with_core(|st, _| {
            st.routes.remove(&id.0);
            st.mgr.sidr_destroy(id)
        })
    }
}
