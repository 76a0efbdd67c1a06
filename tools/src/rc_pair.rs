//! An RC QP with its PD, CQ and buffers on one device: what the demo and pingpong set up on
//! each side before connecting.

use softverbs::{AccessFlags, Context, Cq, Mr, Qp, QpCap, RdmaBuffer, VerbsError, VerbsResult};

/// One side of an RC connection.
pub struct RcSide {
    /// The opened device.
    pub ctx: Context,
    /// One CQ for sends and receives.
    pub cq: Cq,
    /// The QP.
    pub qp: Qp,
    /// Source of sends.
    pub send_mr: Mr,
    /// Target of receives.
    pub recv_mr: Mr,
}

impl RcSide {
    /// Opens `device` and creates an RC QP with buffers of `buf_len` bytes each.
    pub fn new(device: &str, buf_len: usize, depth: u32) -> VerbsResult<RcSide> {
        let ctx = Context::open(device)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(depth * 2)?;
        let alloc = |n| RdmaBuffer::new(n).ok_or_else(|| VerbsError::nomem("buffer allocation"));
        let send_mr = pd.register(alloc(buf_len)?, AccessFlags::LOCAL_WRITE)?;
        let recv_mr = pd.register(alloc(buf_len)?, AccessFlags::LOCAL_WRITE)?;
        let qp = pd
            .qp_builder()
            .cap(QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            })
            .build(&cq, &cq)?;
        // The MRs and the QP hold the PD alive.
        Ok(RcSide {
            ctx,
            cq,
            qp,
            send_mr,
            recv_mr,
        })
    }
}

/// The byte at position `i` of test message `seq`: varies with both so that misplaced,
/// stale or duplicated data is caught.
pub fn pattern_byte(seq: u64, i: usize) -> u8 {
    let x =
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.wrapping_mul(0xD1B5_4A32_D192_ED03);
    (x >> 56) as u8
}

/// `len` bytes of test message `seq`.
pub fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(seq, i)).collect()
}

/// Splits `[0, len)` into up to `parts` SGE-sized pieces (some may be empty when `len` is
/// small); returns (offset, length) pairs.
pub fn split(len: usize, parts: usize) -> Vec<(usize, u32)> {
    let parts = parts.max(1);
    let base = len / parts;
    let mut out = Vec::with_capacity(parts);
    let mut off = 0;
    for p in 0..parts {
        let l = if p + 1 == parts { len - off } else { base };
        out.push((off, l as u32));
        off += l;
    }
    out
}
