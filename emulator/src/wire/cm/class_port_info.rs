//! ClassPortInfo (attribute 0x0001; IBA 13.4.8.1): what a management class supports and
//! where it redirects. The CM answers a Get with it; 72 bytes, the rest of the MAD data is
//! reserved.

use super::layout::mad_layout;
use super::mad::MAD_DATA_LEN;

mad_layout! {
    /// A typed view of a ClassPortInfo.
    view ClassPortInfoPacket;
    /// Every field of a ClassPortInfo.
    repr ClassPortInfoRepr;
    len MAD_DATA_LEN;
    fields {
        /// MAD base version supported.
        base_version, set_base_version: u8 = (0, 0, 8);
        /// Class version supported.
        class_version, set_class_version: u8 = (1, 0, 8);
        /// Capability mask.
        capability_mask, set_capability_mask: u16 = (2, 0, 16);
        /// Capability mask 2 (27 bits).
        capability_mask2, set_capability_mask2: u32 = (4, 0, 27);
        /// Response time value: 4.096 us * 2^value.
        resp_time_value, set_resp_time_value: u8 = (7, 3, 5);
        /// Redirect traffic class.
        redirect_tc, set_redirect_tc: u8 = (24, 0, 8);
        /// Redirect service level.
        redirect_sl, set_redirect_sl: u8 = (25, 0, 4);
        /// Redirect flow label.
        redirect_flow_label, set_redirect_flow_label: u32 = (25, 4, 20);
        /// Redirect LID.
        redirect_lid, set_redirect_lid: u16 = (28, 0, 16);
        /// Redirect P_Key.
        redirect_pkey, set_redirect_pkey: u16 = (30, 0, 16);
        /// Redirect QP.
        redirect_qp, set_redirect_qp: u32 = (33, 0, 24);
        /// Redirect Q_Key.
        redirect_qkey, set_redirect_qkey: u32 = (36, 0, 32);
        /// Trap traffic class.
        trap_tc, set_trap_tc: u8 = (56, 0, 8);
        /// Trap service level.
        trap_sl, set_trap_sl: u8 = (57, 0, 4);
        /// Trap flow label.
        trap_flow_label, set_trap_flow_label: u32 = (57, 4, 20);
        /// Trap LID.
        trap_lid, set_trap_lid: u16 = (60, 0, 16);
        /// Trap P_Key.
        trap_pkey, set_trap_pkey: u16 = (62, 0, 16);
        /// Trap hop limit.
        trap_hop_limit, set_trap_hop_limit: u8 = (64, 0, 8);
        /// Trap QP.
        trap_qp, set_trap_qp: u32 = (65, 0, 24);
        /// Trap Q_Key.
        trap_qkey, set_trap_qkey: u32 = (68, 0, 32);
    }
    bytes {
        /// Redirect GID.
        redirect_gid, redirect_gid_mut = (8, 16);
        /// Trap GID.
        trap_gid, trap_gid_mut = (40, 16);
    }
}
