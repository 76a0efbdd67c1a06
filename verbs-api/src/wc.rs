//! Work completions: what `ibv_poll_cq` returns.

use crate::flags::WcFlags;

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS
    #[default]
    Success,
    /// IBV_WC_LOC_LEN_ERR: a receive buffer too small, or a send too long.
    LocLenErr,
    /// IBV_WC_LOC_QP_OP_ERR
    LocQpOpErr,
    /// IBV_WC_LOC_EEC_OP_ERR
    LocEecOpErr,
    /// IBV_WC_LOC_PROT_ERR: bad lkey or access.
    LocProtErr,
    /// IBV_WC_WR_FLUSH_ERR: the QP went to ERR before this WR completed.
    WrFlushErr,
    /// IBV_WC_MW_BIND_ERR
    MwBindErr,
    /// IBV_WC_BAD_RESP_ERR
    BadRespErr,
    /// IBV_WC_LOC_ACCESS_ERR
    LocAccessErr,
    /// IBV_WC_REM_INV_REQ_ERR
    RemInvReqErr,
    /// IBV_WC_REM_ACCESS_ERR
    RemAccessErr,
    /// IBV_WC_REM_OP_ERR
    RemOpErr,
    /// IBV_WC_RETRY_EXC_ERR
    RetryExcErr,
    /// IBV_WC_RNR_RETRY_EXC_ERR
    RnrRetryExcErr,
    /// IBV_WC_LOC_RDD_VIOL_ERR
    LocRddViolErr,
    /// IBV_WC_REM_INV_RD_REQ_ERR
    RemInvRdReqErr,
    /// IBV_WC_REM_ABORT_ERR
    RemAbortErr,
    /// IBV_WC_INV_EECN_ERR
    InvEecnErr,
    /// IBV_WC_INV_EEC_STATE_ERR
    InvEecStateErr,
    /// IBV_WC_FATAL_ERR
    FatalErr,
    /// IBV_WC_RESP_TIMEOUT_ERR
    RespTimeoutErr,
    /// IBV_WC_GENERAL_ERR
    GeneralErr,
}

impl WcStatus {
    /// Every status, in the order (and so with the values) of `enum ibv_wc_status`.
    pub const ALL: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// The numeric value of `enum ibv_wc_status`.
    pub fn to_raw(self) -> u32 {
        self as u32
    }

    /// The status of an `enum ibv_wc_status` value.
    pub fn from_raw(raw: u32) -> Option<WcStatus> {
        WcStatus::ALL.get(raw as usize).copied()
    }

    /// The string `ibv_wc_status_str` gives.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// IBV_WC_SEND
    #[default]
    Send,
    /// IBV_WC_RDMA_WRITE
    RdmaWrite,
    /// IBV_WC_RDMA_READ
    RdmaRead,
    /// IBV_WC_COMP_SWAP
    CompSwap,
    /// IBV_WC_FETCH_ADD
    FetchAdd,
    /// IBV_WC_BIND_MW
    BindMw,
    /// IBV_WC_LOCAL_INV
    LocalInv,
    /// IBV_WC_TSO
    Tso,
    /// IBV_WC_ATOMIC_WRITE
    AtomicWrite,
    /// IBV_WC_FLUSH
    Flush,
    /// IBV_WC_RECV
    Recv,
    /// IBV_WC_RECV_RDMA_WITH_IMM
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// The numeric value of `enum ibv_wc_opcode`.
    pub fn to_raw(self) -> u32 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::BindMw => 5,
            WcOpcode::LocalInv => 6,
            WcOpcode::Tso => 7,
            WcOpcode::Flush => 8,
            WcOpcode::AtomicWrite => 9,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
        }
    }

    /// The opcode of an `enum ibv_wc_opcode` value (`None` for values it lacks).
    pub fn from_raw(raw: u32) -> Option<WcOpcode> {
        [
            WcOpcode::Send,
            WcOpcode::RdmaWrite,
            WcOpcode::RdmaRead,
            WcOpcode::CompSwap,
            WcOpcode::FetchAdd,
            WcOpcode::BindMw,
            WcOpcode::LocalInv,
            WcOpcode::Tso,
            WcOpcode::Flush,
            WcOpcode::AtomicWrite,
            WcOpcode::Recv,
            WcOpcode::RecvRdmaWithImm,
        ]
        .into_iter()
        .find(|op| op.to_raw() == raw)
    }
}

/// `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed WR.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. Only meaningful for `status == Success` on receive completions
    /// (as in verbs.h), but always filled by the emulator.
    pub opcode: WcOpcode,
    /// Vendor syndrome (0 for the emulator).
    pub vendor_err: u32,
    /// Bytes received (receive completions) or transferred (READ / atomics).
    pub byte_len: u32,
    /// Immediate data in host order, valid when `wc_flags` has `WITH_IMM`.
    pub imm_data: u32,
    /// The rkey invalidated, valid when `wc_flags` has `WITH_INV`.
    pub invalidated_rkey: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD and RC receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Path bits.
    pub dlid_path_bits: u8,
}

/// One line for messages: `wr_id 0x3: RdmaWrite, remote access error (vendor error 0), 0
/// bytes, QP 0x11`, never the whole struct.
impl core::fmt::Display for WorkCompletion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "wr_id {:#x}: {:?}, {}",
            self.wr_id,
            self.opcode,
            self.status.as_str()
        )?;
        if self.vendor_err != 0 {
            write!(f, " (vendor error {})", self.vendor_err)?;
        }
        write!(f, ", {} bytes, QP {:#x}", self.byte_len, self.qp_num)
    }
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn a_completion_reads_as_one_line() {
        let wc = WorkCompletion {
            wr_id: 3,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RdmaWrite,
            qp_num: 0x11,
            ..WorkCompletion::default()
        };
        let text = wc.to_string();
        assert_eq!(
            text,
            format!(
                "wr_id 0x3: RdmaWrite, {}, 0 bytes, QP 0x11",
                WcStatus::RemAccessErr.as_str()
            )
        );
        assert!(!text.contains("WorkCompletion {"));
    }
}
