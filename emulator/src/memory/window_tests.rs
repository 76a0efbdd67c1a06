//! Behaviour tests of memory windows in the MR table over real buffers.

use softverbs_api::mw::next_rkey;
use softverbs_api::{AccessFlags, BindMwWr, MwBindInfo, MwType};

use super::table::RemoteAccessor;
use super::{MemError, MrTable, RdmaBuffer};

const PD: u32 = 3;
const QPN: u32 = 0x11;
const LEN: usize = 256;

/// MR rights a window needs under it (no remote rights of its own).
fn bindable() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND
}

fn rw() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn on_qp() -> RemoteAccessor {
    RemoteAccessor::qp(PD, QPN)
}

/// A table with one region over `buf`: an [`RdmaBuffer`], page-aligned (the atomics need
/// 8-aligned addresses, which a `Vec<u8>` does not promise, and Miri does not give) and
/// read only by copies.
struct Fixture {
    t: MrTable,
    buf: RdmaBuffer,
    lkey: u32,
    mr_rkey: u32,
}

impl Fixture {
    fn new(access: AccessFlags) -> Fixture {
        let t = MrTable::new(16);
        let buf = RdmaBuffer::new(LEN).unwrap();
        let keys = t.register(PD, buf.addr(), LEN as u64, access).unwrap();
        Fixture {
            t,
            buf,
            lkey: keys.lkey,
            mr_rkey: keys.rkey,
        }
    }
    fn base(&self) -> u64 {
        self.buf.addr()
    }
    /// A copy of the region's bytes.
    fn bytes(&self) -> Vec<u8> {
        self.buf.to_vec()
    }
    /// A BIND_MW of `[base + offset, + len)` with `access` and the window's next rkey.
    fn wr(&self, mw: (u32, u32), offset: u64, len: u64, access: AccessFlags) -> BindMwWr {
        BindMwWr {
            mw: mw.0,
            rkey: next_rkey(mw.1),
            bind_info: MwBindInfo {
                mr_lkey: self.lkey,
                addr: self.base() + offset,
                length: len,
                mw_access_flags: access,
            },
        }
    }
}

#[test]
fn window_keys_are_apart_from_region_keys() {
    let t = MrTable::new(64);
    let mut buf = vec![0u8; 64];
    let mut ids = Vec::new();
    for _ in 0..64 {
        let k = t
            .register(PD, buf.as_mut_ptr() as u64, 64, bindable())
            .unwrap();
        assert_eq!(k.lkey >> 31, 0);
        assert_eq!(k.rkey >> 31, 0);
        let (id, rkey) = t.alloc_window(PD, MwType::Type2).unwrap();
        assert_eq!(rkey >> 31, 1, "window rkey {rkey:#x}");
        assert_eq!(rkey >> 8, id);
        ids.push(id);
    }
    // Random-looking indices, not a sequence.
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 64);
    assert!(ids.windows(2).filter(|w| w[1] == w[0] + 1).count() < 8);
}

#[test]
fn type2_bind_access_invalidate() {
    let f = Fixture::new(bindable());
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    // Not bound yet: its key opens nothing.
    assert_eq!(
        f.t.remote_write(on_qp(), mw.1, f.base(), &[1]),
        Err(MemError::InvalidKey)
    );
    let wr = f.wr(mw, 16, 32, rw());
    let rkey = f.t.bind_window(PD, QPN, &wr).unwrap();
    assert_eq!(rkey, next_rkey(mw.1));
    let va = f.base() + 16;
    f.t.remote_write(on_qp(), rkey, va, &[7; 32]).unwrap();
    assert_eq!(&f.bytes()[16..48], &[7; 32]);
    assert_eq!(f.bytes()[15], 0);
    assert_eq!(f.bytes()[48], 0);
    let mut out = Vec::new();
    f.t.remote_read(on_qp(), rkey, va + 8, 8, &mut out).unwrap();
    assert_eq!(out, [7; 8]);
    // A READ's slice through the window names the region it lies in.
    let slice = f.t.remote_slice(on_qp(), rkey, va + 8, 8).unwrap().unwrap();
    assert_eq!((slice.lkey, slice.addr, slice.len), (f.lkey, va + 8, 8));
    let mut read = [0u8; 8];
    f.t.read_slice(&slice, &mut read).unwrap();
    assert_eq!(read, [7; 8]);
    assert_eq!(
        f.t.remote_slice(on_qp(), rkey, va + 31, 2),
        Err(MemError::OutOfBounds),
        "past the window's end, inside the region"
    );

    // Outside the window (though inside the region), a right it does not grant, another
    // QP, no QP, the key before the bind, and the region's own rkey (no remote rights).
    assert_eq!(
        f.t.remote_write(on_qp(), rkey, va + 31, &[1, 1]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        f.t.remote_write(on_qp(), rkey, va - 1, &[1]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        f.t.atomic_fetch_add(on_qp(), rkey, va, 1),
        Err(MemError::AccessDenied)
    );
    assert_eq!(
        f.t.remote_write(RemoteAccessor::qp(PD, QPN + 1), rkey, va, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        f.t.remote_write(PD, rkey, va, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        f.t.remote_write(RemoteAccessor::qp(PD + 1, QPN), rkey, va, &[1]),
        Err(MemError::PdMismatch)
    );
    assert_eq!(
        f.t.remote_write(on_qp(), mw.1, va, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        f.t.remote_write(on_qp(), f.mr_rkey, va, &[1]),
        Err(MemError::AccessDenied)
    );
    assert_eq!(&f.bytes()[16..48], &[7; 32]);

    // Bound: the region cannot go, and the window cannot be bound again.
    assert_eq!(f.t.deregister(f.lkey).unwrap_err().errno(), 16);
    let again = f.wr((mw.0, rkey), 0, 8, rw());
    assert!(f.t.bind_window(PD, QPN, &again).is_err());

    // Invalidation: a wrong key or PD changes nothing; then it works once.
    assert_eq!(
        f.t.invalidate_local(PD, QPN, rkey ^ 1),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        f.t.invalidate_local(PD + 1, QPN, rkey),
        Err(MemError::PdMismatch)
    );
    f.t.invalidate_local(PD, QPN, rkey).unwrap();
    assert_eq!(
        f.t.invalidate_local(PD, QPN, rkey),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        f.t.remote_write(on_qp(), rkey, va, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(&f.bytes()[16..48], &[7; 32]);
    // Free again: it binds with the next key, and the old one stays dead.
    let rkey2 = f.t.bind_window(PD, QPN, &again).unwrap();
    assert_eq!(rkey2, next_rkey(rkey));
    assert_eq!(
        f.t.remote_read(on_qp(), rkey, f.base(), 1, &mut out),
        Err(MemError::InvalidKey)
    );
    f.t.dealloc_window(mw.0).unwrap();
    assert_eq!(
        f.t.remote_read(on_qp(), rkey2, f.base(), 1, &mut out),
        Err(MemError::InvalidKey)
    );
    assert_eq!(f.t.dealloc_window(mw.0).unwrap_err().errno(), 22);
    f.t.deregister(f.lkey).unwrap();
}

#[test]
fn remote_invalidation_needs_the_binding_qp() {
    let f = Fixture::new(bindable());
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    let rkey = f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, rw())).unwrap();
    assert_eq!(
        f.t.invalidate_remote(PD, QPN + 1, rkey),
        Err(MemError::InvalidKey)
    );
    f.t.invalidate_remote(PD, QPN, rkey).unwrap();
    assert_eq!(
        f.t.invalidate_remote(PD, QPN, rkey),
        Err(MemError::InvalidKey)
    );
    // Region keys are never invalidatable (no fast-registration MRs here).
    assert_eq!(
        f.t.invalidate_local(PD, QPN, f.mr_rkey),
        Err(MemError::InvalidKey)
    );
    f.t.deregister(f.lkey).unwrap();
}

#[test]
fn bind_checks_change_nothing_when_they_fail() {
    let f = Fixture::new(bindable());
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    let bad = [
        // beyond the region, before it, wrapping around
        f.wr(mw, 200, 57, rw()),
        BindMwWr {
            bind_info: MwBindInfo {
                addr: f.base() - 1,
                ..f.wr(mw, 0, 8, rw()).bind_info
            },
            ..f.wr(mw, 0, 8, rw())
        },
        f.wr(mw, 8, u64::MAX, rw()),
        // zero length (type 2 cannot be invalidated by a bind)
        f.wr(mw, 0, 0, rw()),
        // the new rkey must keep the window's index
        BindMwWr {
            rkey: next_rkey(mw.1) ^ 0x100,
            ..f.wr(mw, 0, 8, rw())
        },
        // unsupported rights
        f.wr(mw, 0, 8, AccessFlags::ZERO_BASED | rw()),
        f.wr(mw, 0, 8, AccessFlags::MW_BIND),
        // an unknown window, an unknown region
        BindMwWr {
            mw: mw.0 ^ 1,
            rkey: next_rkey(mw.1) ^ 0x100,
            ..f.wr(mw, 0, 8, rw())
        },
        BindMwWr {
            bind_info: MwBindInfo {
                mr_lkey: f.lkey ^ 0x10000,
                ..f.wr(mw, 0, 8, rw()).bind_info
            },
            ..f.wr(mw, 0, 8, rw())
        },
    ];
    for wr in &bad {
        assert!(f.t.bind_window(PD, QPN, wr).is_err(), "{wr:?}");
    }
    // A QP of another PD (C10-72).
    assert!(f.t.bind_window(PD + 1, QPN, &f.wr(mw, 0, 8, rw())).is_err());
    // Nothing got bound: the key opens nothing and the region can go.
    assert_eq!(
        f.t.remote_write(on_qp(), next_rkey(mw.1), f.base(), &[1]),
        Err(MemError::InvalidKey)
    );
    f.t.deregister(f.lkey).unwrap();
    assert!(f.bytes().iter().all(|&b| b == 0));
}

#[test]
fn region_rights_limit_binds() {
    // No MW_BIND (C10-73).
    let f = Fixture::new(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    let read = AccessFlags::REMOTE_READ;
    assert!(f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, read)).is_err());
    // Remote write / atomic need LOCAL_WRITE on the region (C10-74); read does not.
    let f = Fixture::new(AccessFlags::MW_BIND);
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    for access in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC] {
        assert!(f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, access)).is_err());
    }
    f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, read)).unwrap();
    // A region of another PD than the window.
    let t = MrTable::new(4);
    let mut buf = vec![0u8; 64];
    let k = t
        .register(PD + 1, buf.as_mut_ptr() as u64, 64, bindable())
        .unwrap();
    let w = t.alloc_window(PD, MwType::Type2).unwrap();
    let wr = BindMwWr {
        mw: w.0,
        rkey: next_rkey(w.1),
        bind_info: MwBindInfo {
            mr_lkey: k.lkey,
            addr: buf.as_ptr() as u64,
            length: 8,
            mw_access_flags: read,
        },
    };
    assert!(t.bind_window(PD, QPN, &wr).is_err());
    assert_eq!(
        t.prepare_type1_bind(w.0, k.lkey, 8, read)
            .unwrap_err()
            .errno(),
        22,
        "a type 2 window is not bound through the verb"
    );
}

#[test]
fn type1_rebind_unbind_and_rules() {
    let f = Fixture::new(bindable());
    let mut other = vec![0u8; 64];
    let k2 =
        f.t.register(PD, other.as_mut_ptr() as u64, 64, bindable())
            .unwrap();
    let (id, first) = f.t.alloc_window(PD, MwType::Type1).unwrap();
    // Binds posted back to back get successive keys before any executes.
    let r1 = f.t.prepare_type1_bind(id, f.lkey, 16, rw()).unwrap();
    let r2 = f.t.prepare_type1_bind(id, k2.lkey, 16, rw()).unwrap();
    assert_eq!((r1, r2), (next_rkey(first), next_rkey(next_rkey(first))));
    // A cancelled (never posted) bind gives its key back, unless another was prepared since.
    let r3 = f.t.prepare_type1_bind(id, f.lkey, 16, rw()).unwrap();
    f.t.cancel_type1_bind(id, r3);
    assert_eq!(f.t.prepare_type1_bind(id, f.lkey, 16, rw()), Ok(r3));
    f.t.cancel_type1_bind(id, r2);
    assert_eq!(
        f.t.prepare_type1_bind(id, f.lkey, 16, rw()),
        Ok(next_rkey(r3))
    );
    let to_first = BindMwWr {
        mw: id,
        rkey: r1,
        ..f.wr((id, first), 0, 16, rw())
    };
    assert_eq!(f.t.bind_window(PD, QPN, &to_first), Ok(r1));
    // A type 1 window serves any QP of its PD.
    f.t.remote_write(PD, r1, f.base(), &[9; 16]).unwrap();
    assert_eq!(&f.bytes()[..16], &[9; 16]);
    // It cannot be invalidated, locally or remotely (o10-37.2.26).
    assert_eq!(f.t.invalidate_local(PD, QPN, r1), Err(MemError::InvalidKey));
    assert_eq!(
        f.t.invalidate_remote(PD, QPN, r1),
        Err(MemError::InvalidKey)
    );
    // Rebinding moves it: the first region is free, the second is held.
    let to_second = BindMwWr {
        mw: id,
        rkey: r2,
        bind_info: MwBindInfo {
            mr_lkey: k2.lkey,
            addr: other.as_ptr() as u64,
            length: 16,
            mw_access_flags: rw(),
        },
    };
    assert_eq!(f.t.bind_window(PD, QPN, &to_second), Ok(r2));
    assert_eq!(
        f.t.remote_write(PD, r1, f.base(), &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(f.t.deregister(k2.lkey).unwrap_err().errno(), 16);
    f.t.deregister(f.lkey).unwrap();
    // A zero-length bind unbinds a type 1 window.
    let r3 = f.t.prepare_type1_bind(id, 0, 0, rw()).unwrap();
    let unbind = BindMwWr {
        mw: id,
        rkey: r3,
        bind_info: MwBindInfo::default(),
    };
    assert_eq!(f.t.bind_window(PD, QPN, &unbind), Ok(r3));
    assert_eq!(
        f.t.remote_read(PD, r2, other.as_ptr() as u64, 1, &mut Vec::new()),
        Err(MemError::InvalidKey)
    );
    f.t.deregister(k2.lkey).unwrap();
    // ZERO_BASED and a region of another PD are refused before posting.
    assert_eq!(
        f.t.prepare_type1_bind(id, 0, 0, AccessFlags::ZERO_BASED)
            .unwrap_err()
            .errno(),
        22
    );
    let k3 =
        f.t.register(PD + 1, other.as_mut_ptr() as u64, 64, bindable())
            .unwrap();
    assert_eq!(
        f.t.prepare_type1_bind(id, k3.lkey, 8, rw())
            .unwrap_err()
            .errno(),
        1
    );
    assert_eq!(
        f.t.prepare_type1_bind(id ^ 1, k3.lkey, 8, rw())
            .unwrap_err()
            .errno(),
        22
    );
}

#[test]
fn dealloc_destroyed_qp_and_pd_use() {
    let f = Fixture::new(bindable());
    assert!(f.t.pd_in_use(PD));
    let a = f.t.alloc_window(PD + 5, MwType::Type1).unwrap();
    assert!(f.t.pd_in_use(PD + 5));
    f.t.dealloc_window(a.0).unwrap();
    assert!(!f.t.pd_in_use(PD + 5));

    // A bound window holds the region until it is deallocated.
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, rw())).unwrap();
    assert_eq!(f.t.deregister(f.lkey).unwrap_err().errno(), 16);
    f.t.dealloc_window(mw.0).unwrap();

    // ... or until the QP it was bound through is destroyed.
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    let rkey = f.t.bind_window(PD, QPN, &f.wr(mw, 0, 8, rw())).unwrap();
    f.t.release_qp_windows(QPN + 1);
    assert_eq!(f.t.deregister(f.lkey).unwrap_err().errno(), 16);
    f.t.release_qp_windows(QPN);
    assert_eq!(
        f.t.remote_write(on_qp(), rkey, f.base(), &[1]),
        Err(MemError::InvalidKey)
    );
    f.t.deregister(f.lkey).unwrap();
    assert!(f.t.pd_in_use(PD), "the window is still allocated");
    f.t.dealloc_window(mw.0).unwrap();
    assert!(!f.t.pd_in_use(PD));
}

#[test]
fn atomics_and_flush_through_a_window() {
    let f = Fixture::new(bindable());
    let mw = f.t.alloc_window(PD, MwType::Type2).unwrap();
    let access = AccessFlags::REMOTE_ATOMIC | AccessFlags::FLUSH_GLOBAL;
    let rkey = f.t.bind_window(PD, QPN, &f.wr(mw, 64, 16, access)).unwrap();
    let va = f.base() + 64;
    assert_eq!(f.t.atomic_fetch_add(on_qp(), rkey, va, 5), Ok(0));
    assert_eq!(f.t.atomic_cmp_swap(on_qp(), rkey, va, 5, 11), Ok(5));
    assert_eq!(
        f.t.atomic_fetch_add(on_qp(), rkey, va + 16, 1),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        f.t.atomic_write(on_qp(), rkey, va, [1; 8]),
        Err(MemError::AccessDenied)
    );
    assert_eq!(
        u64::from_ne_bytes(f.bytes()[64..72].try_into().unwrap()),
        11
    );
    f.t.flush(on_qp(), rkey, va, 16, false, false).unwrap();
    f.t.flush(on_qp(), rkey, 0, 0, false, true).unwrap();
    assert_eq!(
        f.t.flush(on_qp(), rkey, va, 17, false, false),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        f.t.flush(on_qp(), rkey, va, 8, true, false),
        Err(MemError::AccessDenied)
    );
}
