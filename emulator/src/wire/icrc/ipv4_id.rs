//! Receiving through a UDP socket: the IPv4 identification, which the ICRC covers and the
//! socket does not report, recovered from the ICRC itself.
//!
//! For IPv4 the CRC covers the identification and flags/fragment-offset fields, which a
//! UDP socket does not report. [`solve_ipv4_identification`] recovers them instead of
//! guessing: a CRC is affine over GF(2) in its message bits, so for a fixed length
//! `crc(m with id) = crc(m with id 0) ^ L(id)`, with `L` linear. `L(id)` is the XOR of 16
//! vectors `D_i = Z^n d_i`: `d_i` is the raw CRC register after feeding bit `i` of the
//! ID field, and `Z^n` (a 32x32 GF(2) matrix) shifts it through the `n` bytes that follow.
//! `Z` is invertible, so instead of shifting 16 vectors per packet the solver shifts the
//! one residual back: `sum b_i d_i = Z^-n (stored ^ crc(m with id 0))`, using precomputed
//! powers `Z^-(2^k)` (zlib `crc32_combine` style), a handful of matrix-vector products,
//! then elimination against a fixed echelon basis of the `d_i`. No 65536-way search; the
//! cost is one CRC pass plus well under a microsecond. CRC-32 detects every burst of up to
//! 32 bits, so the 16 vectors are independent and the solution, if any, is unique. Flags are
//! tried as DF (0x4000) first, then 0; ID 0 is the fast path because an unconnected Linux
//! UDP socket sending with DF uses IP ID 0, which is what our own sender produces.
//!
//! Strength: with the ID unknown, only 32 - 16 = 16 bits of the ICRC are a check (per
//! flags value tried, so about 2^-15 of random corruptions are accepted, versus 2^-32 when
//! the whole IP header is known). The UDP checksum (rxe sends 0) and the Ethernet FCS,
//! checked by the kernel before the socket sees the datagram, are the other line of
//! defence; for IPv6 there is no ID and the full 32-bit check applies.

use super::*;

/// Finds the IPv4 identification and flags under which the stored ICRC of `packet`
/// (a datagram received on a UDP socket, which hides them) is correct; `None` if there is
/// none, i.e. the packet is corrupt. See the module documentation for the method and its
/// weaker (16-bit) check.
pub fn solve_ipv4_identification(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    udp_src_port: u16,
    udp_dst_port: u16,
    packet: &[u8],
) -> Option<IpHeaderInfo> {
    let stored = stored_icrc(packet)?;
    let ctx_with = |flags_fragment| IcrcContext {
        ip: IpHeaderInfo::V4 {
            src,
            dst,
            identification: 0,
            flags_fragment,
        },
        udp_src_port,
        udp_dst_port,
    };
    for flags_fragment in [IPV4_FLAG_DF, 0] {
        let target = stored ^ compute_icrc(&ctx_with(flags_fragment), packet);
        let identification = if target == 0 {
            0
        } else {
            // Bytes of CRC input after the 2 ID bytes.
            let covered = packet.len() - ICRC_LEN;
            let trailing = 8 + IPV4_HEADER_LEN + UDP_HEADER_LEN + covered - (IPV4_ID_OFFSET + 2);
            match id_solver().solve(trailing, target) {
                Some(id) => id,
                None => continue,
            }
        };
        return Some(IpHeaderInfo::V4 {
            src,
            dst,
            identification,
            flags_fragment,
        });
    }
    None
}

/// A 32x32 matrix over GF(2): column `k` is the image of register bit `k`.
type Gf2Matrix = [u32; 32];

fn gf2_times(m: &Gf2Matrix, mut v: u32) -> u32 {
    let mut out = 0;
    let mut k = 0;
    while v != 0 {
        if v & 1 != 0 {
            out ^= m[k];
        }
        v >>= 1;
        k += 1;
    }
    out
}

fn gf2_square(m: &Gf2Matrix) -> Gf2Matrix {
    let mut out = [0u32; 32];
    for (k, col) in out.iter_mut().enumerate() {
        *col = gf2_times(m, m[k]);
    }
    out
}

/// One step of the raw (init 0, no final xor) reflected CRC register on one input bit 0.
fn shift_zero_bit(r: u32) -> u32 {
    if r & 1 != 0 {
        (r >> 1) ^ POLY
    } else {
        r >> 1
    }
}

/// Inverse of [`shift_zero_bit`]: POLY has bit 31 set and `r >> 1` never does, so bit 31
/// of the result tells whether the polynomial was added.
fn unshift_zero_bit(r: u32) -> u32 {
    if r & 0x8000_0000 != 0 {
        ((r ^ POLY) << 1) | 1
    } else {
        r << 1
    }
}

/// Raw CRC register after feeding `bytes` starting from register 0.
fn raw_crc(bytes: &[u8]) -> u32 {
    let mut r = 0u32;
    for &b in bytes {
        r ^= u32::from(b);
        for _ in 0..8 {
            r = shift_zero_bit(r);
        }
    }
    r
}

/// Enough powers of two to cover any UDP datagram (under 2^17 bytes of CRC input).
const INV_POWERS: usize = 17;

/// Precomputed tables for [`solve_ipv4_identification`], built once per process.
struct IdSolver {
    /// `inv_zero_bytes[k]` undoes feeding `2^k` zero bytes.
    inv_zero_bytes: [Gf2Matrix; INV_POWERS],
    /// Echelon basis of the 16 `d_i`: (row, ID bits combined into it), sorted by
    /// leading bit, descending.
    basis: Vec<(u32, u16)>,
}

fn id_solver() -> &'static IdSolver {
    static SOLVER: OnceLock<IdSolver> = OnceLock::new();
    SOLVER.get_or_init(IdSolver::new)
}

impl IdSolver {
    fn new() -> IdSolver {
        let mut m: Gf2Matrix = core::array::from_fn(|k| {
            let mut r = 1u32 << k;
            for _ in 0..8 {
                r = unshift_zero_bit(r);
            }
            r
        });
        let inv_zero_bytes = core::array::from_fn(|_| {
            let this = m;
            m = gf2_square(&m);
            this
        });
        let mut solver = IdSolver {
            inv_zero_bytes,
            basis: Vec::with_capacity(16),
        };
        for i in 0..16 {
            // The ID field is big-endian: bit i of the u16.
            solver.insert(raw_crc(&(1u16 << i).to_be_bytes()), 1 << i);
        }
        solver
    }

    /// Gaussian elimination, one vector at a time, keyed by the highest set bit.
    fn insert(&mut self, mut v: u32, mut combo: u16) {
        for &(row, row_combo) in &self.basis {
            // `v ^ row < v` exactly when v has row's leading bit set.
            if v ^ row < v {
                v ^= row;
                combo ^= row_combo;
            }
        }
        if v != 0 {
            self.basis.push((v, combo));
            self.basis
                .sort_unstable_by_key(|&(row, _)| std::cmp::Reverse(row));
        }
    }

    /// The ID whose contribution, shifted through `trailing` zero bytes, is `target`.
    fn solve(&self, trailing: usize, target: u32) -> Option<u16> {
        let mut t = target;
        for (k, m) in self.inv_zero_bytes.iter().enumerate() {
            if trailing >> k & 1 != 0 {
                t = gf2_times(m, t);
            }
        }
        if trailing >> INV_POWERS != 0 {
            return None;
        }
        let mut id = 0u16;
        for &(row, combo) in &self.basis {
            if t ^ row < t {
                t ^= row;
                id ^= combo;
            }
        }
        (t == 0).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshift_inverts_shift() {
        for r in [0u32, 1, 2, 0x8000_0000, 0xdead_beef, POLY, u32::MAX] {
            assert_eq!(unshift_zero_bit(shift_zero_bit(r)), r);
            assert_eq!(shift_zero_bit(unshift_zero_bit(r)), r);
        }
        let s = id_solver();
        assert_eq!(s.basis.len(), 16, "the 16 ID bits are independent");
    }
}
