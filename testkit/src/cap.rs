//! Queue capacities of the QPs tests create.

use softverbs_api::QpCap;

/// `wrs` work requests of `sges` SGEs each, on the send and the receive queue alike, and
/// no inline data.
pub fn qp_cap(wrs: u32, sges: u32) -> QpCap {
    QpCap {
        max_send_wr: wrs,
        max_recv_wr: wrs,
        max_send_sge: sges,
        max_recv_sge: sges,
        max_inline_data: 0,
    }
}
