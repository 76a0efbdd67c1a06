//! A packet's payload named as a range of registered memory (key, address, length), to be
//! read only when the packet is sent.

use softverbs_api::Sge;

/// One packet's payload as a range of registered memory, checked when the packet was built
/// and read only when it is sent (see [`super::MrTable::local_slice`] and
/// [`super::MrReader::bytes`], which checks it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSlice {
    /// Protection domain of the QP that sends it.
    pub pd: u32,
    /// Local key of the region.
    pub lkey: u32,
    /// First address, as the SGE names it.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

impl LocalSlice {
    /// Bytes `range` of the slice (relative to its start), `None` if they are not all in it.
    pub fn part(&self, range: std::ops::Range<u32>) -> Option<LocalSlice> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        Some(LocalSlice {
            addr: self.addr.checked_add(u64::from(range.start))?,
            len: range.end - range.start,
            ..*self
        })
    }

    /// Bytes `[offset, offset + len)` of the gather list `sges`, if they lie in one SGE, as
    /// [`super::MrTable::local_slice`] names them, from the list alone: no region is looked
    /// up, so nothing is checked. For a caller that checked the list before (a message's
    /// later packets, their list checked as the message started) and whose bytes are checked
    /// again when read. `None` if the range is empty, outside the list or spans SGEs.
    pub fn within_one_sge(pd: u32, sges: &[Sge], offset: u64, len: usize) -> Option<LocalSlice> {
        let len32 = u32::try_from(len).ok().filter(|&l| l > 0)?;
        let end = offset.checked_add(u64::from(len32))?;
        let mut sge_start = 0u64;
        for sge in sges {
            let sge_end = sge_start + u64::from(sge.length);
            if sge.length > 0 && sge_end > offset {
                // The first SGE the range reaches must hold all of it.
                return (sge_start <= offset && end <= sge_end).then(|| LocalSlice {
                    pd,
                    lkey: sge.lkey,
                    addr: sge.addr.wrapping_add(offset - sge_start),
                    len: len32,
                });
            }
            sge_start = sge_end;
        }
        None
    }
}
