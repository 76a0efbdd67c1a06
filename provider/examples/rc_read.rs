//! RC RDMA READ: `a` reads `b`'s buffer into its own; `b` posts nothing.
//!
//! `cargo run -p softverbs --example rc_read`

mod common;

use std::time::Duration;

use softverbs::{AccessFlags, RemoteAddr, SendWr, VerbsResult, WcOpcode, WcStatus};

fn main() -> VerbsResult<()> {
    let a = common::RcSide::new(
        &common::device("ex-read-a", "127.0.24.3")?,
        8192,
        AccessFlags::empty(),
    )?;
    let b = common::RcSide::new(
        &common::device("ex-read-b", "127.0.24.4")?,
        8192,
        AccessFlags::REMOTE_READ,
    )?;
    common::connect(&a, &b)?;
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    b.mr.write(0, &data)?;
    let source = RemoteAddr {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendWr::read(
        1,
        vec![a.mr.sge(0, data.len() as u32)?],
        source,
    )])?;
    let wc = a.cq.poll_one(Duration::from_secs(10))?;
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(wc.byte_len as usize, data.len());
    let mut got = vec![0u8; data.len()];
    a.mr.read(0, &mut got)?;
    assert_eq!(got, data);
    println!("read {} bytes from b, all as b wrote them", got.len());
    Ok(())
}
