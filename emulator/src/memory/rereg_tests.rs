//! Behaviour tests of in-place re-registration (`MrTable::reregister`) over real buffers.

use softverbs_api::mw::next_rkey;
use softverbs_api::{AccessFlags, BindMwWr, MwBindInfo, MwType, VerbsError};

use super::{MemError, MrTable, RdmaBuffer};

const PD: u32 = 5;
const OTHER_PD: u32 = 6;
const LEN: usize = 128;

fn remote_rw() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

#[test]
fn a_new_range_keeps_both_keys_and_a_peer_reaches_the_new_memory_only() {
    let t = MrTable::new(8);
    let old = RdmaBuffer::new(LEN).unwrap();
    let new = RdmaBuffer::new(2 * LEN).unwrap();
    let keys = t.register(PD, old.addr(), LEN as u64, remote_rw()).unwrap();
    let again = t
        .reregister(keys.lkey, PD, new.addr(), 2 * LEN as u64, remote_rw())
        .unwrap();
    assert_eq!(again, keys, "the keys a peer holds stay valid");
    // The old rkey now writes the new range, over its whole new length.
    t.remote_write(PD, keys.rkey, new.addr() + LEN as u64, b"moved")
        .unwrap();
    assert_eq!(&new.to_vec()[LEN..LEN + 5], b"moved");
    // The old range is no longer reachable through the key.
    assert_eq!(
        t.remote_write(PD, keys.rkey, old.addr(), b"x"),
        Err(MemError::OutOfBounds)
    );
    assert!(old.to_vec().iter().all(|&b| b == 0));
}

#[test]
fn new_access_and_a_new_pd_apply_to_the_same_keys() {
    let t = MrTable::new(8);
    let buf = RdmaBuffer::new(LEN).unwrap();
    let keys = t.register(PD, buf.addr(), LEN as u64, remote_rw()).unwrap();
    t.reregister(
        keys.lkey,
        PD,
        buf.addr(),
        LEN as u64,
        AccessFlags::LOCAL_WRITE,
    )
    .unwrap();
    assert_eq!(
        t.remote_write(PD, keys.rkey, buf.addr(), b"x"),
        Err(MemError::AccessDenied)
    );
    t.reregister(keys.lkey, OTHER_PD, buf.addr(), LEN as u64, remote_rw())
        .unwrap();
    assert_eq!(
        t.remote_write(PD, keys.rkey, buf.addr(), b"x"),
        Err(MemError::PdMismatch)
    );
    t.remote_write(OTHER_PD, keys.rkey, buf.addr(), b"y")
        .unwrap();
    // The region now counts for its new PD only.
    assert!(!t.pd_in_use(PD));
    assert!(t.pd_in_use(OTHER_PD));
    t.deregister(keys.lkey).unwrap();
    assert!(!t.pd_in_use(OTHER_PD));
}

#[test]
fn bad_arguments_and_bound_windows_leave_the_region_as_it_was() {
    let t = MrTable::new(8);
    let buf = RdmaBuffer::new(LEN).unwrap();
    let access = remote_rw() | AccessFlags::MW_BIND;
    let keys = t.register(PD, buf.addr(), LEN as u64, access).unwrap();
    let bad = [
        (0, LEN as u64, access),
        (buf.addr(), 0, access),
        (buf.addr(), LEN as u64, AccessFlags::REMOTE_WRITE),
        (u64::MAX - 8, LEN as u64, access),
    ];
    for (addr, len, access) in bad {
        assert!(
            matches!(
                t.reregister(keys.lkey, PD, addr, len, access),
                Err(VerbsError::InvalidArgument(_))
            ),
            "{addr:#x} {len} {access:?}"
        );
    }
    assert!(matches!(
        t.reregister(keys.lkey ^ 0x100, PD, buf.addr(), LEN as u64, access),
        Err(VerbsError::InvalidArgument(_))
    ));
    let (mw, mw_rkey) = t.alloc_window(PD, MwType::Type1).unwrap();
    let bind = BindMwWr {
        mw,
        rkey: next_rkey(mw_rkey),
        bind_info: MwBindInfo {
            mr_lkey: keys.lkey,
            addr: buf.addr(),
            length: 16,
            mw_access_flags: AccessFlags::REMOTE_WRITE,
        },
    };
    t.bind_window(PD, 0, &bind).unwrap();
    assert!(matches!(
        t.reregister(keys.lkey, OTHER_PD, buf.addr(), LEN as u64, access),
        Err(VerbsError::Busy(_))
    ));
    // Still the region it was: PD, range and access.
    t.remote_write(PD, keys.rkey, buf.addr() + LEN as u64 - 1, b"z")
        .unwrap();
    assert_eq!(buf.to_vec()[LEN - 1], b'z');
}
