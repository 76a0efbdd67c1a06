//! Behaviour tests of the MR table over real buffers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use softverbs_api::{AccessFlags, Sge};

use super::{LocalSlice, MemError, MrTable, RdmaBuffer};

const PD: u32 = 7;
const GUARD: usize = 64;
const FILL: u8 = 0x5a;

fn rw() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A buffer with `GUARD` bytes of `FILL` on each side of a `len`-byte region.
///
/// It is an [`RdmaBuffer`], as the safe API registers: page-aligned (so the atomics tests
/// know which addresses are 8-aligned: a `Vec<u8>` promises no alignment, and under Miri it
/// gets none) and never lent out as a Rust reference while registered, so the test itself
/// cannot invalidate the pointer the table copies through. It reads and writes by copies.
struct Guarded {
    buf: RdmaBuffer,
    len: usize,
}

impl Guarded {
    fn new(len: usize) -> Guarded {
        let buf = RdmaBuffer::new(GUARD + len + GUARD).unwrap();
        buf.fill(FILL);
        Guarded { buf, len }
    }
    fn addr(&self) -> u64 {
        self.buf.addr() + GUARD as u64
    }
    /// A copy of the whole buffer, guards included.
    fn bytes(&self) -> Vec<u8> {
        self.buf.to_vec()
    }
    /// A copy of the region.
    fn region(&self) -> Vec<u8> {
        self.bytes()[GUARD..GUARD + self.len].to_vec()
    }
    /// Writes `data` at `offset` of the region, as the application would.
    fn write(&self, offset: usize, data: &[u8]) {
        self.buf.write(GUARD + offset, data).unwrap();
    }
    fn guards_intact(&self) -> bool {
        let all = self.bytes();
        all[..GUARD].iter().all(|&b| b == FILL)
            && all[GUARD + self.len..].iter().all(|&b| b == FILL)
    }
}

#[test]
fn remote_write_read_round_trip() {
    let t = MrTable::new(16);
    let g = Guarded::new(256);
    let base = g.addr();
    let k = t.register(PD, base, 256, rw()).unwrap();
    let data: Vec<u8> = (0..100u8).collect();
    t.remote_write(PD, k.rkey, base + 10, &data).unwrap();
    assert_eq!(&g.region()[10..110], &data[..]);
    assert_eq!(g.region()[9], FILL);
    assert_eq!(g.region()[110], FILL);
    let mut out = vec![1, 2];
    t.remote_read(PD, k.rkey, base + 10, 100, &mut out).unwrap();
    assert_eq!(&out[..2], &[1, 2]);
    assert_eq!(&out[2..], &data[..]);
    // The whole region, first byte to last.
    t.remote_write(PD, k.rkey, base, &[0xee; 256]).unwrap();
    assert!(g.region().iter().all(|&b| b == 0xee));
    assert!(g.guards_intact());
}

#[test]
fn every_error_variant() {
    let t = MrTable::new(16);
    let g = Guarded::new(64);
    let base = g.addr();
    let all = t.register(PD, base, 64, rw()).unwrap();
    let ro = t.register(PD, base, 64, AccessFlags::REMOTE_READ).unwrap();
    let mut out = Vec::new();

    assert_eq!(
        t.remote_write(PD, all.rkey ^ 0x8000_0000, base, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        t.remote_write(PD, all.lkey, base, &[1]),
        Err(MemError::InvalidKey),
        "lkey is no rkey"
    );
    assert_eq!(
        t.remote_write(PD + 1, all.rkey, base, &[1]),
        Err(MemError::PdMismatch)
    );
    assert_eq!(
        t.remote_write(PD, all.rkey, base + 64, &[1]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        t.remote_write(PD, ro.rkey, base, &[1]),
        Err(MemError::AccessDenied)
    );
    assert_eq!(
        t.atomic_fetch_add(PD, ro.rkey, base, 1),
        Err(MemError::AccessDenied)
    );
    assert_eq!(
        t.atomic_fetch_add(PD, all.rkey, base + 4, 1),
        Err(MemError::Misaligned)
    );
    assert_eq!(
        t.atomic_cmp_swap(PD, all.rkey, base + 1, 0, 1),
        Err(MemError::Misaligned)
    );
    assert_eq!(
        t.remote_read(PD, all.rkey, base + 60, 5, &mut out),
        Err(MemError::OutOfBounds)
    );
    let sge = Sge {
        addr: base,
        length: 8,
        lkey: all.lkey,
    };
    assert_eq!(
        t.scatter(PD, &[sge], 0, &[0; 9]),
        Err(MemError::LengthExceeded)
    );
    assert_eq!(
        t.scatter(PD, &[sge], 4, &[0; 5]),
        Err(MemError::LengthExceeded)
    );
    assert_eq!(
        t.scatter(PD, &[sge], u64::MAX, &[0; 1]),
        Err(MemError::LengthExceeded)
    );
    assert!(out.is_empty());
    assert!(
        g.region().iter().all(|&b| b == FILL),
        "no failed access wrote"
    );
    assert!(g.guards_intact());
}

#[test]
fn out_of_bounds_by_one_changes_nothing() {
    let t = MrTable::new(4);
    let g = Guarded::new(32);
    let base = g.addr();
    let k = t.register(PD, base, 32, rw()).unwrap();
    let before = g.bytes();
    // One byte past the end, one byte before the start, and a wrap-around length.
    assert_eq!(
        t.remote_write(PD, k.rkey, base + 1, &[0; 32]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        t.remote_write(PD, k.rkey, base - 1, &[0; 2]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        t.remote_write(PD, k.rkey, base + 32, &[0]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        t.atomic_fetch_add(PD, k.rkey, base + 32, 1),
        Err(MemError::OutOfBounds)
    );
    let sge = Sge {
        addr: base + 1,
        length: 32,
        lkey: k.lkey,
    };
    assert_eq!(
        t.scatter(PD, &[sge], 0, &[0; 4]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(g.bytes(), before);
}

#[test]
fn register_checks_access_and_range() {
    let t = MrTable::new(4);
    let g = Guarded::new(16);
    let base = g.addr();
    let einval = |r: softverbs_api::VerbsResult<_>| r.unwrap_err().errno();
    assert_eq!(
        einval(t.register(PD, base, 16, AccessFlags::REMOTE_WRITE)),
        22
    );
    assert_eq!(
        einval(t.register(PD, base, 16, AccessFlags::REMOTE_ATOMIC)),
        22
    );
    assert_eq!(
        einval(t.register(
            PD,
            base,
            16,
            AccessFlags::REMOTE_READ | AccessFlags(1 << 12)
        )),
        22
    );
    assert_eq!(einval(t.register(PD, base, 16, AccessFlags(1 << 31))), 22);
    assert_eq!(
        einval(t.register(PD, base, 0, AccessFlags::LOCAL_WRITE)),
        22
    );
    assert_eq!(einval(t.register(PD, 0, 16, AccessFlags::LOCAL_WRITE)), 22);
    assert_eq!(
        einval(t.register(PD, u64::MAX - 7, 16, AccessFlags::LOCAL_WRITE)),
        22
    );
    assert_eq!(einval(t.register(PD, base, 16, AccessFlags::ON_DEMAND)), 95);
    assert!(
        !t.pd_in_use(PD),
        "failed registrations leave nothing behind"
    );
    // REMOTE_READ alone, no flags at all, and optional bits are fine.
    t.register(PD, base, 16, AccessFlags::REMOTE_READ).unwrap();
    t.register(PD, base, 16, AccessFlags::empty()).unwrap();
    t.register(
        PD,
        base,
        16,
        AccessFlags::LOCAL_WRITE | AccessFlags(1 << 21) | AccessFlags::RELAXED_ORDERING,
    )
    .unwrap();
}

#[test]
fn deregister_then_access_is_invalid_key() {
    let t = MrTable::new(4);
    let g = Guarded::new(16);
    let base = g.addr();
    let k = t.register(PD, base, 16, rw()).unwrap();
    assert_eq!(
        t.deregister(k.rkey).unwrap_err().errno(),
        22,
        "dereg takes the lkey"
    );
    t.deregister(k.lkey).unwrap();
    assert_eq!(
        t.deregister(k.lkey).unwrap_err().errno(),
        22,
        "double dereg"
    );
    assert_eq!(t.deregister(0xdead_beef).unwrap_err().errno(), 22);
    let mut out = Vec::new();
    assert_eq!(
        t.remote_write(PD, k.rkey, base, &[1]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        t.remote_read(PD, k.rkey, base, 1, &mut out),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        t.atomic_fetch_add(PD, k.rkey, base, 1),
        Err(MemError::InvalidKey)
    );
    let sge = Sge {
        addr: base,
        length: 4,
        lkey: k.lkey,
    };
    assert_eq!(t.gather(PD, &[sge], &mut out), Err(MemError::InvalidKey));
    assert_eq!(t.scatter(PD, &[sge], 0, &[1]), Err(MemError::InvalidKey));
    assert!(g.region().iter().all(|&b| b == FILL));
}

#[test]
fn keys_differ_and_reused_slots_get_new_keys() {
    let t = MrTable::new(1);
    let g = Guarded::new(16);
    let base = g.addr();
    let mut seen = Vec::new();
    for _ in 0..200 {
        let k = t.register(PD, base, 16, rw()).unwrap();
        assert_ne!(k.lkey, k.rkey);
        assert_ne!(k.lkey, 0);
        assert_ne!(k.rkey, 0);
        if let Some(&(l, r)) = seen.last() {
            assert!(k.lkey != l && k.rkey != r && k.lkey != r && k.rkey != l);
            // A stale key does not open the slot's new region.
            assert_eq!(t.remote_write(PD, r, base, &[1]), Err(MemError::InvalidKey));
        }
        // One slot only: the table is full now.
        assert_eq!(t.register(PD, base, 16, rw()).unwrap_err().errno(), 12);
        t.deregister(k.lkey).unwrap();
        seen.push((k.lkey, k.rkey));
    }
    // The tags are not a simple sequence: many distinct values over 200 registrations.
    let mut rkeys: Vec<u32> = seen.iter().map(|&(_, r)| r).collect();
    rkeys.sort_unstable();
    rkeys.dedup();
    assert!(rkeys.len() > 150);
}

#[test]
fn table_full_is_enomem_and_frees_reuse() {
    let t = MrTable::new(3);
    let g = Guarded::new(16);
    let base = g.addr();
    let keys: Vec<_> = (0..3)
        .map(|_| t.register(PD, base, 16, rw()).unwrap())
        .collect();
    let err = t.register(PD, base, 16, rw()).unwrap_err();
    assert_eq!(err.errno(), 12);
    t.deregister(keys[1].lkey).unwrap();
    let again = t.register(PD, base, 16, rw()).unwrap();
    assert!(keys
        .iter()
        .all(|k| k.lkey != again.lkey && k.rkey != again.rkey));
}

#[test]
fn atomics_cmp_swap_and_fetch_add() {
    let t = MrTable::new(4);
    let mut words = vec![0u64; 4];
    let base = words.as_mut_ptr() as u64;
    let k = t.register(PD, base, 32, rw()).unwrap();
    words[1] = 10;
    // Unequal: nothing stored, the current value returned.
    assert_eq!(t.atomic_cmp_swap(PD, k.rkey, base + 8, 3, 99), Ok(10));
    assert_eq!(words[1], 10);
    // Equal: swapped, the original returned.
    assert_eq!(t.atomic_cmp_swap(PD, k.rkey, base + 8, 10, 99), Ok(10));
    assert_eq!(words[1], 99);
    assert_eq!(t.atomic_fetch_add(PD, k.rkey, base + 8, 1), Ok(99));
    assert_eq!(words[1], 100);
    // Wrapping add; host byte order.
    words[3] = u64::MAX;
    assert_eq!(t.atomic_fetch_add(PD, k.rkey, base + 24, 2), Ok(u64::MAX));
    assert_eq!(words[3], 1);
    let mut out = Vec::new();
    t.remote_read(PD, k.rkey, base + 24, 8, &mut out).unwrap();
    assert_eq!(out, 1u64.to_ne_bytes());
    // The last word is in bounds, one past it is not.
    assert_eq!(
        t.atomic_fetch_add(PD, k.rkey, base + 32, 1),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(words[0], 0);
    assert_eq!(words[2], 0);
}

#[test]
fn concurrent_fetch_add_is_exact() {
    // Miri interprets every add and checks the threads for data races: fewer adds do that.
    let adds_per_thread: u64 = if cfg!(miri) { 50 } else { 10_000 };
    let t = Arc::new(MrTable::new(4));
    let mut words = vec![0u64; 2];
    let base = words.as_mut_ptr() as u64;
    let k = t.register(PD, base, 16, rw()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for _ in 0..adds_per_thread {
                    t.atomic_fetch_add(PD, k.rkey, base + 8, 1).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    t.deregister(k.lkey).unwrap();
    assert_eq!(words, [0, 8 * adds_per_thread]);
}

/// A 32-byte region holding 0, 1, ... 31, registered for local access only (its guards
/// stay alive in the returned buffer).
fn counting_region(t: &MrTable) -> (Guarded, u64, softverbs_api::backend::MrKeys) {
    let g = Guarded::new(32);
    let base = g.addr();
    let k = t.register(PD, base, 32, AccessFlags::empty()).unwrap();
    g.write(0, &(0..32u8).collect::<Vec<_>>());
    (g, base, k)
}

/// Bytes 4..7 of the region at `base`, an empty SGE with a bad key (skipped, its key never
/// looked at), then `tail_len` bytes at `base + tail_at`.
fn split_list(base: u64, lkey: u32, tail_at: u64, tail_len: u32) -> [Sge; 3] {
    [
        Sge {
            addr: base + 4,
            length: 3,
            lkey,
        },
        Sge {
            addr: 0,
            length: 0,
            lkey: 0xbad,
        },
        Sge {
            addr: base + tail_at,
            length: tail_len,
            lkey,
        },
    ]
}

/// The first SGE of `list`, then 2 bytes that run one past the end of the region.
fn overrunning_list(list: &[Sge; 3], base: u64, lkey: u32) -> [Sge; 2] {
    [
        list[0],
        Sge {
            addr: base + 31,
            length: 2,
            lkey,
        },
    ]
}

#[test]
fn gather_checks_every_sge_first() {
    let t = MrTable::new(4);
    let (_g, base, k) = counting_region(&t);
    t.remote_read(PD, k.rkey, base, 1, &mut Vec::new())
        .unwrap_err();
    let sges = split_list(base, k.lkey, 30, 2);
    let mut out = vec![0xff];
    t.gather(PD, &sges, &mut out).unwrap();
    assert_eq!(out, [0xff, 4, 5, 6, 30, 31]);
    // A bad last SGE: nothing appended.
    let bad = overrunning_list(&sges, base, k.lkey);
    assert_eq!(t.gather(PD, &bad, &mut out), Err(MemError::OutOfBounds));
    assert_eq!(out.len(), 6);
    assert_eq!(t.gather(PD + 1, &sges, &mut out), Err(MemError::PdMismatch));
    // Local reads need no access flag; local writes need LOCAL_WRITE.
    assert_eq!(t.scatter(PD, &sges, 0, &[1]), Err(MemError::AccessDenied));
    assert_eq!(t.check_sges(PD, &sges, AccessFlags::empty()), Ok(5));
    assert_eq!(
        t.check_sges(PD, &sges, AccessFlags::LOCAL_WRITE),
        Err(MemError::AccessDenied)
    );
}

/// Every (offset, length) window of an `n`-byte list, the empty ones included.
fn windows(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |offset| (0..=n - offset).map(move |len| (offset, len)))
}

#[test]
fn gather_at_copies_one_packets_range_across_sges() {
    let t = MrTable::new(4);
    let (_g, base, k) = counting_region(&t);
    let sges = split_list(base, k.lkey, 28, 4);
    // The list reads 4 5 6 28 29 30 31; every window of it, at every offset.
    let list = [4u8, 5, 6, 28, 29, 30, 31];
    for (offset, len) in windows(list.len()) {
        let mut out = vec![0xee; len];
        t.gather_at(PD, &sges, offset as u64, &mut out).unwrap();
        assert_eq!(out, list[offset..offset + len], "offset {offset} len {len}");
    }
    // Past the end of the list: an error, and nothing copied.
    let mut out = [0xee; 3];
    assert_eq!(
        t.gather_at(PD, &sges, 5, &mut out),
        Err(MemError::LengthExceeded)
    );
    assert_eq!(out, [0xee; 3]);
    // A bad SGE inside the range: nothing copied, not even the good SGE before it.
    let bad = overrunning_list(&sges, base, k.lkey);
    assert_eq!(
        t.gather_at(PD, &bad, 1, &mut out),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(out, [0xee; 3]);
    // A range past the list's end is LengthExceeded before any SGE is looked at.
    assert_eq!(
        t.gather_at(PD, &bad, 0, &mut [0; 6]),
        Err(MemError::LengthExceeded)
    );
    assert_eq!(
        t.scatter(PD, &bad, 0, &[0; 6]),
        Err(MemError::LengthExceeded)
    );
    // ... but a bad SGE outside the range is not this packet's business.
    let mut two = [0u8; 2];
    t.gather_at(PD, &bad, 0, &mut two).unwrap();
    assert_eq!(two, [4, 5]);
    assert_eq!(
        t.gather_at(PD + 1, &sges, 0, &mut two),
        Err(MemError::PdMismatch)
    );
    t.deregister(k.lkey).unwrap();
    assert_eq!(
        t.gather_at(PD, &sges, 0, &mut two),
        Err(MemError::InvalidKey)
    );
}

#[test]
fn local_slice_names_a_range_inside_one_sge_and_reads_it_in_place() {
    let t = MrTable::new(4);
    let (_g, base, k) = counting_region(&t);
    let sges = split_list(base, k.lkey, 28, 4);
    // The list reads 4 5 6 | 28 29 30 31: ranges inside one SGE are named in place and read
    // back as gather_at copies them; ranges across SGEs (or empty) are left to gather_at.
    let list = [4u8, 5, 6, 28, 29, 30, 31];
    for (offset, len) in windows(list.len()) {
        let one_sge = len > 0 && (offset + len <= 3 || offset >= 3);
        let slice = t.local_slice(PD, &sges, offset as u64, len).unwrap();
        assert_eq!(slice.is_some(), one_sge, "offset {offset} len {len}");
        // Named from the list alone (a message's later packets), the same slice.
        let unchecked = LocalSlice::within_one_sge(PD, &sges, offset as u64, len);
        assert_eq!(unchecked, slice, "offset {offset} len {len}");
        if let Some(slice) = slice {
            let reader = t.reader();
            let bytes = reader.bytes(&slice).unwrap();
            assert_eq!(
                bytes,
                &list[offset..offset + len],
                "offset {offset} len {len}"
            );
        }
    }
    // The checks of gather_at, with its errors.
    assert_eq!(
        t.local_slice(PD, &sges, 5, 3),
        Err(MemError::LengthExceeded)
    );
    assert_eq!(LocalSlice::within_one_sge(PD, &sges, 5, 3), None);
    assert_eq!(LocalSlice::within_one_sge(PD, &sges, u64::MAX, 1), None);
    let bad = overrunning_list(&sges, base, k.lkey);
    assert_eq!(t.local_slice(PD, &bad, 3, 1), Err(MemError::OutOfBounds));
    assert_eq!(
        t.local_slice(PD + 1, &sges, 0, 2),
        Err(MemError::PdMismatch)
    );
    // A slice named before its region went is refused when read.
    let slice = t.local_slice(PD, &sges, 4, 2).unwrap().unwrap();
    t.deregister(k.lkey).unwrap();
    assert_eq!(t.reader().bytes(&slice), Err(MemError::InvalidKey));
}

#[test]
fn remote_slice_names_a_read_in_place_and_its_parts_read_back() {
    let t = MrTable::new(4);
    let g = Guarded::new(32);
    let base = g.addr();
    let k = t.register(PD, base, 32, rw()).unwrap();
    g.write(0, &(0..32u8).collect::<Vec<_>>());
    let whole = t.remote_slice(PD, k.rkey, base + 10, 20).unwrap().unwrap();
    assert_eq!((whole.lkey, whole.addr, whole.len), (k.lkey, base + 10, 20));
    let expected: Vec<u8> = (10..30).collect();
    for (offset, len) in windows(20) {
        let range = offset as u32..(offset + len) as u32;
        let part = whole.part(range.clone()).unwrap();
        let mut got = vec![0u8; len];
        t.read_slice(&part, &mut got).unwrap();
        assert_eq!(got, &expected[offset..offset + len], "{range:?}");
    }
    assert_eq!(whole.part(15..21), None, "a part past the end");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = whole.part(5..4);
    assert_eq!(backwards, None);
    assert_eq!(
        t.read_slice(&whole, &mut [0u8; 19]),
        Err(MemError::LengthExceeded)
    );
    // remote_read's checks and errors; a zero-length read checks nothing.
    assert_eq!(t.remote_slice(PD, 0x1234, 0, 0), Ok(None));
    assert_eq!(
        t.remote_slice(PD, k.rkey, base + 60, 5),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        t.remote_slice(PD + 1, k.rkey, base, 1),
        Err(MemError::PdMismatch)
    );
    assert_eq!(
        t.remote_slice(PD, k.lkey ^ 0x80, base, 1),
        Err(MemError::InvalidKey)
    );
    let (_g2, base2, no_remote) = counting_region(&t);
    assert_eq!(
        t.remote_slice(PD, no_remote.rkey, base2, 1),
        Err(MemError::AccessDenied)
    );
    // Its region gone, the slice no longer reads.
    t.deregister(k.lkey).unwrap();
    assert_eq!(
        t.read_slice(&whole, &mut [0u8; 20]),
        Err(MemError::InvalidKey)
    );
}

#[test]
fn deregister_waits_for_a_reader() {
    let t = Arc::new(MrTable::new(4));
    let (_g, _base, k) = counting_region(&t);
    let reader = t.reader();
    let done = Arc::new(AtomicBool::new(false));
    let dereg = {
        let (t, done) = (t.clone(), done.clone());
        std::thread::spawn(move || {
            t.deregister(k.lkey).unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !done.load(Ordering::SeqCst),
        "deregister returned while a send could still read the region"
    );
    drop(reader);
    dereg.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
}

#[test]
fn scatter_at_offsets_across_sges() {
    let t = MrTable::new(4);
    let g = Guarded::new(32);
    let base = g.addr();
    let k = t.register(PD, base, 32, AccessFlags::LOCAL_WRITE).unwrap();
    // List space: [0,4) -> base+0, [4,4) empty, [4,10) -> base+20.
    let sges = [
        Sge {
            addr: base,
            length: 4,
            lkey: k.lkey,
        },
        Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        },
        Sge {
            addr: base + 20,
            length: 6,
            lkey: k.lkey,
        },
    ];
    assert_eq!(t.check_sges(PD, &sges, AccessFlags::LOCAL_WRITE), Ok(10));
    // Two packets of one message: bytes 0..3, then 3..10.
    t.scatter(PD, &sges, 0, &[1, 2, 3]).unwrap();
    t.scatter(PD, &sges, 3, &[4, 5, 6, 7, 8, 9, 10]).unwrap();
    assert_eq!(&g.region()[..5], &[1, 2, 3, 4, FILL]);
    assert_eq!(&g.region()[19..27], &[FILL, 5, 6, 7, 8, 9, 10, FILL]);
    // Filling exactly to the end is fine; an empty write at the end too.
    t.scatter(PD, &sges, 9, &[11]).unwrap();
    t.scatter(PD, &sges, 10, &[]).unwrap();
    assert_eq!(g.region()[25], 11);
    // An SGE the data does not reach is not checked (the transport uses check_sges for that).
    let tail_bad = [
        sges[0],
        Sge {
            addr: base,
            length: 4,
            lkey: 0xbad,
        },
    ];
    t.scatter(PD, &tail_bad, 0, &[7]).unwrap();
    assert_eq!(
        t.scatter(PD, &tail_bad, 3, &[7, 7]),
        Err(MemError::InvalidKey)
    );
    assert_eq!(
        g.region()[3],
        4,
        "nothing written when a reached SGE is bad"
    );
    assert!(g.guards_intact());
}

#[test]
fn zero_length_remote_ops_check_nothing() {
    let t = MrTable::new(4);
    let mut out = Vec::new();
    assert_eq!(t.remote_write(PD, 0x1234, 0, &[]), Ok(()));
    assert_eq!(t.remote_read(PD, 0x1234, 0, 0, &mut out), Ok(()));
    assert!(out.is_empty());
}

#[test]
fn pd_in_use_tracks_registrations() {
    let t = MrTable::new(4);
    let g = Guarded::new(16);
    let base = g.addr();
    assert!(!t.pd_in_use(1));
    let a = t.register(1, base, 16, rw()).unwrap();
    let b = t.register(1, base, 8, rw()).unwrap();
    let c = t.register(2, base, 8, rw()).unwrap();
    assert!(t.pd_in_use(1) && t.pd_in_use(2) && !t.pd_in_use(3));
    t.deregister(a.lkey).unwrap();
    assert!(t.pd_in_use(1));
    t.deregister(b.lkey).unwrap();
    assert!(!t.pd_in_use(1));
    t.deregister(c.lkey).unwrap();
    assert!(!t.pd_in_use(2));
}

#[test]
fn invalidate_refuses_user_regions() {
    let t = MrTable::new(4);
    let g = Guarded::new(16);
    let base = g.addr();
    let k = t.register(PD, base, 16, rw()).unwrap();
    assert_eq!(t.invalidate_local(PD, 1, k.rkey), Err(MemError::InvalidKey));
    assert_eq!(
        t.invalidate_remote(PD, 1, k.rkey),
        Err(MemError::InvalidKey)
    );
    assert_eq!(t.invalidate_local(PD, 1, 0x77), Err(MemError::InvalidKey));
    // Still registered and usable.
    t.remote_write(PD, k.rkey, base, &[1]).unwrap();
}

#[test]
fn no_copy_after_deregister_returns() {
    let t = Arc::new(MrTable::new(4));
    let g = Guarded::new(4096);
    let base = g.addr();
    let k = t.register(PD, base, 4096, rw()).unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let writer = {
        let (t, started) = (Arc::clone(&t), Arc::clone(&started));
        std::thread::spawn(move || {
            let data = vec![0xaa; 4096];
            loop {
                match t.remote_write(PD, k.rkey, base, &data) {
                    Ok(()) => started.store(true, Ordering::Release),
                    Err(e) => return e,
                }
            }
        })
    };
    while !started.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    t.deregister(k.lkey).unwrap();
    g.write(0, &[0; 4096]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(writer.join().unwrap(), MemError::InvalidKey);
    assert!(
        g.region().iter().all(|&b| b == 0),
        "a write landed after deregister"
    );
    assert!(g.guards_intact());
}

#[test]
fn table_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<MrTable>();
}

proptest! {
    // Miri takes seconds a case: a sample of cases is enough for it to check the copies.
    #![proptest_config(if cfg!(miri) { ProptestConfig::with_cases(12) } else { ProptestConfig::default() })]

    /// Random remote accesses around (and far from) a region never touch a byte outside it,
    /// succeed exactly when in bounds, and move the right bytes.
    #[test]
    fn remote_access_stays_inside(
        // Offsets relative to the region start; large ones exercise wrap-around.
        rel in prop_oneof![-80i64..=150, Just(i64::MAX), Just(i64::MIN)],
        len in 0u32..200,
        huge in any::<bool>(),
        seed in any::<u8>(),
    ) {
        const LEN: usize = 96;
        let t = MrTable::new(2);
        let g = Guarded::new(LEN);
        let base = g.addr();
        let k = t.register(PD, base, LEN as u64, rw()).unwrap();
        let va = if huge { u64::MAX - (rel.unsigned_abs() % 64) } else { base.wrapping_add(rel as u64) };
        let inside = va >= base
            && (va - base).checked_add(u64::from(len)).is_some_and(|e| e <= LEN as u64);
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed) | 1).collect();
        let before = g.bytes();

        let w = t.remote_write(PD, k.rkey, va, &data);
        if len == 0 {
            prop_assert_eq!(w, Ok(()));
            prop_assert_eq!(&g.bytes(), &before);
        } else if inside {
            prop_assert_eq!(w, Ok(()));
            let off = GUARD + (va - base) as usize;
            let after = g.bytes();
            prop_assert_eq!(&after[off..off + len as usize], &data[..]);
            prop_assert_eq!(&after[..off], &before[..off]);
            prop_assert_eq!(&after[off + len as usize..], &before[off + len as usize..]);
        } else {
            prop_assert_eq!(w, Err(MemError::OutOfBounds));
            prop_assert_eq!(&g.bytes(), &before);
        }
        prop_assert!(g.guards_intact());

        let mut out = Vec::new();
        let r = t.remote_read(PD, k.rkey, va, len, &mut out);
        if len == 0 || inside {
            prop_assert_eq!(r, Ok(()));
            prop_assert_eq!(&out, &data);
        } else {
            prop_assert_eq!(r, Err(MemError::OutOfBounds));
            prop_assert!(out.is_empty());
        }
    }
}
