//! `struct ibv_wc` values as pyverbs reports them from the guest (verbs.h numbering), shared
//! by every scenario that checks an rxe completion.

/// `IBV_WC_SEND`.
pub const IBV_WC_SEND: u64 = 0;
/// `IBV_WC_RDMA_WRITE`.
pub const IBV_WC_RDMA_WRITE: u64 = 1;
/// `IBV_WC_RDMA_READ`.
pub const IBV_WC_RDMA_READ: u64 = 2;
/// `IBV_WC_COMP_SWAP`.
pub const IBV_WC_COMP_SWAP: u64 = 3;
/// `IBV_WC_FETCH_ADD`.
pub const IBV_WC_FETCH_ADD: u64 = 4;
/// `IBV_WC_RECV`.
pub const IBV_WC_RECV: u64 = 128;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
pub const IBV_WC_RECV_RDMA_WITH_IMM: u64 = 129;

/// Status `IBV_WC_REM_ACCESS_ERR`.
pub const IBV_WC_REM_ACCESS_ERR: u64 = 10;

/// Flag `IBV_WC_GRH`.
pub const IBV_WC_GRH: u64 = 1;
/// Flag `IBV_WC_WITH_IMM`.
pub const IBV_WC_WITH_IMM: u64 = 1 << 1;
/// Flag `IBV_WC_WITH_INV`.
pub const IBV_WC_WITH_INV: u64 = 1 << 3;
/// What rxe really reports for WITH_INV: its user-space provider copies the kernel's
/// `IB_WC_WITH_INVALIDATE` (1 << 2, which verbs.h calls IBV_WC_IP_CSUM_OK) unconverted.
pub const RXE_WC_WITH_INVALIDATE: u64 = 1 << 2;
