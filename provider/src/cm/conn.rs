//! The calls that bind, resolve, listen, connect, accept, reject and disconnect an id,
//! with librdmacm's state checks and limits (private data lengths are the core's,
//! `softverbs_emu::cm::private_data_max`), and what a core event means for the id.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use softverbs_api::{
    AccessFlags, AhAttr, Gid, QpAttr, QpAttrMask, QpCap, QpState, QpType, VerbsError, VerbsResult,
};
use softverbs_emu::cm::{AcceptParams, CmEventKind as CoreKind, ConnectParams};
use softverbs_emu::wire::cm::PortSpace;

use crate::cm::addr::{self, Device};
use crate::cm::event::{CmEvent, EventType, UdEventParam};
use crate::cm::shared::{core_err, service_of, CmId, ConnEventParam, IdShared, IdState, Phase};
use crate::cm::wildcard;
use crate::pd::Pd;

/// The Q_Key rdma_cm gives UD QPs of the UDP port space (RDMA_UDP_QKEY).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `struct rdma_conn_param`: what connect and accept offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer: at most 56 bytes on connect (TCP; 180 for UDP), 196
    /// on accept, 148 on reject.
    pub private_data: Vec<u8>,
    /// Incoming RDMA READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests this side issues in parallel.
    pub initiator_depth: u8,
    /// Transport retries (0..=7, 7 = infinite).
    pub retry_count: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam {
    /// Default parameters with `private_data`.
    pub fn with_private_data(private_data: &[u8]) -> ConnParam {
        ConnParam {
            private_data: private_data.to_vec(),
            ..ConnParam::default()
        }
    }
}

/// What `create_qp` makes (`ibv_qp_init_attr` for rdma_create_qp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpOptions {
    /// Queue sizes and limits.
    pub cap: QpCap,
    /// Every send completes, whatever its flags.
    pub sq_sig_all: bool,
}

impl Default for QpOptions {
    fn default() -> Self {
        QpOptions {
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        }
    }
}

fn state_err(what: &str, phase: Phase) -> VerbsError {
    VerbsError::inval(format!("{what} is not valid on an id in state {phase:?}"))
}

impl CmId {
    /// `rdma_bind_addr`: binds to the device whose address is `addr`'s IP and takes its
    /// port (0: an ephemeral one). The wildcard address (0.0.0.0 or ::) binds every
    /// device of its family, as librdmacm does: a listen then takes the requests of all.
    /// EADDRNOTAVAIL if no device has that address, EADDRINUSE if the port is taken.
    pub fn bind_addr(&self, addr: SocketAddr) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::Idle {
            return Err(state_err("bind_addr", st.phase));
        }
        if addr.ip().is_unspecified() {
            wildcard::bind_all(&mut st, self.shared.ps, addr)?;
            st.phase = Phase::Bound;
            return Ok(());
        }
        let dev = addr::open_device_for(addr.ip())?;
        bind_on(&mut st, self.shared.ps, dev, addr)?;
        st.phase = Phase::Bound;
        Ok(())
    }

    /// `rdma_resolve_addr`: binds (if not bound) to the device `src` names, or to the one
    /// that reaches `dst`; ADDR_RESOLVED follows on the channel, or ADDR_ERROR (status
    /// -EHOSTUNREACH) for a loopback destination no device is bound to.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout: Duration,
    ) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        match st.phase {
            Phase::Idle => {
                let ip = match src {
                    Some(s) if !s.ip().is_unspecified() => s.ip(),
                    _ => addr::source_for(dst.ip())?,
                };
                let dev = addr::open_device_for(ip)?;
                let port = src.map_or(0, |s| s.port());
                bind_on(&mut st, self.shared.ps, dev, SocketAddr::new(ip, port))?;
            }
            // Bound to the wildcard: the route picks the device, the port stays.
            Phase::Bound if st.dev.is_none() => {
                let port = st.local.map_or(0, |l| l.port());
                wildcard::release_all(&mut st, self.shared.ps, false);
                st.wildcard.clear();
                let ip = addr::source_for(dst.ip())?;
                let dev = addr::open_device_for(ip)?;
                bind_on(&mut st, self.shared.ps, dev, SocketAddr::new(ip, port))?;
            }
            Phase::Bound => {}
            p => return Err(state_err("resolve_addr", p)),
        }
        let dst = SocketAddr::new(addr::canonical(dst.ip()), dst.port());
        let local_v4 = st.local.is_some_and(|l| l.is_ipv4());
        if local_v4 != dst.is_ipv4() {
            return Err(VerbsError::inval(
                "source and destination address families differ",
            ));
        }
        st.remote = Some(dst);
        if addr::reachable(dst.ip())? {
            st.phase = Phase::AddrResolved;
            drop(st);
            self.shared.post_local(EventType::AddrResolved, 0);
        } else {
            drop(st);
            self.shared
                .post_local(EventType::AddrError, -libc::EHOSTUNREACH);
        }
        Ok(())
    }

    /// `rdma_resolve_route`: ROUTE_RESOLVED follows (a RoCE route is its addresses).
    pub fn resolve_route(&self, _timeout: Duration) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::AddrResolved {
            return Err(state_err("resolve_route", st.phase));
        }
        st.phase = Phase::RouteResolved;
        drop(st);
        self.shared.post_local(EventType::RouteResolved, 0);
        Ok(())
    }

    /// `rdma_listen` on a bound id: requests for its port arrive as CONNECT_REQUEST
    /// events, each with a new id. (The backlog is the CM's connection limit.)
    pub fn listen(&self, _backlog: u32) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::Bound {
            return Err(state_err("listen", st.phase));
        }
        if st.wildcard.is_empty() {
            let service = service_of(&st)?;
            let port = st.local.map_or(0, |l| l.port());
            service
                .listen(self.shared.ps, port, self.shared.sink())
                .map_err(core_err)?;
        } else {
            wildcard::listen_all(&st, &self.shared)?;
        }
        st.phase = Phase::Listening;
        Ok(())
    }

    /// `rdma_create_qp`: a QP for this id in `pd` (`None`: a PD of its own), with a send
    /// and a receive CQ of its own; RC QPs are left in INIT (the CM moves them on), UD
    /// QPs go to RTS with rdma_cm's Q_Key.
    pub fn create_qp(&self, pd: Option<&Pd>, opts: &QpOptions) -> VerbsResult<crate::Qp> {
        let mut st = self.shared.state.lock();
        if st.qp.is_some() {
            return Err(VerbsError::inval("the id has a QP already"));
        }
        let ctx = st
            .dev
            .as_ref()
            .map(|d| d.ctx.clone())
            .ok_or_else(|| VerbsError::inval("create_qp needs a bound or resolved id"))?;
        let pd = match pd {
            Some(pd) => pd.clone(),
            None => ctx.alloc_pd()?,
        };
        let send_cq = ctx.create_cq(opts.cap.max_send_wr.max(1))?;
        let recv_cq = ctx.create_cq(opts.cap.max_recv_wr.max(1))?;
        let qp_type = match self.shared.ps {
            PortSpace::Udp => QpType::Ud,
            _ => QpType::Rc,
        };
        let qp = pd
            .qp_builder()
            .qp_type(qp_type)
            .cap(opts.cap)
            .sq_sig_all(opts.sq_sig_all)
            .build(&send_cq, &recv_cq)?;
        if qp_type == QpType::Ud {
            qp.activate_ud(RDMA_UDP_QKEY, 0)?;
        } else {
            let init = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC,
                ..QpAttr::default()
            };
            let mask = QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS;
            qp.modify(&init, mask)?;
        }
        st.pd = Some(pd);
        st.send_cq = Some(send_cq);
        st.recv_cq = Some(recv_cq);
        st.qp = Some(qp.clone());
        Ok(qp)
    }

    /// `rdma_connect` on a route-resolved id with a QP: RC sends the REQ (ESTABLISHED,
    /// REJECTED, UNREACHABLE or CONNECT_ERROR follows); UD resolves the service with SIDR
    /// (ESTABLISHED with where to send, or UNREACHABLE).
    pub fn connect(&self, param: &ConnParam) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::RouteResolved {
            return Err(state_err("connect", st.phase));
        }
        let service = service_of(&st)?;
        let (local, remote) = match (st.local, st.remote) {
            (Some(l), Some(r)) => (l, r),
            _ => return Err(VerbsError::inval("connect before resolving the route")),
        };
        let qp = st
            .qp
            .clone()
            .ok_or_else(|| VerbsError::inval("connect needs a QP (create_qp first)"))?;
        let sink = self.shared.sink();
        let core = if self.shared.ps == PortSpace::Udp {
            service.sidr_resolve(
                remote.ip(),
                local.port(),
                remote.port(),
                &param.private_data,
                sink,
            )
        } else {
            let ctx = st.dev.as_ref().map(|d| d.ctx.clone());
            let path_mtu = match ctx {
                Some(ctx) => ctx.query_port(1)?.active_mtu as u8,
                None => 3,
            };
            let p = ConnectParams {
                peer: remote.ip(),
                port_space: self.shared.ps,
                dst_port: remote.port(),
                src_port: local.port(),
                qpn: qp.qp_num(),
                responder_resources: param.responder_resources,
                initiator_depth: param.initiator_depth,
                retry_count: param.retry_count,
                rnr_retry_count: param.rnr_retry_count,
                path_mtu,
                srq: qp.srq().is_some(),
                private_data: param.private_data.clone(),
                qp_ack_timeout: None,
                manual_qp: false,
            };
            service.connect(&p, sink)
        }
        .map_err(core_err)?;
        st.core = Some(core);
        st.phase = Phase::Connecting;
        Ok(())
    }

    /// `rdma_accept` of a CONNECT_REQUEST's id (with a QP): RC moves the QP to RTR and
    /// RTS and sends the REP (ESTABLISHED follows on the RTU); UD answers the SIDR request
    /// with the QP and rdma_cm's Q_Key. EINVAL on an id that is not a request.
    pub fn accept(&self, param: &ConnParam) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::Requested {
            return Err(state_err("accept", st.phase));
        }
        let service = service_of(&st)?;
        let core = st.core.ok_or_else(|| state_err("accept", st.phase))?;
        let qp = st
            .qp
            .clone()
            .ok_or_else(|| VerbsError::inval("accept needs a QP (create_qp first)"))?;
        if self.shared.ps == PortSpace::Udp {
            service
                .sidr_accept(core, qp.qp_num(), RDMA_UDP_QKEY, &param.private_data)
                .map_err(core_err)?;
            st.phase = Phase::Connected;
            return Ok(());
        }
        let p = AcceptParams {
            qpn: qp.qp_num(),
            responder_resources: param.responder_resources.min(st.offered.initiator_depth),
            initiator_depth: param.initiator_depth.min(st.offered.responder_resources),
            rnr_retry_count: param.rnr_retry_count,
            srq: qp.srq().is_some(),
            private_data: param.private_data.clone(),
            qp_ack_timeout: None,
            manual_qp: false,
        };
        service.accept(core, &p).map_err(core_err)?;
        st.phase = Phase::Connecting;
        Ok(())
    }

    /// `rdma_reject` of a CONNECT_REQUEST's id: the peer gets REJECTED (reason 28,
    /// consumer reject) with `private_data` (at most 148 bytes; 136 for UD).
    pub fn reject(&self, private_data: &[u8]) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        if st.phase != Phase::Requested {
            return Err(state_err("reject", st.phase));
        }
        let service = service_of(&st)?;
        let core = st.core.ok_or_else(|| state_err("reject", st.phase))?;
        if self.shared.ps == PortSpace::Udp {
            service.sidr_reject(core, private_data).map_err(core_err)?;
        } else {
            service.reject(core, private_data).map_err(core_err)?;
            st.core = None;
        }
        st.phase = Phase::Failed;
        Ok(())
    }

    /// `rdma_disconnect`: the QP goes to ERR (its work flushes), the DREQ goes out;
    /// DISCONNECTED then TIMEWAIT_EXIT follow.
    pub fn disconnect(&self) -> VerbsResult<()> {
        let st = self.shared.state.lock();
        if !matches!(st.phase, Phase::Connected | Phase::Connecting)
            || self.shared.ps == PortSpace::Udp
        {
            return Err(state_err("disconnect", st.phase));
        }
        let service = service_of(&st)?;
        let core = st.core.ok_or_else(|| state_err("disconnect", st.phase))?;
        service.disconnect(core).map_err(core_err)
    }
}

/// Binds `st` to `dev` at `addr` (port 0: ephemeral).
fn bind_on(st: &mut IdState, ps: PortSpace, dev: Device, addr: SocketAddr) -> VerbsResult<()> {
    let port = dev.service.bind_port(ps, addr.port()).map_err(core_err)?;
    st.local = Some(SocketAddr::new(addr::canonical(addr.ip()), port));
    st.port_held = true;
    st.dev = Some(dev);
    Ok(())
}

/// The event a core outcome is for the application.
pub(crate) fn outcome(id: &Arc<IdShared>, kind: CoreKind) -> VerbsResult<Option<CmEvent>> {
    let mut e = CmEvent {
        event: EventType::Established,
        id: CmId::from_shared(id.clone()),
        listen_id: None,
        status: 0,
        private_data: Vec::new(),
        conn: ConnEventParam::default(),
        ud: None,
    };
    match kind {
        CoreKind::Established {
            remote_qpn,
            private_data,
        } => {
            e.conn.qp_num = remote_qpn;
            e.private_data = private_data;
        }
        CoreKind::Rejected(r) => {
            e.event = EventType::Rejected;
            e.status = i32::from(r.reason);
            e.private_data = r.private_data;
        }
        CoreKind::Unreachable => {
            e.event = EventType::Unreachable;
            e.status = -libc::ETIMEDOUT;
        }
        CoreKind::ConnectError => {
            e.event = EventType::ConnectError;
            e.status = -libc::EINVAL;
        }
        CoreKind::Disconnected => e.event = EventType::Disconnected,
        CoreKind::TimewaitExit => e.event = EventType::TimewaitExit,
        CoreKind::SidrResolved {
            qpn,
            qkey,
            private_data,
        } => {
            let ah = ud_ah(id)?;
            id.state.lock().ud_dest = Some((ah.clone(), qpn, qkey));
            e.conn.qp_num = qpn;
            e.private_data = private_data;
            e.ud = Some(UdEventParam {
                qp_num: qpn,
                qkey,
                ah,
            });
        }
        CoreKind::SidrFailed { status } => {
            e.event = EventType::Unreachable;
            e.status = status.map_or(-libc::ETIMEDOUT, i32::from);
        }
        // Requests are made into events elsewhere; ConnectResponse only comes to ids
        // whose application moves its own QP, which this API's ids never do.
        CoreKind::ConnectRequest { .. }
        | CoreKind::SidrRequest { .. }
        | CoreKind::ConnectResponse { .. } => return Ok(None),
    }
    Ok(Some(e))
}

/// An address handle from a UD id's PD to its peer.
fn ud_ah(id: &Arc<IdShared>) -> VerbsResult<crate::Ah> {
    let st = id.state.lock();
    let pd = st
        .pd
        .clone()
        .ok_or_else(|| VerbsError::inval("a UD id resolves with a QP"))?;
    let peer: IpAddr = st
        .remote
        .map(|r| r.ip())
        .ok_or_else(|| VerbsError::inval("no peer"))?;
    drop(st);
    pd.create_ah(&AhAttr {
        dgid: Gid::from_ip(peer),
        sgid_index: 1,
        hop_limit: 64,
        port_num: 1,
        ..AhAttr::default()
    })
}
