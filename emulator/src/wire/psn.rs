//! Packet sequence numbers: 24-bit, wrapping; compared by signed distance, never as raw u32.

use std::fmt;

/// A 24-bit packet sequence number (BTH PSN).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Psn(u32);

impl Psn {
    /// The bits a PSN occupies.
    pub const MASK: u32 = 0x00ff_ffff;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as a number in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, modulo 2^24.
    #[allow(clippy::should_implement_trait)] // PSN arithmetic is deliberately not `+` on raw numbers
    pub fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// The following PSN.
    pub fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` in the 24-bit circle, in `[-2^23, 2^23)`.
    pub fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference to the top of an i32, then arithmetic-shift back to
        // sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Whether `self` comes before `other` (within half the PSN space).
    pub fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_masks_to_24_bits() {
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
        assert_eq!(Psn::new(Psn::MASK).value(), Psn::MASK);
    }

    #[test]
    fn add_and_next_wrap() {
        assert_eq!(Psn::new(Psn::MASK).next(), Psn::new(0));
        assert_eq!(Psn::new(0xff_fffe).add(5), Psn::new(3));
        assert_eq!(Psn::new(7).add(u32::MAX), Psn::new(6)); // u32::MAX == -1 mod 2^24
    }

    #[test]
    fn diff_is_signed_and_wraps() {
        assert_eq!(Psn::new(5).diff(Psn::new(3)), 2);
        assert_eq!(Psn::new(3).diff(Psn::new(5)), -2);
        assert_eq!(Psn::new(1).diff(Psn::new(Psn::MASK)), 2);
        assert_eq!(Psn::new(Psn::MASK).diff(Psn::new(1)), -2);
        // Exactly half the circle away reads as "before".
        assert_eq!(Psn::new(0x80_0000).diff(Psn::new(0)), -(1 << 23));
        assert_eq!(Psn::new(0x7f_ffff).diff(Psn::new(0)), (1 << 23) - 1);
    }

    #[test]
    fn is_before_across_wrap() {
        assert!(Psn::new(Psn::MASK).is_before(Psn::new(0)));
        assert!(!Psn::new(0).is_before(Psn::new(Psn::MASK)));
        assert!(!Psn::new(9).is_before(Psn::new(9)));
    }

    #[test]
    fn display_is_decimal() {
        assert_eq!(Psn::new(0x10).to_string(), "16");
    }
}
