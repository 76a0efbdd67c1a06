//! The CM part of `softverbs decode`: a MAD on QP1 named by message, with its
//! communication IDs, transaction ID, service ID (port space and port), rdma_cm's
//! addresses, QPN and PSN, and a REJ's reason or a SIDR_REP's status.

use softverbs_emu::wire::cm::{
    mad::MGMT_CLASS_CM, parse_ip_service_id, rej_reason, CmMad, CmMessage, CmaHdr,
};
use softverbs_emu::wire::RoceRepr;

/// The CM text of `repr` if it is a MAD for QP1 (with a leading space), else `None`.
pub fn describe(repr: &RoceRepr<'_>) -> Option<String> {
    if repr.bth.dest_qp != 1 || repr.deth.is_none() {
        return None;
    }
    let class = repr.payload.get(1).copied();
    if class != Some(MGMT_CLASS_CM) {
        return Some(format!(" mad(class=0x{:02x}, not CM)", class.unwrap_or(0)));
    }
    let mad = match CmMad::parse(repr.payload) {
        Ok(mad) => mad,
        Err(e) => return Some(format!(" cm MALFORMED: {e}")),
    };
    let tid = mad.header.transaction_id;
    let m = &mad.message;
    let body = match m {
        CmMessage::Req(r) => format!(
            "local_id=0x{:08x} {} qpn=0x{:06x} psn=0x{:06x}{}",
            r.local_comm_id,
            service(r.service_id),
            r.local_qpn,
            r.starting_psn,
            cma(&r.private_data)
        ),
        CmMessage::Rep(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x} qpn=0x{:06x} psn=0x{:06x}",
            r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
        ),
        CmMessage::Rej(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x} reason={} ({}) rejected={}",
            r.local_comm_id,
            r.remote_comm_id,
            r.reason,
            reason_name(r.reason),
            ["REQ", "REP", "other", "?"][usize::from(r.message_rejected & 3)]
        ),
        CmMessage::Mra(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Rtu(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Dreq(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x} remote_qpn=0x{:06x}",
            r.local_comm_id, r.remote_comm_id, r.remote_qpn_eecn
        ),
        CmMessage::Drep(r) => format!(
            "local_id=0x{:08x} remote_id=0x{:08x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::SidrReq(r) => format!(
            "request_id=0x{:08x} {}{}",
            r.request_id,
            service(r.service_id),
            cma(&r.private_data)
        ),
        CmMessage::SidrRep(r) => format!(
            "request_id=0x{:08x} status={} {} qpn=0x{:06x} qkey=0x{:08x}",
            r.request_id,
            r.status,
            service(r.service_id),
            r.qpn,
            r.qkey
        ),
        CmMessage::ClassPortInfo(_) => format!(
            "method=0x{:02x} status=0x{:04x}",
            mad.header.method, mad.header.status
        ),
    };
    Some(format!(" cm={} tid=0x{tid:016x} {body}", m.name()))
}

/// A service ID, with its port space and port when rdma_cm made it.
fn service(sid: u64) -> String {
    match parse_ip_service_id(sid) {
        Some((space, port)) => format!("sid=0x{sid:016x}({space:?}:{port})"),
        None => format!("sid=0x{sid:016x}"),
    }
}

/// rdma_cm's addresses from the private data header, if it carries one.
fn cma(private_data: &[u8]) -> String {
    match CmaHdr::parse(private_data) {
        Ok(h) => format!(" src={}:{} dst={}", h.src_addr, h.src_port, h.dst_addr),
        Err(_) => String::new(),
    }
}

/// The IBA name of a REJ reason (table 109).
pub fn reason_name(reason: u16) -> &'static str {
    match reason {
        rej_reason::NO_QP => "no QP available",
        rej_reason::NO_RESOURCES => "no resources",
        rej_reason::TIMEOUT => "timeout",
        rej_reason::UNSUPPORTED_REQUEST => "unsupported request",
        rej_reason::INVALID_COMM_ID => "invalid communication ID",
        rej_reason::INVALID_COMM_INSTANCE => "invalid communication instance",
        rej_reason::INVALID_SERVICE_ID => "invalid service ID",
        rej_reason::INVALID_TRANSPORT_TYPE => "invalid transport type",
        rej_reason::STALE_CONNECTION => "stale connection",
        rej_reason::INVALID_MTU => "invalid MTU",
        rej_reason::INSUFFICIENT_RESP_RESOURCES => "insufficient responder resources",
        rej_reason::CONSUMER_REJECT => "consumer reject",
        rej_reason::INVALID_RNR_RETRY => "invalid RNR retry count",
        rej_reason::DUPLICATE_LOCAL_COMM_ID => "duplicate local communication ID",
        rej_reason::INVALID_CLASS_VERSION => "invalid class version",
        _ => "other",
    }
}
