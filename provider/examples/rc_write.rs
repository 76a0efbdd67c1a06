//! RC RDMA WRITE and WRITE_WITH_IMM: `a` writes into `b`'s buffer; the second write's
//! immediate data completes a receive on `b`, which then checks the bytes.
//!
//! `cargo run -p softverbs --example rc_write`

mod common;

use std::time::Duration;

use softverbs::{AccessFlags, RecvWr, RemoteAddr, SendWr, VerbsResult, WcOpcode, WcStatus};

const WAIT: Duration = Duration::from_secs(10);

fn main() -> VerbsResult<()> {
    let a = common::RcSide::new(
        &common::device("ex-write-a", "127.0.24.1")?,
        4096,
        AccessFlags::empty(),
    )?;
    let b = common::RcSide::new(
        &common::device("ex-write-b", "127.0.24.2")?,
        4096,
        AccessFlags::REMOTE_WRITE,
    )?;
    common::connect(&a, &b)?;
    // What b lends: the address and rkey of its buffer (sent to a with the endpoint).
    let target = RemoteAddr {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let message = b"written by a, without b's CPU";
    a.mr.write(0, message)?;
    a.qp.post_send(&[SendWr::write(
        1,
        vec![a.mr.sge(0, message.len() as u32)?],
        target,
    )])?;
    let wc = a.cq.poll_one(WAIT)?;
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );

    // A WRITE_WITH_IMM consumes a receive WR on b and tells it the write is there.
    b.qp.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: vec![],
    }])?;
    let second = RemoteAddr {
        remote_addr: b.mr.addr() + 1024,
        ..target
    };
    a.qp.post_send(&[SendWr::write_with_imm(
        2,
        vec![a.mr.sge(0, 5)?],
        second,
        0xfeed,
    )])?;
    assert_eq!(a.cq.poll_one(WAIT)?.status, WcStatus::Success);
    let wc = b.cq.poll_one(WAIT)?;
    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((wc.wr_id, wc.imm_data), (7, 0xfeed));

    let mut got = vec![0u8; message.len()];
    b.mr.read(0, &mut got)?;
    assert_eq!(&got, message);
    println!("b's buffer now says: {:?}", String::from_utf8_lossy(&got));
    Ok(())
}
