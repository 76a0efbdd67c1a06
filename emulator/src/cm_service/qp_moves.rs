//! The CM's QP-modify requests as verbs `modify_qp` calls: the attributes and masks
//! `ib_cm_init_qp_attr` gives rdma_cm for RTR and RTS (and ERR on teardown).

use softverbs_api::{AhAttr, Gid, Mtu, QpAttr, QpAttrMask, QpState, VerbsContext, VerbsResult};

use crate::cm::{QpRequest, RtrAttrs, RtsAttrs};

/// The GID index of a device's RoCEv2 address (index 0 is the link-local GID).
const ROCE_V2_GID_INDEX: u8 = 1;

/// Applies `request` to the QP it names on `ctx`.
pub fn apply(ctx: &dyn VerbsContext, request: &QpRequest) -> VerbsResult<()> {
    let (qpn, attr, mask) = attr_and_mask(request);
    ctx.modify_qp(qpn, &attr, mask)
}

/// The QP, attributes and mask of `request`.
pub fn attr_and_mask(request: &QpRequest) -> (u32, QpAttr, QpAttrMask) {
    match *request {
        QpRequest::Rtr { qpn, attrs } => (qpn, rtr_attr(&attrs), rtr_mask()),
        QpRequest::Rts { qpn, attrs } => (qpn, rts_attr(&attrs), rts_mask()),
        QpRequest::Err { qpn } => (
            qpn,
            QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        ),
    }
}

fn rtr_mask() -> QpAttrMask {
    QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER
}

fn rts_mask() -> QpAttrMask {
    QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC
}

fn rtr_attr(a: &RtrAttrs) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        // The CM checked the MTU enum (1..=5) when it built the attributes.
        path_mtu: Mtu::from_raw(u32::from(a.path_mtu)).unwrap_or(Mtu::Mtu1024),
        dest_qp_num: a.dest_qpn,
        rq_psn: a.rq_psn,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        // cm_init_qp_rtr_attr: rdma_cm leaves the RNR NAK timer at 0 (655 ms).
        min_rnr_timer: 0,
        ah_attr: AhAttr {
            dgid: Gid(a.remote_gid),
            sgid_index: ROCE_V2_GID_INDEX,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            flow_label: a.flow_label,
            sl: a.sl,
            port_num: 1,
            udp_dport: None,
        },
        ..QpAttr::default()
    }
}

fn rts_attr(a: &RtsAttrs) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        sq_psn: a.sq_psn,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        max_rd_atomic: a.max_rd_atomic,
        ..QpAttr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtr_carries_the_path_and_rts_the_send_side() {
        let rtr = RtrAttrs {
            dest_qpn: 0x11,
            rq_psn: 0x123456,
            path_mtu: 3,
            max_dest_rd_atomic: 4,
            remote_gid: Gid::from_ip("127.28.0.2".parse().unwrap()).0,
            flow_label: 0x1234,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
        };
        let (qpn, attr, mask) = attr_and_mask(&QpRequest::Rtr {
            qpn: 0x22,
            attrs: rtr,
        });
        assert_eq!(qpn, 0x22);
        assert_eq!(
            (attr.qp_state, attr.path_mtu, attr.dest_qp_num, attr.rq_psn),
            (QpState::Rtr, Mtu::Mtu1024, 0x11, 0x123456)
        );
        assert_eq!(attr.ah_attr.dgid, Gid(rtr.remote_gid));
        assert!(mask.contains(QpAttrMask::AV | QpAttrMask::DEST_QPN));
        let rts = RtsAttrs {
            sq_psn: 9,
            timeout: 19,
            retry_cnt: 7,
            rnr_retry: 6,
            max_rd_atomic: 2,
        };
        let (_, attr, mask) = attr_and_mask(&QpRequest::Rts {
            qpn: 0x22,
            attrs: rts,
        });
        assert_eq!((attr.sq_psn, attr.timeout, attr.rnr_retry), (9, 19, 6));
        assert!(mask.contains(QpAttrMask::SQ_PSN | QpAttrMask::MAX_QP_RD_ATOMIC));
    }
}
