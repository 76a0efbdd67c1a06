//! UD: datagrams through an address handle; the receiver finds the 40-byte GRH area before
//! the payload and answers through an address handle made from the completion.
//!
//! `cargo run -p softverbs --example ud`

mod common;

use std::time::Duration;

use softverbs::{AccessFlags, AhAttr, Context, QpType, RecvWr, SendWr, VerbsResult, WcStatus};

const QKEY: u32 = 0x1111_1111;
const GRH: usize = 40;

fn ud_side(
    ctx: &Context,
) -> VerbsResult<(softverbs::Pd, softverbs::Cq, softverbs::Qp, softverbs::Mr)> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let qp = pd.qp_builder().qp_type(QpType::Ud).build(&cq, &cq)?;
    qp.activate_ud(QKEY, 0)?;
    let buf =
        softverbs::RdmaBuffer::new(4096).ok_or_else(|| softverbs::VerbsError::nomem("buffer"))?;
    let mr = pd.register(buf, AccessFlags::LOCAL_WRITE)?;
    Ok((pd, cq, qp, mr))
}

fn main() -> VerbsResult<()> {
    let a_ctx = common::device("ex-ud-a", "127.0.24.9")?;
    let b_ctx = common::device("ex-ud-b", "127.0.24.10")?;
    let (a_pd, a_cq, a_qp, a_mr) = ud_side(&a_ctx)?;
    let (b_pd, b_cq, b_qp, b_mr) = ud_side(&b_ctx)?;
    let wait = Duration::from_secs(10);

    // A receive has room for the GRH area and the payload.
    b_qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: vec![b_mr.sge(0, 1024)?],
    }])?;
    let to_b = a_pd.create_ah(&AhAttr {
        dgid: b_ctx.query_gid(1, 1)?.gid,
        sgid_index: 1,
        port_num: 1,
        hop_limit: 64,
        ..AhAttr::default()
    })?;
    a_mr.write(0, b"ping")?;
    a_qp.post_send(&[SendWr::ud_send(
        1,
        vec![a_mr.sge(0, 4)?],
        to_b.dest(b_qp.qp_num(), QKEY),
    )])?;
    assert_eq!(a_cq.poll_one(wait)?.status, WcStatus::Success);
    let wc = b_cq.poll_one(wait)?;
    assert_eq!(wc.byte_len as usize, GRH + 4);
    let mut got = vec![0u8; GRH + 4];
    b_mr.read(0, &mut got)?;
    assert_eq!(&got[GRH..], b"ping");

    // Answer the sender: an address handle from the completion and its GRH.
    a_qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: vec![a_mr.sge(1024, 1024)?],
    }])?;
    let back = b_pd.create_ah_from_wc(&wc, &got[..GRH])?;
    b_mr.write(2048, b"pong")?;
    b_qp.post_send(&[SendWr::ud_send(
        2,
        vec![b_mr.sge(2048, 4)?],
        back.dest(wc.src_qp, QKEY),
    )])?;
    assert_eq!(b_cq.poll_one(wait)?.status, WcStatus::Success);
    let wc = a_cq.poll_one(wait)?;
    let mut pong = [0u8; 4];
    a_mr.read(1024 + GRH, &mut pong)?;
    assert_eq!((wc.wr_id, &pong), (2, b"pong"));
    println!(
        "ping -> QP {:#x}, pong <- QP {:#x}",
        b_qp.qp_num(),
        wc.src_qp
    );
    Ok(())
}
