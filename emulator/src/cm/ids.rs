//! Unguessable communication IDs and starting PSNs from a seeded generator (SplitMix64),
//! so the sans-I/O core stays deterministic under test and random in use.

/// A seeded generator of 32-bit IDs and 24-bit PSNs.
#[derive(Debug, Clone)]
pub struct IdGen {
    state: u64,
}

impl IdGen {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> IdGen {
        IdGen { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A non-zero ID for which `in_use` is false, with `prefix` as its top byte when given
    /// (a shared device's slot), or None after 64 tries (a nearly full space; the caller
    /// reports the table full).
    pub fn comm_id(&mut self, prefix: Option<u8>, in_use: impl Fn(u32) -> bool) -> Option<u32> {
        (0..64)
            .map(|_| {
                let id = self.next_u64() as u32;
                match prefix {
                    Some(p) => (u32::from(p) << 24) | (id & 0x00ff_ffff),
                    None => id,
                }
            })
            .find(|&id| id != 0 && !in_use(id))
    }

    /// A random 24-bit starting PSN.
    pub fn psn(&mut self) -> u32 {
        (self.next_u64() as u32) & 0x00ff_ffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_nonzero_and_seed_dependent() {
        let mut g = IdGen::new(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = g.comm_id(None, |id| seen.contains(&id)).unwrap();
            assert!(seen.insert(id));
        }
        assert_ne!(
            IdGen::new(1).comm_id(None, |_| false),
            IdGen::new(2).comm_id(None, |_| false)
        );
        assert!(IdGen::new(3).psn() <= 0xff_ffff);
        assert_eq!(IdGen::new(3).comm_id(None, |_| true), None);
        // A shared device's slot is the top byte of every ID, the rest still random.
        let mut g = IdGen::new(9);
        let ids: std::collections::HashSet<u32> = (0..100)
            .map(|_| g.comm_id(Some(0x2a), |_| false).unwrap())
            .collect();
        assert!(ids.iter().all(|id| id >> 24 == 0x2a));
        assert_eq!(ids.len(), 100);
    }
}
