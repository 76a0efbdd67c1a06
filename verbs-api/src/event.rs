//! Asynchronous events (`ibv_get_async_event`) and completion events (`ibv_get_cq_event`).

/// `enum ibv_event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// IBV_EVENT_CQ_ERR: the CQ overran; it is in error.
    CqErr,
    /// IBV_EVENT_QP_FATAL: the QP hit an error that is not the peer's fault and moved to ERR.
    QpFatal,
    /// IBV_EVENT_QP_REQ_ERR: the QP received an invalid request and moved to ERR.
    QpReqErr,
    /// IBV_EVENT_QP_ACCESS_ERR: a remote access violation moved the QP to ERR.
    QpAccessErr,
    /// IBV_EVENT_COMM_EST: the first packet arrived on a QP in RTR.
    CommEst,
    /// IBV_EVENT_SQ_DRAINED.
    SqDrained,
    /// IBV_EVENT_PATH_MIG.
    PathMig,
    /// IBV_EVENT_PATH_MIG_ERR.
    PathMigErr,
    /// IBV_EVENT_DEVICE_FATAL.
    DeviceFatal,
    /// IBV_EVENT_PORT_ACTIVE: the port went active.
    PortActive,
    /// IBV_EVENT_PORT_ERR: the port went down.
    PortErr,
    /// IBV_EVENT_LID_CHANGE.
    LidChange,
    /// IBV_EVENT_PKEY_CHANGE.
    PkeyChange,
    /// IBV_EVENT_SM_CHANGE.
    SmChange,
    /// IBV_EVENT_SRQ_ERR.
    SrqErr,
    /// IBV_EVENT_SRQ_LIMIT_REACHED: the SRQ's posted WRs dropped below its armed limit.
    SrqLimitReached,
    /// IBV_EVENT_QP_LAST_WQE_REACHED: a QP attached to an SRQ entered ERR and will consume
    /// no more of the SRQ's WRs.
    QpLastWqeReached,
    /// IBV_EVENT_CLIENT_REREGISTER.
    ClientReregister,
    /// IBV_EVENT_GID_CHANGE.
    GidChange,
}

impl AsyncEventKind {
    /// The event kind of an `enum ibv_event_type` value (None for WQ events and unknown
    /// values).
    pub fn from_raw(raw: u32) -> Option<AsyncEventKind> {
        use AsyncEventKind::*;
        [
            CqErr,
            QpFatal,
            QpReqErr,
            QpAccessErr,
            CommEst,
            SqDrained,
            PathMig,
            PathMigErr,
            DeviceFatal,
            PortActive,
            PortErr,
            LidChange,
            PkeyChange,
            SmChange,
            SrqErr,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
        ]
        .into_iter()
        .find(|k| k.to_raw() == raw)
    }

    /// The numeric value of `enum ibv_event_type`.
    pub fn to_raw(self) -> u32 {
        match self {
            AsyncEventKind::CqErr => 0,
            AsyncEventKind::QpFatal => 1,
            AsyncEventKind::QpReqErr => 2,
            AsyncEventKind::QpAccessErr => 3,
            AsyncEventKind::CommEst => 4,
            AsyncEventKind::SqDrained => 5,
            AsyncEventKind::PathMig => 6,
            AsyncEventKind::PathMigErr => 7,
            AsyncEventKind::DeviceFatal => 8,
            AsyncEventKind::PortActive => 9,
            AsyncEventKind::PortErr => 10,
            AsyncEventKind::LidChange => 11,
            AsyncEventKind::PkeyChange => 12,
            AsyncEventKind::SmChange => 13,
            AsyncEventKind::SrqErr => 14,
            AsyncEventKind::SrqLimitReached => 15,
            AsyncEventKind::QpLastWqeReached => 16,
            AsyncEventKind::ClientReregister => 17,
            AsyncEventKind::GidChange => 18,
        }
    }
}

/// What an async event is about (the union `element` of `struct ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// A CQ id.
    Cq(u32),
    /// A QP number.
    Qp(u32),
    /// An SRQ id.
    Srq(u32),
    /// A port number.
    Port(u8),
    /// The device itself.
    Device,
}

/// `struct ibv_async_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// To which object.
    pub element: AsyncElement,
}
