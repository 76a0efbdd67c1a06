//! A shared receive queue: two RC QPs on `b` take their receives from one SRQ; `a` sends on
//! two connections and every message lands in a buffer of the shared pool.
//!
//! `cargo run -p softverbs --example srq`

mod common;

use std::time::Duration;

use softverbs::{AccessFlags, RcConnectOptions, RecvWr, SendWr, SrqAttr, VerbsResult, WcStatus};

fn main() -> VerbsResult<()> {
    let a_ctx = common::device("ex-srq-a", "127.0.24.11")?;
    let b_ctx = common::device("ex-srq-b", "127.0.24.12")?;
    let a = common::RcSide::new(&a_ctx, 4096, AccessFlags::empty())?;
    let a2 = common::RcSide::new(&a_ctx, 4096, AccessFlags::empty())?;

    let pd = b_ctx.alloc_pd()?;
    let cq = b_ctx.create_cq(64)?;
    let (srq, _) = pd.create_srq(&SrqAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    })?;
    let qp1 = pd.qp_builder().srq(&srq).build(&cq, &cq)?;
    let qp2 = pd.qp_builder().srq(&srq).build(&cq, &cq)?;
    let buf = softverbs::RdmaBuffer::new(4 * 256)
        .ok_or_else(|| softverbs::VerbsError::nomem("buffer"))?;
    let mr = pd.register(buf, AccessFlags::LOCAL_WRITE)?;
    // Four 256-byte receive buffers, for whichever QP's message comes first.
    let recvs: Vec<RecvWr> = (0..4u64)
        .map(|i| {
            Ok(RecvWr {
                wr_id: i,
                sg_list: vec![mr.sge(i as usize * 256, 256)?],
            })
        })
        .collect::<VerbsResult<_>>()?;
    srq.post_recv(&recvs)?;

    let opts = RcConnectOptions::default();
    for (sender, qp, psn) in [(&a, &qp1, 10), (&a2, &qp2, 20)] {
        sender
            .qp
            .connect_rc(psn, &qp.endpoint(psn + 1, 1)?, &opts)?;
        qp.connect_rc(psn + 1, &sender.qp.endpoint(psn, 1)?, &opts)?;
    }
    for (i, sender) in [&a, &a2, &a, &a2].into_iter().enumerate() {
        let text = format!("message {i}");
        sender.mr.write(0, text.as_bytes())?;
        sender.qp.post_send(&[SendWr::send(
            i as u64,
            vec![sender.mr.sge(0, text.len() as u32)?],
        )])?;
        assert_eq!(
            sender.cq.poll_one(Duration::from_secs(10))?.status,
            WcStatus::Success
        );
    }
    let wcs = cq.poll_wait(4, Duration::from_secs(10))?;
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success);
        let mut got = vec![0u8; wc.byte_len as usize];
        mr.read(wc.wr_id as usize * 256, &mut got)?;
        println!(
            "QP {:#x} received {:?} into SRQ buffer {}",
            wc.qp_num,
            String::from_utf8_lossy(&got),
            wc.wr_id
        );
    }
    let qps: std::collections::BTreeSet<u32> = wcs.iter().map(|w| w.qp_num).collect();
    assert_eq!(qps.len(), 2, "both QPs took receives from the one SRQ");
    Ok(())
}
