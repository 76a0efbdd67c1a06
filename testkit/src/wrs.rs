//! Work requests of one SGE, as most tests post them.

use softverbs_api::{RecvWr, Sge};

/// The SGE of `[addr, addr + length)` in the region `lkey`.
pub fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

/// A receive WR `wr_id` of the one buffer `[addr, addr + length)` of the region `lkey`.
pub fn recv_one(wr_id: u64, addr: u64, length: u32, lkey: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: vec![sge(addr, length, lkey)],
    }
}
