//! Memory windows: `ibv_alloc_mw`, `ibv_bind_mw` and the BIND_MW work request.

use crate::flags::{AccessFlags, SendFlags};

/// `enum ibv_mw_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// IBV_MW_TYPE_1: bound with the `ibv_bind_mw` verb; not invalidatable remotely.
    Type1,
    /// IBV_MW_TYPE_2: bound with an IBV_WR_BIND_MW work request on a QP; invalidated by
    /// LOCAL_INV or SEND_WITH_INV.
    Type2,
}

impl MwType {
    /// The numeric value of `enum ibv_mw_type`.
    pub fn to_raw(self) -> u32 {
        match self {
            MwType::Type1 => 1,
            MwType::Type2 => 2,
        }
    }
}

/// `struct ibv_mw_bind_info`: what a bind attaches the window to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MwBindInfo {
    /// The lkey of the MR the window lies in (the MR needs `MW_BIND` access); 0 with
    /// `length` 0 unbinds the window.
    pub mr_lkey: u32,
    /// First byte of the window (inside the MR).
    pub addr: u64,
    /// Length of the window in bytes.
    pub length: u64,
    /// Remote rights the window grants (REMOTE_READ / REMOTE_WRITE / REMOTE_ATOMIC, and
    /// ZERO_BASED is not supported).
    pub mw_access_flags: AccessFlags,
}

/// `struct ibv_mw_bind`: the arguments of the `ibv_bind_mw` verb (type 1 windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MwBind {
    /// Returned in the completion of the bind (if signaled).
    pub wr_id: u64,
    /// SIGNALED and FENCE are meaningful.
    pub send_flags: SendFlags,
    /// Where and with which rights the window is bound.
    pub bind_info: MwBindInfo,
}

/// The `bind_mw` member of `struct ibv_send_wr` (IBV_WR_BIND_MW, type 2 windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BindMwWr {
    /// The window's id from the backend.
    pub mw: u32,
    /// The rkey the window gets: the current rkey with a new low byte
    /// ([`next_rkey`]), as `ibv_inc_rkey` gives.
    pub rkey: u32,
    /// Where and with which rights the window is bound.
    pub bind_info: MwBindInfo,
}

/// `ibv_inc_rkey`: the same key index with the next 8-bit key (the low byte).
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}
