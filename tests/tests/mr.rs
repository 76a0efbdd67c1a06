//! Memory registration through the safe API: access flags, keys, SGE bounds, giving the
//! buffer back.
//!
//! File number 2: devices on 127.10.2.n.

use std::collections::HashSet;

use softverbs::{AccessFlags, RdmaBuffer};
use softverbs_conformance::{buffer, open_udp_device, pattern};

const FILE: u8 = 2;

#[test]
fn register_with_various_access_flags() {
    let ctx = open_udp_device(FILE, 1);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let lw = AccessFlags::LOCAL_WRITE;
    for access in [
        AccessFlags::empty(),
        lw,
        AccessFlags::REMOTE_READ,
        lw | AccessFlags::REMOTE_WRITE,
        lw | AccessFlags::REMOTE_ATOMIC,
        lw | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        lw | AccessFlags::MW_BIND,
    ] {
        let mr = pd
            .register(buffer(8192), access)
            .unwrap_or_else(|e| panic!("register {access:?}: {e}"));
        assert_eq!(mr.access(), access);
        assert_eq!(mr.len(), 8192);
        assert!(!mr.is_empty());
        assert_ne!(mr.addr(), 0);
        assert_eq!(mr.pd().id(), pd.id());
    }
}

#[test]
fn remote_write_or_atomic_without_local_write_is_einval() {
    let ctx = open_udp_device(FILE, 2);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    for access in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    ] {
        let err = pd
            .register(buffer(4096), access)
            .err()
            .unwrap_or_else(|| panic!("{access:?} must be refused"));
        assert_eq!(err.errno(), 22, "{access:?}: {err}");
    }
    // A zero-length region is refused as the kernel refuses a region of no pages.
    let err = pd
        .register(RdmaBuffer::new(0).unwrap(), AccessFlags::LOCAL_WRITE)
        .err()
        .expect("zero-length MR");
    assert_eq!(err.errno(), 22, "{err}");
}

#[test]
fn keys_differ_between_regions() {
    let ctx = open_udp_device(FILE, 3);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mrs: Vec<_> = (0..64)
        .map(|_| pd.register(buffer(4096), access).expect("register"))
        .collect();
    let mut keys = HashSet::new();
    for mr in &mrs {
        assert!(keys.insert(mr.lkey()), "lkey {:#x} repeated", mr.lkey());
        assert!(keys.insert(mr.rkey()), "rkey {:#x} repeated", mr.rkey());
    }
    // Re-registering after deregistration does not hand out the old keys again.
    let old: Vec<(u32, u32)> = mrs.iter().map(|m| (m.lkey(), m.rkey())).collect();
    drop(mrs);
    for _ in 0..64 {
        let mr = pd.register(buffer(4096), access).expect("register again");
        assert!(
            !old.iter().any(|&(l, r)| l == mr.lkey() || r == mr.rkey()),
            "keys ({:#x}, {:#x}) reused right after deregistration",
            mr.lkey(),
            mr.rkey()
        );
    }
}

#[test]
fn sge_bounds_are_checked() {
    let ctx = open_udp_device(FILE, 4);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let mr = pd
        .register(buffer(1000), AccessFlags::LOCAL_WRITE)
        .expect("register");
    let s = mr.sge(0, 1000).expect("whole MR");
    assert_eq!((s.addr, s.length, s.lkey), (mr.addr(), 1000, mr.lkey()));
    let s = mr.sge(999, 1).expect("last byte");
    assert_eq!((s.addr, s.length), (mr.addr() + 999, 1));
    let s = mr.sge(1000, 0).expect("empty SGE at the end");
    assert_eq!((s.addr, s.length), (mr.addr() + 1000, 0));
    for (off, len) in [
        (0usize, 1001u32),
        (999, 2),
        (1000, 1),
        (1001, 0),
        (usize::MAX, 1),
    ] {
        let err = mr
            .sge(off, len)
            .err()
            .unwrap_or_else(|| panic!("sge({off}, {len}) outside a 1000-byte MR"));
        assert_eq!(err.errno(), 22, "sge({off}, {len}): {err}");
    }
}

#[test]
fn into_buffer_returns_the_bytes() {
    let ctx = open_udp_device(FILE, 5);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let data = pattern(7, 5000);
    let mr = pd
        .register(
            RdmaBuffer::from_slice(&data).expect("buffer"),
            AccessFlags::LOCAL_WRITE,
        )
        .expect("register");
    assert_eq!(mr.to_vec(), data);
    mr.write(4000, &[1, 2, 3]).expect("write");
    let mut out = [0u8; 5];
    mr.read(3999, &mut out).expect("read");
    assert_eq!(out, [data[3999], 1, 2, 3, data[4003]]);
    assert_eq!(mr.read(4998, &mut out).unwrap_err().errno(), 22);
    assert_eq!(mr.write(4998, &out).unwrap_err().errno(), 22);
    let addr = mr.addr();
    let buf = mr.into_buffer().expect("into_buffer");
    assert_eq!(buf.addr(), addr, "the same allocation comes back");
    let mut want = data.clone();
    want[4000..4003].copy_from_slice(&[1, 2, 3]);
    assert_eq!(buf.to_vec(), want);

    // The buffer can be registered again (the old registration is gone).
    let mr = pd
        .register(buf, AccessFlags::empty())
        .expect("register again");
    assert_eq!(mr.to_vec(), want);
}
