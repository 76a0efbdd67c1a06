//! The hasher of the device's tables keyed by small integer ids (QP numbers, CQ ids): one
//! multiply instead of SipHash, on the per-packet and per-poll lookups. Denial of service
//! by colliding keys needs inserts, and only local verbs calls insert.

use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; correct for any other.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `HashMap<u32, V, IdHash>`.
pub type IdHash = BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_map_with_it_behaves_as_a_map() {
        let mut m: HashMap<u32, u32, IdHash> = HashMap::default();
        for i in 0..10_000u32 {
            m.insert(i * 7 + 0x11, i);
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000u32).all(|i| m[&(i * 7 + 0x11)] == i));
        assert!(!m.contains_key(&0));
    }
}
