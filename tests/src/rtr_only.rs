//! A QP taken to RTR and no further: it receives and acknowledges, but cannot send.

use softverbs::{AccessFlags, Mtu, RcEndpoint};
use softverbs_api::qp::AhAttr;
use softverbs_testkit::{ah_to, RcMoves};

use crate::Side;

/// Takes `side`'s QP from RESET through INIT to RTR towards `peer` (reached through GID
/// index 1, RNR timer code 12), with `access` for remote requests and `max_dest_rd_atomic`
/// READ / atomic resources. Panics if a move fails.
pub fn to_rtr_only(
    side: &Side,
    peer: &RcEndpoint,
    path_mtu: Mtu,
    access: AccessFlags,
    max_dest_rd_atomic: u8,
) {
    let moves = RcMoves {
        access,
        path_mtu,
        dest_qp_num: peer.qpn,
        rq_psn: peer.psn,
        max_dest_rd_atomic,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            sgid_index: 1,
            ..ah_to(peer.gid)
        },
        ..RcMoves::default()
    };
    for (attr, mask) in [moves.init(), moves.rtr()] {
        side.qp.modify(&attr, mask).expect("modify towards RTR");
    }
}
