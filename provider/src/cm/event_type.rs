//! The event types librdmacm defines (`enum rdma_cm_event_type`).

/// `enum rdma_cm_event_type`: every event librdmacm defines. Those that cannot happen on
/// an emulated device say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// RDMA_CM_EVENT_ADDR_RESOLVED: [`CmId::resolve_addr`] found the local device.
    AddrResolved,
    /// RDMA_CM_EVENT_ADDR_ERROR: no device for the source, or no device on a loopback
    /// destination (status -EHOSTUNREACH / -EADDRNOTAVAIL).
    AddrError,
    /// RDMA_CM_EVENT_ROUTE_RESOLVED.
    RouteResolved,
    /// RDMA_CM_EVENT_ROUTE_ERROR (not produced: a RoCE route is the address).
    RouteError,
    /// RDMA_CM_EVENT_CONNECT_REQUEST: on a listening id; [`CmEvent::id`] is the new id.
    ConnectRequest,
    /// RDMA_CM_EVENT_CONNECT_RESPONSE (not produced: connecting needs a QP here).
    ConnectResponse,
    /// RDMA_CM_EVENT_CONNECT_ERROR: the QP could not be moved to RTR/RTS.
    ConnectError,
    /// RDMA_CM_EVENT_UNREACHABLE: no answer after every retry (status -ETIMEDOUT), or a
    /// UD service resolution that failed.
    Unreachable,
    /// RDMA_CM_EVENT_REJECTED: status is the IB REJ reason (8: nobody listens).
    Rejected,
    /// RDMA_CM_EVENT_ESTABLISHED: the QP is in RTS (for UD: [`CmEvent::ud`] says where to
    /// send).
    Established,
    /// RDMA_CM_EVENT_DISCONNECTED: the QP was moved to ERR.
    Disconnected,
    /// RDMA_CM_EVENT_DEVICE_REMOVAL (not produced: emulated devices stay while used).
    DeviceRemoval,
    /// RDMA_CM_EVENT_MULTICAST_JOIN (not produced by this API, which has no join: attach a
    /// UD QP with [`crate::Qp::attach_mcast`]; the drop-in librdmacm produces it).
    MulticastJoin,
    /// RDMA_CM_EVENT_MULTICAST_ERROR (not produced by this API, as above).
    MulticastError,
    /// RDMA_CM_EVENT_ADDR_CHANGE (not produced: device addresses are fixed).
    AddrChange,
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT: the connection's time-wait is over.
    TimewaitExit,
}

impl EventType {
    /// The name `rdma_event_str` gives.
    pub fn name(self) -> &'static str {
        match self {
            EventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            EventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            EventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            EventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            EventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            EventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            EventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            EventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            EventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            EventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            EventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            EventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            EventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}
