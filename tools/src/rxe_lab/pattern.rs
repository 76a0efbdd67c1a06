//! The lab's data pattern, shared with the guest's peer.py: byte `i` of pattern `seed` is
//! `block[i % 251]` with `block[j] = (j * 167 + seed * 59 + 11) % 256`. A prime period makes
//! data shifted by any multiple of an MTU, or left over from another message, show as a
//! mismatch; a repeated block keeps it cheap for Python under TCG.

/// Period of the pattern in bytes.
pub const PATTERN_PERIOD: usize = 251;

/// `len` bytes of pattern `seed`.
pub fn lab_pattern(seed: u64, len: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..PATTERN_PERIOD as u64)
        .map(|j| ((j * 167 + (seed % 256) * 59 + 11) % 256) as u8)
        .collect();
    block.iter().copied().cycle().take(len).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_python_definition() {
        // pattern(3, 5) in peer.py: [(j*167 + 3*59 + 11) % 256 for j in 0..5]
        assert_eq!(lab_pattern(3, 5), vec![188, 99, 10, 177, 88]);
        let p = lab_pattern(9, 600);
        assert_eq!(p[251], p[0]);
        assert_ne!(p[..256], p[256..512]);
        assert_ne!(lab_pattern(1, 64), lab_pattern(2, 64));
    }
}
