//! Work requests: what `ibv_post_send` / `ibv_post_recv` take.

use crate::flags::SendFlags;

/// `struct ibv_sge`: one gather/scatter element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address of the local buffer (inside the MR of `lkey`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR the buffer lies in.
    pub lkey: u32,
}

/// `enum ibv_wr_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// IBV_WR_RDMA_WRITE
    RdmaWrite,
    /// IBV_WR_RDMA_WRITE_WITH_IMM
    RdmaWriteWithImm,
    /// IBV_WR_SEND
    Send,
    /// IBV_WR_SEND_WITH_IMM
    SendWithImm,
    /// IBV_WR_RDMA_READ
    RdmaRead,
    /// IBV_WR_ATOMIC_CMP_AND_SWP
    AtomicCmpAndSwp,
    /// IBV_WR_ATOMIC_FETCH_AND_ADD
    AtomicFetchAndAdd,
    /// IBV_WR_LOCAL_INV
    LocalInv,
    /// IBV_WR_BIND_MW
    BindMw,
    /// IBV_WR_SEND_WITH_INV
    SendWithInv,
    /// IBV_WR_TSO
    Tso,
    /// IBV_WR_ATOMIC_WRITE
    AtomicWrite,
    /// IBV_WR_FLUSH
    Flush,
}

impl WrOpcode {
    /// The numeric value of `enum ibv_wr_opcode`.
    pub fn to_raw(self) -> u32 {
        match self {
            WrOpcode::RdmaWrite => 0,
            WrOpcode::RdmaWriteWithImm => 1,
            WrOpcode::Send => 2,
            WrOpcode::SendWithImm => 3,
            WrOpcode::RdmaRead => 4,
            WrOpcode::AtomicCmpAndSwp => 5,
            WrOpcode::AtomicFetchAndAdd => 6,
            WrOpcode::LocalInv => 7,
            WrOpcode::BindMw => 8,
            WrOpcode::SendWithInv => 9,
            WrOpcode::Tso => 10,
            WrOpcode::Flush => 14,
            WrOpcode::AtomicWrite => 15,
        }
    }

    /// The opcode of an `enum ibv_wr_opcode` value (None for unknown values and for the
    /// opcodes the contract does not model, such as the driver-specific ones).
    pub fn from_raw(raw: u32) -> Option<WrOpcode> {
        use WrOpcode::*;
        [
            RdmaWrite,
            RdmaWriteWithImm,
            Send,
            SendWithImm,
            RdmaRead,
            AtomicCmpAndSwp,
            AtomicFetchAndAdd,
            LocalInv,
            BindMw,
            SendWithInv,
            Tso,
            AtomicWrite,
            Flush,
        ]
        .into_iter()
        .find(|o| o.to_raw() == raw)
    }

    /// True for the opcodes that carry immediate data.
    pub fn has_imm(self) -> bool {
        matches!(self, WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm)
    }
}

/// Remote address part of RDMA / atomic work requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_send_wr` without the linked list: a slice of these is a WR list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// User-defined id, returned in the completion.
    pub wr_id: u64,
    /// Gather list.
    pub sg_list: Vec<Sge>,
    /// The operation.
    pub opcode: WrOpcode,
    /// Send flags.
    pub send_flags: SendFlags,
    /// Immediate data in host order (for the `*_WITH_IMM` opcodes); on the wire big-endian.
    pub imm_data: u32,
    /// The rkey to invalidate (SEND_WITH_INV, LOCAL_INV).
    pub invalidate_rkey: u32,
    /// Remote address and key (RDMA and atomic opcodes).
    pub remote: RemoteAddr,
    /// Compare operand (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap operand (CMP_AND_SWP).
    pub swap: u64,
    /// Destination for UD QPs: (address handle id, remote QPN, remote Q_Key).
    pub ud: Option<UdDest>,
    /// What a FLUSH covers (`ibv_wr_flush`'s len, type and level).
    pub flush: FlushParams,
    /// The window, new rkey and bind target of an IBV_WR_BIND_MW.
    pub bind_mw: Option<crate::mw::BindMwWr>,
}

/// The parameters of a FLUSH WR (IBTA 1.5; `ibv_wr_flush(qp, rkey, addr, len, type, level)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushParams {
    /// Bytes from `remote.remote_addr` (ignored for selectivity level 1: the whole region).
    pub length: u32,
    /// Placement type: [`FlushParams::GLOBAL`] (visibility) or [`FlushParams::PERSISTENT`].
    pub placement_type: u8,
    /// Selectivity level: [`FlushParams::RANGE`] or [`FlushParams::WHOLE_REGION`].
    pub selectivity_level: u8,
}

impl FlushParams {
    /// IB_FLUSH_GLOBAL: make the data globally visible.
    pub const GLOBAL: u8 = 1;
    /// IB_FLUSH_PERSISTENT: make the data persistent.
    pub const PERSISTENT: u8 = 2;
    /// IB_FLUSH_RANGE: the range `[remote_addr, remote_addr + length)`.
    pub const RANGE: u8 = 0;
    /// IB_FLUSH_MR: the whole memory region of the rkey.
    pub const WHOLE_REGION: u8 = 1;
}

impl Default for FlushParams {
    fn default() -> Self {
        FlushParams {
            length: 0,
            placement_type: FlushParams::GLOBAL,
            selectivity_level: FlushParams::RANGE,
        }
    }
}

/// Destination of a UD send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// Address-handle id from the backend.
    pub ah: u32,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

impl SendWr {
    /// A signaled SEND of `sg_list`.
    pub fn send(wr_id: u64, sg_list: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            sg_list,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            imm_data: 0,
            invalidate_rkey: 0,
            remote: RemoteAddr::default(),
            compare_add: 0,
            swap: 0,
            ud: None,
            flush: FlushParams::default(),
            bind_mw: None,
        }
    }

    /// A signaled SEND_WITH_IMM of `sg_list` carrying `imm_data`.
    pub fn send_with_imm(wr_id: u64, sg_list: Vec<Sge>, imm_data: u32) -> Self {
        SendWr {
            opcode: WrOpcode::SendWithImm,
            imm_data,
            ..SendWr::send(wr_id, sg_list)
        }
    }

    /// Total bytes of the gather list (saturating; lengths are validated at post time).
    pub fn total_length(&self) -> u64 {
        self.sg_list.iter().map(|s| s.length as u64).sum()
    }
}

/// `struct ibv_recv_wr` without the linked list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// User-defined id, returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: Vec<Sge>,
}
