//! Connecting: `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`,
//! `rdma_get_request`, `rdma_establish`, `rdma_notify`, with librdmacm's checks of the
//! id's state and of `rdma_conn_param` (private data limits are the CM core's).

use softverbs_api::VerbsContext as _;
use softverbs_emu::cm::{AcceptParams, ConnectParams};
use softverbs_emu::wire::cm::PortSpace;

use super::abi::*;
use super::channel::{next_event, sv_rdma_ack_cm_event};
use super::devices::CmDevice;
use super::qp::create_qp_on;
use super::shared::{live_id, Phase};
use super::sync::complete;

/// `rdma_conn_param` as the calls use it.
struct Param {
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    qp_num: u32,
    srq: bool,
}

/// Reads `p` (NULL: librdmacm's defaults, the device's limits), checking the READ/atomic
/// depths against the device (EINVAL beyond it; RDMA_MAX_RESP_RES / _INIT_DEPTH mean the
/// device's maximum).
///
/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data pointer is readable for
/// its length.
unsafe fn read_param(p: *const RdmaConnParam, dev: &CmDevice) -> Result<Param, i32> {
    let attr = dev
        .service
        .context()
        .query_device()
        .map_err(|e| e.errno())?;
    let max_resp = attr.max_qp_rd_atom.min(255) as u8;
    let max_init = attr.max_qp_init_rd_atom.min(255) as u8;
    if p.is_null() {
        return Ok(Param {
            private_data: Vec::new(),
            responder_resources: max_resp,
            initiator_depth: max_init,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: 0,
            srq: false,
        });
    }
    // SAFETY: per the contract.
    let p = unsafe { *p };
    let depth = |v: u8, max: u8| match v {
        255 => Ok(max),
        v if v > max => Err(libc::EINVAL),
        v => Ok(v),
    };
    let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: per the contract.
        unsafe {
            std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len.into())
        }
        .to_vec()
    };
    Ok(Param {
        private_data,
        responder_resources: depth(p.responder_resources, max_resp)?,
        initiator_depth: depth(p.initiator_depth, max_init)?,
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        qp_num: p.qp_num,
        srq: p.srq != 0,
    })
}

/// The QP a connection uses: the id's own, which the CM moves, or the one `param`
/// names, which the application moves itself (rdma_init_qp_attr, rdma_establish).
struct ConnQp {
    qpn: u32,
    srq: bool,
    manual: bool,
}

/// The id's QP, else the one `param` names (EINVAL if neither).
fn qp_of(id: *mut RdmaCmId, param: &Param) -> Result<ConnQp, i32> {
    // SAFETY: live id (the caller checked): the library's own fields.
    let (qp, srq) = unsafe { ((*id).qp, (*id).srq) };
    if qp.is_null() {
        if param.qp_num == 0 || param.qp_num > 0x00ff_ffff {
            return Err(libc::EINVAL);
        }
        return Ok(ConnQp {
            qpn: param.qp_num,
            srq: param.srq,
            manual: true,
        });
    }
    // SAFETY: a QP of ours the id holds.
    let (qpn, qp_srq) = unsafe { ((*qp).qp_num, (*qp).srq) };
    Ok(ConnQp {
        qpn,
        srq: !qp_srq.is_null() || !srq.is_null(),
        manual: false,
    })
}

/// `rdma_connect` on a route-resolved id: RC sends the REQ (ESTABLISHED, REJECTED,
/// UNREACHABLE or CONNECT_ERROR follows); UD resolves the service with SIDR.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_connect(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let mut st = inner.state.lock();
    let (Some(dev), Some(local), Some(remote)) = (st.dev.clone(), st.local, st.remote) else {
        return super::fail(libc::EINVAL);
    };
    if st.phase != Phase::RouteResolved {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller passes NULL or a conn_param.
    let param = match unsafe { read_param(param, &dev) } {
        Ok(p) => p,
        Err(e) => return super::fail(e),
    };
    let sink = inner.sink(None);
    let core = if inner.ps == PortSpace::Udp {
        dev.service.sidr_resolve(
            remote.ip(),
            local.port(),
            remote.port(),
            &param.private_data,
            sink,
        )
    } else {
        let qp = match qp_of(id, &param) {
            Ok(q) => q,
            Err(e) => return super::fail(e),
        };
        let path_mtu = dev
            .service
            .context()
            .query_port(1)
            .map_or(3, |p| p.active_mtu as u8);
        dev.service.connect(
            &ConnectParams {
                peer: remote.ip(),
                port_space: inner.ps,
                dst_port: remote.port(),
                src_port: local.port(),
                qpn: qp.qpn,
                responder_resources: param.responder_resources,
                initiator_depth: param.initiator_depth,
                retry_count: param.retry_count,
                rnr_retry_count: param.rnr_retry_count,
                path_mtu,
                srq: qp.srq,
                private_data: param.private_data,
                qp_ack_timeout: st.ack_timeout,
                manual_qp: qp.manual,
            },
            sink,
        )
    };
    match core {
        Ok(core) => {
            st.core = Some(core);
            st.phase = Phase::Connecting;
        }
        Err(e) => return super::fail(e.errno()),
    }
    drop(st);
    complete(&inner)
}

/// `rdma_accept` of a CONNECT_REQUEST's id: RC moves the QP to RTR and RTS and sends the
/// REP (ESTABLISHED follows with the RTU); UD answers the SIDR request with the QP and
/// rdma_cm's Q_Key. EINVAL on an id that is not a request.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_accept(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let mut st = inner.state.lock();
    let (Some(dev), Some(core)) = (st.dev.clone(), st.core) else {
        return super::fail(libc::EINVAL);
    };
    if st.phase != Phase::Requested {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: the caller passes NULL or a conn_param.
    let param = match unsafe { read_param(param, &dev) } {
        Ok(p) => p,
        Err(e) => return super::fail(e),
    };
    let qp = match qp_of(id, &param) {
        Ok(q) => q,
        Err(e) => return super::fail(e),
    };
    if inner.ps == PortSpace::Udp {
        if let Err(e) = dev
            .service
            .sidr_accept(core, qp.qpn, RDMA_UDP_QKEY, &param.private_data)
        {
            return super::fail(e.errno());
        }
        st.phase = Phase::Connected;
        return 0;
    }
    let accepted = AcceptParams {
        qpn: qp.qpn,
        responder_resources: param.responder_resources.min(st.offered.initiator_depth),
        initiator_depth: param.initiator_depth.min(st.offered.responder_resources),
        rnr_retry_count: param.rnr_retry_count,
        srq: qp.srq,
        private_data: param.private_data,
        qp_ack_timeout: st.ack_timeout,
        manual_qp: qp.manual,
    };
    if let Err(e) = dev.service.accept(core, &accepted) {
        return super::fail(e.errno());
    }
    st.phase = Phase::Connecting;
    drop(st);
    complete(&inner)
}

/// `rdma_reject` of a CONNECT_REQUEST's id: the peer gets REJECTED (reason 28, consumer
/// reject) with the private data (at most 148 bytes; 136 for UD).
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_reject(
    id: *mut RdmaCmId,
    private_data: *const std::ffi::c_void,
    private_data_len: u8,
) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let data = if private_data.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller passes private_data_len readable bytes.
        unsafe { std::slice::from_raw_parts(private_data as *const u8, private_data_len.into()) }
    };
    let mut st = inner.state.lock();
    let (Some(dev), Some(core)) = (st.dev.clone(), st.core) else {
        return super::fail(libc::EINVAL);
    };
    if st.phase != Phase::Requested {
        return super::fail(libc::EINVAL);
    }
    let done = match inner.ps {
        PortSpace::Udp => dev.service.sidr_reject(core, data),
        _ => dev.service.reject(core, data),
    };
    if let Err(e) = done {
        return super::fail(e.errno());
    }
    if inner.ps != PortSpace::Udp {
        st.core = None;
    }
    st.phase = Phase::Failed;
    0
}

/// `rdma_disconnect`: the QP goes to ERR (its work flushes) and the DREQ goes out;
/// DISCONNECTED then TIMEWAIT_EXIT follow. As the kernel's, it succeeds on any id that
/// has had a connection, also once the peer disconnected first (the DREQ or DREP that
/// cannot be sent any more is dropped); EINVAL on an id that never connected. A
/// synchronous id that sent the DREQ waits for its DISCONNECTED.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_disconnect(id: *mut RdmaCmId) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    let st = inner.state.lock();
    let had_connection = matches!(
        st.phase,
        Phase::Requested | Phase::Connecting | Phase::Connected | Phase::Disconnected
    );
    let Some(dev) = st.dev.clone() else {
        return super::fail(libc::EINVAL);
    };
    if !had_connection || inner.ps == PortSpace::Udp {
        return super::fail(libc::EINVAL);
    }
    let sent = st
        .core
        .is_some_and(|core| dev.service.disconnect(core).is_ok());
    drop(st);
    // SAFETY: live id: its own QP, if it has one, goes to ERR as the kernel's
    // cma_modify_qp_err does (the CM did so already when it sent the DREQ).
    let qp = unsafe { (*id).qp };
    if !sent && !qp.is_null() {
        let mut attr = softverbs_api::c_layout::IbvQpAttr {
            qp_state: 6, // IBV_QPS_ERR
            ..Default::default()
        };
        // SAFETY: a QP of ours the id holds.
        unsafe { crate::qp::sv_ibv_modify_qp(qp, &mut attr as *mut _ as *mut _, 1) };
    }
    // A DREQ sent: DISCONNECTED follows (on the DREP, or after the DREQ's retries).
    if sent {
        return complete(&inner);
    }
    0
}

/// `rdma_get_request` on a listening id: waits for the next CONNECT_REQUEST on its
/// channel (other events are acknowledged and skipped, as librdmacm does), gives the new
/// id the QP of `rdma_create_ep`'s attributes if the listener has them, and keeps the
/// request event in the new id's `event`.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_get_request(listen: *mut RdmaCmId, id: *mut *mut RdmaCmId) -> i32 {
    if id.is_null() {
        return super::fail(libc::EINVAL);
    }
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(listen) }) else {
        return super::fail(libc::EINVAL);
    };
    if inner.state.lock().phase != Phase::Listening {
        return super::fail(libc::EINVAL);
    }
    let channel = inner.channel.lock().clone();
    let event = loop {
        let event = match next_event(&channel) {
            Ok(e) => e,
            Err(e) => return super::fail(e),
        };
        // SAFETY: a live event of ours.
        if unsafe { (*event).event } == event::CONNECT_REQUEST {
            break event;
        }
        // SAFETY: as above.
        unsafe { sv_rdma_ack_cm_event(event) };
    };
    // SAFETY: a live request event: its id is the new, live id.
    let new_id = unsafe { (*event).id };
    let ep_attr = inner
        .state
        .lock()
        .ep_qp_attr
        .as_ref()
        .map(|e| (e.pd, e.attr_copy()));
    if let Some((pd, mut attr)) = ep_attr {
        // SAFETY: new_id is live; attr is the listener's saved copy.
        let made = unsafe { create_qp_on(new_id, pd as *mut crate::abi::IbvPd, &mut attr) };
        if let Err(e) = made {
            // SAFETY: as above; the request is refused and its id goes.
            unsafe {
                sv_rdma_reject(new_id, std::ptr::null(), 0);
                sv_rdma_ack_cm_event(event);
                super::id::sv_rdma_destroy_id(new_id);
            }
            return super::fail(e);
        }
    }
    // SAFETY: new_id is live; the event is handed to it as librdmacm does.
    unsafe {
        (*new_id).event = event;
        *id = new_id;
    }
    0
}

/// `rdma_establish`: an active id whose application moves its own QP (no QP on the id,
/// CONNECT_RESPONSE received, the QP moved with rdma_init_qp_attr's attributes) sends the
/// RTU. EINVAL for an id with a QP (the CM moved that one already) or in another state.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_establish(id: *mut RdmaCmId) -> i32 {
    // SAFETY: checked live inside.
    let Some(inner) = (unsafe { live_id(id) }) else {
        return super::fail(libc::EINVAL);
    };
    // SAFETY: live id: the library's own field.
    if !unsafe { (*id).qp }.is_null() {
        return super::fail(libc::EINVAL);
    }
    let mut st = inner.state.lock();
    let (Some(dev), Some(core)) = (st.dev.clone(), st.core) else {
        return super::fail(libc::EINVAL);
    };
    match dev.service.establish(core) {
        Ok(()) => {
            st.phase = Phase::Connected;
            0
        }
        Err(e) => super::fail(e.errno()),
    }
}

/// `rdma_notify`: the application saw the first packet on a passive QP
/// (IBV_EVENT_COMM_EST); the device's CM learns that on its own, so this only checks
/// the id.
#[no_mangle]
pub unsafe extern "C" fn sv_rdma_notify(id: *mut RdmaCmId, _event: u32) -> i32 {
    // SAFETY: checked live inside.
    match unsafe { live_id(id) } {
        Some(_) => 0,
        None => super::fail(libc::EINVAL),
    }
}
