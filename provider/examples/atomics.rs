//! RC atomics: FETCH_AND_ADD and CMP_AND_SWP on a counter in `b`'s buffer; each returns the
//! value it found into `a`'s buffer.
//!
//! `cargo run -p softverbs --example atomics`

mod common;

use std::time::Duration;

use softverbs::{AccessFlags, RemoteAddr, SendWr, VerbsResult, WcStatus};

fn main() -> VerbsResult<()> {
    let a = common::RcSide::new(
        &common::device("ex-atomic-a", "127.0.24.5")?,
        64,
        AccessFlags::empty(),
    )?;
    let b = common::RcSide::new(
        &common::device("ex-atomic-b", "127.0.24.6")?,
        64,
        AccessFlags::REMOTE_ATOMIC,
    )?;
    common::connect(&a, &b)?;
    b.mr.write(0, &100u64.to_ne_bytes())?;
    let counter = RemoteAddr {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let original = |side: &common::RcSide| -> VerbsResult<u64> {
        let mut w = [0u8; 8];
        side.mr.read(0, &mut w)?;
        Ok(u64::from_ne_bytes(w))
    };
    let wait = Duration::from_secs(10);

    a.qp.post_send(&[SendWr::fetch_and_add(1, a.mr.sge(0, 8)?, counter, 5)])?;
    assert_eq!(a.cq.poll_one(wait)?.status, WcStatus::Success);
    assert_eq!(
        original(&a)?,
        100,
        "fetch_and_add returns the value before the add"
    );

    a.qp.post_send(&[SendWr::compare_and_swap(
        2,
        a.mr.sge(0, 8)?,
        counter,
        105,
        7,
    )])?;
    assert_eq!(a.cq.poll_one(wait)?.status, WcStatus::Success);
    assert_eq!(original(&a)?, 105, "the compare matched");
    assert_eq!(original(&b)?, 7, "so the swap happened");
    println!("counter: 100 +5 = 105, swapped for 7");
    Ok(())
}
