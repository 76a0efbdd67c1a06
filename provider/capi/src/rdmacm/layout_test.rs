//! The C layout test of rdma_cma.h: every size and offset of `rdmacm::abi` compared with
//! the system's `<rdma/rdma_cma.h>` (Debian's librdmacm-dev).

use std::mem::{offset_of, size_of};

use super::abi::*;
use crate::layout_test::compare_with_c;

#[rustfmt::skip]
fn rows() -> Vec<(&'static str, usize)> {
    vec![
        ("sizeof(struct rdma_event_channel)", size_of::<RdmaEventChannel>()),
        ("sizeof(struct rdma_ib_addr)", size_of::<RdmaIbAddr>()),
        ("offsetof(struct rdma_ib_addr, dgid)", offset_of!(RdmaIbAddr, dgid)),
        ("offsetof(struct rdma_ib_addr, pkey)", offset_of!(RdmaIbAddr, pkey)),
        ("sizeof(struct rdma_addr)", size_of::<RdmaAddr>()),
        ("offsetof(struct rdma_addr, src_storage)", offset_of!(RdmaAddr, src_storage)),
        ("offsetof(struct rdma_addr, dst_storage)", offset_of!(RdmaAddr, dst_storage)),
        ("offsetof(struct rdma_addr, addr.ibaddr)", offset_of!(RdmaAddr, ibaddr)),
        ("sizeof(struct rdma_route)", size_of::<RdmaRoute>()),
        ("offsetof(struct rdma_route, path_rec)", offset_of!(RdmaRoute, path_rec)),
        ("offsetof(struct rdma_route, num_paths)", offset_of!(RdmaRoute, num_paths)),
        ("sizeof(struct rdma_cm_id)", size_of::<RdmaCmId>()),
        ("offsetof(struct rdma_cm_id, verbs)", offset_of!(RdmaCmId, verbs)),
        ("offsetof(struct rdma_cm_id, channel)", offset_of!(RdmaCmId, channel)),
        ("offsetof(struct rdma_cm_id, context)", offset_of!(RdmaCmId, context)),
        ("offsetof(struct rdma_cm_id, qp)", offset_of!(RdmaCmId, qp)),
        ("offsetof(struct rdma_cm_id, route)", offset_of!(RdmaCmId, route)),
        ("offsetof(struct rdma_cm_id, ps)", offset_of!(RdmaCmId, ps)),
        ("offsetof(struct rdma_cm_id, port_num)", offset_of!(RdmaCmId, port_num)),
        ("offsetof(struct rdma_cm_id, event)", offset_of!(RdmaCmId, event)),
        ("offsetof(struct rdma_cm_id, send_cq_channel)", offset_of!(RdmaCmId, send_cq_channel)),
        ("offsetof(struct rdma_cm_id, send_cq)", offset_of!(RdmaCmId, send_cq)),
        ("offsetof(struct rdma_cm_id, recv_cq_channel)", offset_of!(RdmaCmId, recv_cq_channel)),
        ("offsetof(struct rdma_cm_id, recv_cq)", offset_of!(RdmaCmId, recv_cq)),
        ("offsetof(struct rdma_cm_id, srq)", offset_of!(RdmaCmId, srq)),
        ("offsetof(struct rdma_cm_id, pd)", offset_of!(RdmaCmId, pd)),
        ("offsetof(struct rdma_cm_id, qp_type)", offset_of!(RdmaCmId, qp_type)),
        ("sizeof(struct rdma_conn_param)", size_of::<RdmaConnParam>()),
        ("offsetof(struct rdma_conn_param, private_data_len)", offset_of!(RdmaConnParam, private_data_len)),
        ("offsetof(struct rdma_conn_param, responder_resources)", offset_of!(RdmaConnParam, responder_resources)),
        ("offsetof(struct rdma_conn_param, initiator_depth)", offset_of!(RdmaConnParam, initiator_depth)),
        ("offsetof(struct rdma_conn_param, flow_control)", offset_of!(RdmaConnParam, flow_control)),
        ("offsetof(struct rdma_conn_param, retry_count)", offset_of!(RdmaConnParam, retry_count)),
        ("offsetof(struct rdma_conn_param, rnr_retry_count)", offset_of!(RdmaConnParam, rnr_retry_count)),
        ("offsetof(struct rdma_conn_param, srq)", offset_of!(RdmaConnParam, srq)),
        ("offsetof(struct rdma_conn_param, qp_num)", offset_of!(RdmaConnParam, qp_num)),
        ("sizeof(struct rdma_ud_param)", size_of::<RdmaUdParam>()),
        ("offsetof(struct rdma_ud_param, private_data_len)", offset_of!(RdmaUdParam, private_data_len)),
        ("offsetof(struct rdma_ud_param, ah_attr)", offset_of!(RdmaUdParam, ah_attr)),
        ("offsetof(struct rdma_ud_param, qp_num)", offset_of!(RdmaUdParam, qp_num)),
        ("offsetof(struct rdma_ud_param, qkey)", offset_of!(RdmaUdParam, qkey)),
        ("sizeof(struct rdma_cm_event)", size_of::<RdmaCmEvent>()),
        ("offsetof(struct rdma_cm_event, listen_id)", offset_of!(RdmaCmEvent, listen_id)),
        ("offsetof(struct rdma_cm_event, event)", offset_of!(RdmaCmEvent, event)),
        ("offsetof(struct rdma_cm_event, status)", offset_of!(RdmaCmEvent, status)),
        ("offsetof(struct rdma_cm_event, param)", offset_of!(RdmaCmEvent, param)),
        ("sizeof(struct rdma_addrinfo)", size_of::<RdmaAddrinfo>()),
        ("offsetof(struct rdma_addrinfo, ai_family)", offset_of!(RdmaAddrinfo, ai_family)),
        ("offsetof(struct rdma_addrinfo, ai_qp_type)", offset_of!(RdmaAddrinfo, ai_qp_type)),
        ("offsetof(struct rdma_addrinfo, ai_port_space)", offset_of!(RdmaAddrinfo, ai_port_space)),
        ("offsetof(struct rdma_addrinfo, ai_src_len)", offset_of!(RdmaAddrinfo, ai_src_len)),
        ("offsetof(struct rdma_addrinfo, ai_dst_len)", offset_of!(RdmaAddrinfo, ai_dst_len)),
        ("offsetof(struct rdma_addrinfo, ai_src_addr)", offset_of!(RdmaAddrinfo, ai_src_addr)),
        ("offsetof(struct rdma_addrinfo, ai_dst_addr)", offset_of!(RdmaAddrinfo, ai_dst_addr)),
        ("offsetof(struct rdma_addrinfo, ai_src_canonname)", offset_of!(RdmaAddrinfo, ai_src_canonname)),
        ("offsetof(struct rdma_addrinfo, ai_dst_canonname)", offset_of!(RdmaAddrinfo, ai_dst_canonname)),
        ("offsetof(struct rdma_addrinfo, ai_route_len)", offset_of!(RdmaAddrinfo, ai_route_len)),
        ("offsetof(struct rdma_addrinfo, ai_route)", offset_of!(RdmaAddrinfo, ai_route)),
        ("offsetof(struct rdma_addrinfo, ai_connect_len)", offset_of!(RdmaAddrinfo, ai_connect_len)),
        ("offsetof(struct rdma_addrinfo, ai_connect)", offset_of!(RdmaAddrinfo, ai_connect)),
        ("offsetof(struct rdma_addrinfo, ai_next)", offset_of!(RdmaAddrinfo, ai_next)),
        ("sizeof(struct ibv_ece)", size_of::<IbvEce>()),
        ("offsetof(struct ibv_ece, options)", offset_of!(IbvEce, options)),
        ("offsetof(struct ibv_ece, comp_mask)", offset_of!(IbvEce, comp_mask)),
        ("sizeof(struct sockaddr_storage)", size_of::<SockaddrStorage>()),
        ("RDMA_PS_TCP", RDMA_PS_TCP as usize),
        ("RDMA_PS_UDP", RDMA_PS_UDP as usize),
        ("RDMA_PS_IB", RDMA_PS_IB as usize),
        ("RDMA_PS_IPOIB", RDMA_PS_IPOIB as usize),
        ("RAI_PASSIVE | RAI_NUMERICHOST << 4 | RAI_NOROUTE << 8 | RAI_FAMILY << 12",
            (RAI_PASSIVE | RAI_NUMERICHOST << 4 | RAI_NOROUTE << 8 | RAI_FAMILY << 12) as usize),
        ("RDMA_CM_EVENT_CONNECT_REQUEST", event::CONNECT_REQUEST as usize),
        ("RDMA_CM_EVENT_ESTABLISHED", event::ESTABLISHED as usize),
        ("RDMA_CM_EVENT_TIMEWAIT_EXIT", event::TIMEWAIT_EXIT as usize),
        ("RDMA_CM_EVENT_ADDR_CHANGE", event::ADDR_CHANGE as usize),
    ]
}

#[test]
fn layouts_match_rdma_cma_h() {
    compare_with_c("rdma/rdma_cma.h", "librdmacm-dev", &rows());
}
