//! Seeded fault injection: loss (independent and in bursts), duplication, reordering (by delay
//! jitter) and corruption.

/// A small, fast, seedable PRNG (xorshift64*), so the harness needs no dependency and a seed
/// means the same thing on every platform.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        (self.next_u64() % 1000) < per_mille as u64
    }

    /// A value in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// What the virtual network does to each packet, per direction. Probabilities are per mille.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Independent loss.
    pub loss_per_mille: u32,
    /// Chance that a loss starts a burst ...
    pub burst_per_mille: u32,
    /// ... of up to this many further packets lost.
    pub burst_max: u32,
    /// Duplication (the copy arrives later).
    pub dup_per_mille: u32,
    /// Chance of extra delay, which reorders the packet behind later ones.
    pub reorder_per_mille: u32,
    /// Corruption of one random byte (the ICRC must catch it).
    pub corrupt_per_mille: u32,
}

impl FaultConfig {
    /// No faults.
    pub fn none() -> Self {
        Self::default()
    }

    /// The reliability bar of DESIGN.md: 20% loss with bursts, 20% duplication, reordering,
    /// 2% corruption.
    pub fn harsh() -> Self {
        FaultConfig {
            loss_per_mille: 200,
            burst_per_mille: 100,
            burst_max: 4,
            dup_per_mille: 200,
            reorder_per_mille: 100,
            corrupt_per_mille: 20,
        }
    }
}
