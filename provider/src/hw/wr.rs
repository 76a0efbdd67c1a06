//! Work requests and completions of the hardware backend: contract WRs to the descriptors
//! the FFI posts, and `ibv_wc` to [`WorkCompletion`].

use std::sync::Arc;

use rdma_sys::ibv_sge;
use softverbs_api::{SendWr, Sge, VerbsError, VerbsResult, WrOpcode};

use super::ffi::post::{BindDesc, SendDesc, SendKind};
use super::ffi::{RawAh, RawMr, RawMw};

/// The objects a send WR names, held for the duration of its post.
pub(crate) enum Held {
    /// Nothing beyond the QP.
    Nothing,
    /// The address handle of a UD send.
    Ah(Arc<RawAh>),
    /// The window of a BIND_MW and the MR it binds to (none when unbinding).
    Bind(Arc<RawMw>, Option<Arc<RawMr>>),
}

/// The SGE array libibverbs takes.
pub(crate) fn sges(list: &[Sge]) -> Vec<ibv_sge> {
    list.iter()
        .map(|s| ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// The checks that do not depend on the device: what the emulator refuses at post time
/// before the WR reaches a queue (the NIC checks the rest).
pub(crate) fn check_send(w: &SendWr) -> VerbsResult<()> {
    if !w.send_flags.is_known() {
        return Err(VerbsError::inval(format!(
            "unknown send flags {:#x}",
            w.send_flags.bits()
        )));
    }
    if w.opcode == WrOpcode::BindMw && w.bind_mw.is_none() {
        return Err(VerbsError::inval("BIND_MW without a window to bind"));
    }
    Ok(())
}

/// The descriptor of send WR `w`, whose named objects are `held`.
pub(crate) fn send_desc<'a>(w: &SendWr, held: &'a Held) -> SendDesc<'a> {
    let remote_addr = w.remote.remote_addr;
    let rkey = w.remote.rkey;
    let kind = match (held, w.ud, w.bind_mw, w.opcode) {
        (Held::Ah(ah), Some(ud), _, _) => SendKind::Ud {
            ah,
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        },
        (Held::Bind(mw, mr), _, Some(b), _) => SendKind::BindMw {
            mw,
            rkey: b.rkey,
            bind: BindDesc {
                mr: mr.as_deref(),
                addr: b.bind_info.addr,
                length: b.bind_info.length,
                access: b.bind_info.mw_access_flags.bits(),
            },
        },
        (
            _,
            _,
            _,
            WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicWrite
            | WrOpcode::Flush,
        ) => SendKind::Rdma { remote_addr, rkey },
        (_, _, _, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) => SendKind::Atomic {
            remote_addr,
            rkey,
            compare_add: w.compare_add,
            swap: w.swap,
        },
        _ => SendKind::Plain,
    };
    // verbs.h keeps imm_data in network order and invalidate_rkey in host order.
    let imm_or_inv = match w.opcode {
        WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => w.imm_data.to_be(),
        WrOpcode::SendWithInv | WrOpcode::LocalInv => w.invalidate_rkey,
        _ => 0,
    };
    SendDesc {
        wr_id: w.wr_id,
        sges: sges(&w.sg_list),
        opcode: w.opcode.to_raw(),
        send_flags: w.send_flags.bits(),
        imm_or_inv,
        kind,
    }
}
