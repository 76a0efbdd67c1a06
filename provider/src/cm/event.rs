//! An event of an event channel (`struct rdma_cm_event`) and what it carries.

use crate::ah::Ah;
pub use crate::cm::event_type::EventType;
use crate::cm::shared::{CmId, ConnEventParam};

/// `rdma_ud_param`: where to send on a resolved UD id.
#[derive(Clone)]
pub struct UdEventParam {
    /// The serving QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// An address handle to it, in the id's PD.
    pub ah: Ah,
}

impl std::fmt::Debug for UdEventParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdEventParam")
            .field("qp_num", &self.qp_num)
            .field("qkey", &self.qkey)
            .finish()
    }
}

/// `struct rdma_cm_event`. Dropping it is `rdma_ack_cm_event`.
#[derive(Debug, Clone)]
pub struct CmEvent {
    /// What happened.
    pub event: EventType,
    /// The id it happened on (for CONNECT_REQUEST: the new id, to accept or reject).
    pub id: CmId,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmId>,
    /// 0, a negative errno, or for REJECTED the IB reject reason.
    pub status: i32,
    /// The peer's private data (REQ's after rdma_cm's header, REP's, REJ's, SIDR's ...).
    pub private_data: Vec<u8>,
    /// Connection parameters (CONNECT_REQUEST, ESTABLISHED).
    pub conn: ConnEventParam,
    /// For an ESTABLISHED UD id: where to send.
    pub ud: Option<UdEventParam>,
}
