//! RC SEND / RECV with completion channels, waited for with tokio (feature `tokio`): the
//! receiver's task sleeps on the channel's file descriptor until a message arrives.
//!
//! `cargo run -p softverbs --features tokio --example send_recv_tokio`

mod common;

use softverbs::{AccessFlags, Context, RcConnectOptions, RecvWr, SendWr, VerbsResult, WcOpcode};

/// An RC QP whose CQ reports through a completion channel.
fn side(ctx: &Context) -> VerbsResult<(softverbs::Cq, softverbs::Qp, softverbs::Mr)> {
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq_with_channel(16, &channel)?;
    let qp = pd.qp_builder().build(&cq, &cq)?;
    let buf =
        softverbs::RdmaBuffer::new(4096).ok_or_else(|| softverbs::VerbsError::nomem("buffer"))?;
    let mr = pd.register(buf, AccessFlags::LOCAL_WRITE)?;
    Ok((cq, qp, mr))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> VerbsResult<()> {
    let (a_cq, a_qp, a_mr) = side(&common::device("ex-tokio-a", "127.0.24.7")?)?;
    let (b_cq, b_qp, b_mr) = side(&common::device("ex-tokio-b", "127.0.24.8")?)?;
    let opts = RcConnectOptions::default();
    a_qp.connect_rc(1, &b_qp.endpoint(2, 1)?, &opts)?;
    b_qp.connect_rc(2, &a_qp.endpoint(1, 1)?, &opts)?;

    b_qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: vec![b_mr.sge(0, 4096)?],
    }])?;
    let receiver = tokio::spawn(async move {
        let wc = b_cq.next_completion().await?;
        let mut got = vec![0u8; wc.byte_len as usize];
        b_mr.read(0, &mut got)?;
        VerbsResult::Ok((wc, got))
    });
    let hello = b"hello through a completion channel";
    a_mr.write(0, hello)?;
    a_qp.post_send(&[SendWr::send(1, vec![a_mr.sge(0, hello.len() as u32)?])])?;
    let sent = a_cq.next_completion().await?;
    assert_eq!(sent.opcode, WcOpcode::Send);
    let (wc, got) = receiver
        .await
        .map_err(|e| softverbs::VerbsError::inval(format!("receiver task: {e}")))??;
    assert_eq!((wc.wr_id, wc.opcode), (9, WcOpcode::Recv));
    assert_eq!(&got, hello);
    println!("received: {:?}", String::from_utf8_lossy(&got));
    Ok(())
}
