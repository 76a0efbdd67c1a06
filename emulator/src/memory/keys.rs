//! Key generation for memory regions.
//!
//! A key is 32 bits: the region's slot index in the low `index_bits` bits and a random,
//! non-zero tag in the remaining high bits (`index_bits` is just enough for the table size, at
//! most 24, so a tag has at least 8 bits). The index makes lookup a mask and an array access;
//! the tag makes keys unguessable: the lkey and rkey of one region share the index but have
//! independent tags that differ from each other, and a reused slot gets tags that differ from
//! the ones its previous region had, so a stale key never opens the new region of that slot
//! (a key two or more registrations old hits again with probability 2^-tag_bits, as with the
//! 8-bit key field of hardware). Tags come from a keyed hash (std's `RandomState`, seeded from
//! the OS once per process, mixed with the clock at table creation) of a counter: without the
//! hash key, one key says nothing about another. It is not meant as cryptography.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// Largest table an index field may address, leaving at least 8 tag bits.
pub(crate) const MAX_SLOTS: u32 = 1 << 24;

/// How a table splits its keys into index and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    index_bits: u32,
}

impl KeyLayout {
    /// The layout for a table of `slots` entries (clamped to `1..=MAX_SLOTS`).
    pub(crate) fn for_slots(slots: u32) -> KeyLayout {
        let highest_index = slots.clamp(1, MAX_SLOTS) - 1;
        KeyLayout {
            index_bits: u32::BITS - highest_index.leading_zeros(),
        }
    }

    /// The slot index a key names.
    pub(crate) fn index(self, key: u32) -> usize {
        (key & ((1u32 << self.index_bits) - 1)) as usize
    }

    /// Number of tag bits.
    pub(crate) fn tag_bits(self) -> u32 {
        u32::BITS - self.index_bits
    }

    /// The key of slot `index` with `tag`.
    pub(crate) fn key(self, index: u32, tag: u32) -> u32 {
        debug_assert!(index >> self.index_bits == 0 && u64::from(tag) >> self.tag_bits() == 0);
        // index_bits <= 24, so the shift is in range.
        (tag << self.index_bits) | index
    }
}

/// Source of key tags: a keyed hash of a counter.
pub(crate) struct KeyGen {
    hasher: RandomState,
    salt: u64,
    counter: u64,
}

impl KeyGen {
    /// A generator with fresh secret state.
    pub(crate) fn new() -> KeyGen {
        let salt = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        KeyGen {
            hasher: RandomState::new(),
            salt,
            counter: 0,
        }
    }

    /// A non-zero tag of `bits` bits (1..=32) that is none of `avoid`.
    pub(crate) fn tag(&mut self, bits: u32, avoid: &[u32]) -> u32 {
        debug_assert!((1..=32).contains(&bits));
        let mask = if bits >= 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        // With at least 8 bits there are 255 candidates and at most a handful to avoid, so this
        // ends after a draw or two.
        loop {
            self.counter = self.counter.wrapping_add(1);
            let mut h = self.hasher.build_hasher();
            h.write_u64(self.salt);
            h.write_u64(self.counter);
            let tag = (h.finish() as u32) & mask;
            if tag != 0 && !avoid.contains(&tag) {
                return tag;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_sizes() {
        assert_eq!(KeyLayout::for_slots(1).tag_bits(), 32);
        assert_eq!(KeyLayout::for_slots(2).tag_bits(), 31);
        assert_eq!(KeyLayout::for_slots(256).tag_bits(), 24);
        assert_eq!(KeyLayout::for_slots(257).tag_bits(), 23);
        assert_eq!(KeyLayout::for_slots(u32::MAX).tag_bits(), 8);
    }

    #[test]
    fn key_round_trip() {
        for slots in [1, 2, 100, 1 << 18, MAX_SLOTS] {
            let l = KeyLayout::for_slots(slots);
            let idx = slots - 1;
            let tag = (1u32 << l.tag_bits().min(31)) - 1;
            let key = l.key(idx, tag);
            assert_eq!(l.index(key), idx as usize);
            assert_ne!(key, 0);
        }
    }

    #[test]
    fn tags_are_nonzero_and_avoid() {
        let mut g = KeyGen::new();
        for _ in 0..10_000 {
            let t = g.tag(8, &[1, 2, 3]);
            assert!(t != 0 && t < 256 && !(1..=3).contains(&t));
        }
    }

    #[test]
    fn generators_differ() {
        let (mut a, mut b) = (KeyGen::new(), KeyGen::new());
        let xs: Vec<u32> = (0..8).map(|_| a.tag(32, &[])).collect();
        let ys: Vec<u32> = (0..8).map(|_| b.tag(32, &[])).collect();
        assert_ne!(xs, ys);
    }
}
