//! Every resource of a device has a cap that `query_device` reports and the verbs enforce
//! with libibverbs' errno (ENOMEM for a full table, EINVAL for a size beyond a limit): each
//! cap is reached, and one more fails, on a device configured with small caps (issue 23).

use std::net::{IpAddr, Ipv4Addr};

use softverbs_api::mw::MwType;
use softverbs_api::qp::AhAttr;
use softverbs_api::{
    AccessFlags, Gid, QpCap, QpInitAttr, QpType, SrqAttr, VerbsContext, VerbsResult,
};
use softverbs_emu::engine::{open_device, register_device, DeviceConfig, DeviceLimits, LinkConfig};
use softverbs_emu::net::channel::ChannelNetwork;
use softverbs_testkit::{ah_to, init_attr, RcMoves, RC_RTR_MASK};

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;

fn small() -> DeviceLimits {
    DeviceLimits {
        max_qp: 4,
        max_qp_wr: 8,
        max_sge: 2,
        max_cq: 3,
        max_cqe: 16,
        max_mr: 4,
        max_mw: 3,
        max_pd: 3,
        max_rd_atomic: 2,
        max_srq: 2,
        max_srq_wr: 8,
        max_srq_sge: 2,
        max_ah: 3,
        max_inline_data: 16,
    }
}

fn errno<T: std::fmt::Debug>(r: VerbsResult<T>) -> i32 {
    r.expect_err("one past the cap must fail").errno()
}

fn cap(send_wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: send_wr,
        max_recv_wr: send_wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

#[test]
fn each_cap_is_reported_reached_and_enforced_with_the_errno_of_libibverbs() {
    let limits = small();
    let config = DeviceConfig {
        link: LinkConfig::Channel(ChannelNetwork::new()),
        limits,
        ..DeviceConfig::new("limits0", IpAddr::V4(Ipv4Addr::new(127, 23, 1, 1)))
    };
    register_device(config).unwrap();
    let ctx = open_device("limits0").unwrap();

    let attr = ctx.query_device().unwrap();
    let reported = (
        (
            attr.max_qp,
            attr.max_qp_wr,
            attr.max_sge,
            attr.max_cq,
            attr.max_cqe,
        ),
        (attr.max_mr, attr.max_mw, attr.max_pd, attr.max_qp_rd_atom),
        (
            attr.max_qp_init_rd_atom,
            attr.max_srq,
            attr.max_srq_wr,
            attr.max_srq_sge,
        ),
        (attr.max_ah, attr.max_inline_data),
    );
    let l = limits;
    assert_eq!(
        reported,
        (
            (l.max_qp, l.max_qp_wr, l.max_sge, l.max_cq, l.max_cqe),
            (l.max_mr, l.max_mw, l.max_pd, l.max_rd_atomic),
            (l.max_rd_atomic, l.max_srq, l.max_srq_wr, l.max_srq_sge),
            (l.max_ah, l.max_inline_data),
        )
    );

    // PDs.
    let pds: Vec<u32> = (0..l.max_pd).map(|_| ctx.alloc_pd().unwrap()).collect();
    assert_eq!(errno(ctx.alloc_pd()), ENOMEM);
    let pd = pds[0];

    // CQs and their depth.
    assert_eq!(errno(ctx.create_cq(0, None)), EINVAL);
    assert_eq!(errno(ctx.create_cq(l.max_cqe + 1, None)), EINVAL);
    let cqs: Vec<u32> = (0..l.max_cq)
        .map(|_| ctx.create_cq(l.max_cqe, None).unwrap().0)
        .collect();
    assert_eq!(errno(ctx.create_cq(1, None)), ENOMEM);

    // QPs, their queue depths, SGEs and inline size.
    let init = |cap| QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cqs[0],
        recv_cq: cqs[1],
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let within = cap(l.max_qp_wr, l.max_sge, l.max_inline_data);
    assert_eq!(
        errno(ctx.create_qp(pd, &init(cap(l.max_qp_wr + 1, 1, 0)))),
        EINVAL
    );
    assert_eq!(
        errno(ctx.create_qp(pd, &init(cap(1, l.max_sge + 1, 0)))),
        EINVAL
    );
    assert_eq!(
        errno(ctx.create_qp(pd, &init(cap(1, 1, l.max_inline_data + 1)))),
        EINVAL
    );
    let qps: Vec<u32> = (0..l.max_qp)
        .map(|_| ctx.create_qp(pd, &init(within)).unwrap().0)
        .collect();
    assert_eq!(errno(ctx.create_qp(pd, &init(within))), ENOMEM);

    // Outstanding READ / atomic: max_dest_rd_atomic at RTR.
    let (to_init, init_mask) = init_attr(AccessFlags::REMOTE_READ);
    ctx.modify_qp(qps[0], &to_init, init_mask).unwrap();
    let rtr = |dest_rd_atomic| {
        let moves = RcMoves {
            dest_qp_num: 0x99,
            rq_psn: 1,
            max_dest_rd_atomic: dest_rd_atomic,
            ah_attr: ah_to(Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 23, 1, 2)))),
            ..RcMoves::default()
        };
        moves.rtr().0
    };
    let rtr_mask = RC_RTR_MASK;
    assert_eq!(
        errno(ctx.modify_qp(qps[0], &rtr(l.max_rd_atomic as u8 + 1), rtr_mask)),
        EINVAL
    );
    ctx.modify_qp(qps[0], &rtr(l.max_rd_atomic as u8), rtr_mask)
        .unwrap();

    // MRs.
    let buffers: Vec<Vec<u8>> = (0..=l.max_mr).map(|_| vec![0u8; 4096]).collect();
    let access = AccessFlags::LOCAL_WRITE;
    for b in &buffers[..l.max_mr as usize] {
        ctx.reg_mr(pd, b.as_ptr() as u64, 4096, access).unwrap();
    }
    let last = &buffers[l.max_mr as usize];
    assert_eq!(
        errno(ctx.reg_mr(pd, last.as_ptr() as u64, 4096, access)),
        ENOMEM
    );

    // Memory windows.
    for _ in 0..l.max_mw {
        ctx.alloc_mw(pd, MwType::Type2).unwrap();
    }
    assert_eq!(errno(ctx.alloc_mw(pd, MwType::Type2)), ENOMEM);

    // SRQs, their depth and SGEs.
    let srq = |max_wr, max_sge| SrqAttr {
        max_wr,
        max_sge,
        srq_limit: 0,
    };
    assert_eq!(errno(ctx.create_srq(pd, &srq(l.max_srq_wr + 1, 1))), EINVAL);
    assert_eq!(
        errno(ctx.create_srq(pd, &srq(1, l.max_srq_sge + 1))),
        EINVAL
    );
    for _ in 0..l.max_srq {
        ctx.create_srq(pd, &srq(l.max_srq_wr, l.max_srq_sge))
            .unwrap();
    }
    assert_eq!(errno(ctx.create_srq(pd, &srq(1, 1))), ENOMEM);

    // Address handles.
    let ah = AhAttr {
        dgid: Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 23, 1, 3))),
        port_num: 1,
        ..AhAttr::default()
    };
    for _ in 0..l.max_ah {
        ctx.create_ah(pd, &ah).unwrap();
    }
    assert_eq!(errno(ctx.create_ah(pd, &ah)), ENOMEM);
}
