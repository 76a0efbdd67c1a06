//! The C layouts of softverbs-api (`softverbs_api::c_layout`) as rdma-sys's bindgen types.
//! Both are verbs.h's structures: softverbs-ibverbs' C layout test proves ours against the
//! header bindgen reads, and `transmute` checks the sizes when this compiles, so a
//! conversion is a copy.
#![allow(unsafe_code)]

use std::mem::{align_of, size_of};

use rdma_sys::{ibv_ah_attr, ibv_qp_attr, ibv_qp_cap, ibv_srq_attr, ibv_wc};
use softverbs_api::c_layout::{IbvAhAttr, IbvQpAttr, IbvQpCap, IbvSrqAttr, IbvWc};

// `ibv_poll_cq` writes rdma-sys's `ibv_wc` into our `IbvWc` array (see `cq`): same size and
// alignment, or this does not compile.
const _: () = assert!(size_of::<IbvWc>() == size_of::<ibv_wc>());
const _: () = assert!(align_of::<IbvWc>() == align_of::<ibv_wc>());

/// Declares `fn $name($from) -> $to`, a copy between the two forms of one structure.
macro_rules! same_layout {
    ($(#[$doc:meta])* $name:ident, $from:ty => $to:ty) => {
        $(#[$doc])*
        pub(crate) fn $name(v: $from) -> $to {
            // SAFETY: the same verbs.h structure in both forms (see the module doc): same
            // size, alignment, field offsets and padding; every field is an integer or a
            // byte array (a union of them for the GID), valid for any bits.
            unsafe { std::mem::transmute::<$from, $to>(v) }
        }
    };
}

same_layout!(
    /// `struct ibv_qp_cap` to rdma-sys's.
    qp_cap_to_sys, IbvQpCap => ibv_qp_cap
);
same_layout!(
    /// `struct ibv_qp_cap` from rdma-sys's.
    qp_cap_from_sys, ibv_qp_cap => IbvQpCap
);
same_layout!(
    /// `struct ibv_ah_attr` to rdma-sys's.
    ah_attr_to_sys, IbvAhAttr => ibv_ah_attr
);
same_layout!(
    /// `struct ibv_qp_attr` to rdma-sys's.
    qp_attr_to_sys, IbvQpAttr => ibv_qp_attr
);
same_layout!(
    /// `struct ibv_qp_attr` from rdma-sys's.
    qp_attr_from_sys, ibv_qp_attr => IbvQpAttr
);
same_layout!(
    /// `struct ibv_srq_attr` to rdma-sys's.
    srq_attr_to_sys, IbvSrqAttr => ibv_srq_attr
);
same_layout!(
    /// `struct ibv_srq_attr` from rdma-sys's.
    srq_attr_from_sys, ibv_srq_attr => IbvSrqAttr
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_have_the_same_alignment() {
        // (The sizes are checked by transmute at compile time.)
        assert_eq!(align_of::<IbvQpCap>(), align_of::<ibv_qp_cap>());
        assert_eq!(align_of::<IbvAhAttr>(), align_of::<ibv_ah_attr>());
        assert_eq!(align_of::<IbvQpAttr>(), align_of::<ibv_qp_attr>());
        assert_eq!(align_of::<IbvSrqAttr>(), align_of::<ibv_srq_attr>());
    }

    #[test]
    fn a_qp_attr_keeps_every_field_through_both_forms() {
        let mut ours = IbvQpAttr {
            qp_state: 3,
            path_mtu: 3,
            qkey: 0x1234_5678,
            dest_qp_num: 0x11_2233,
            max_dest_rd_atomic: 4,
            rnr_retry: 7,
            rate_limit: 9,
            ..IbvQpAttr::default()
        };
        ours.ah_attr.grh.dgid.0 = [9; 16];
        ours.ah_attr.grh.sgid_index = 1;
        ours.ah_attr.port_num = 1;
        ours.cap.max_inline_data = 64;
        let sys = qp_attr_to_sys(ours);
        assert_eq!(sys.qkey, 0x1234_5678);
        assert_eq!(sys.dest_qp_num, 0x11_2233);
        assert_eq!(sys.max_dest_rd_atomic, 4);
        assert_eq!(sys.rnr_retry, 7);
        assert_eq!(sys.rate_limit, 9);
        assert_eq!(sys.cap.max_inline_data, 64);
        assert_eq!(sys.ah_attr.grh.sgid_index, 1);
        assert_eq!(sys.ah_attr.port_num, 1);
        // SAFETY: reading the raw bytes of the GID union.
        assert_eq!(unsafe { sys.ah_attr.grh.dgid.raw }, [9; 16]);
        let back = qp_attr_from_sys(sys);
        assert_eq!(back.ah_attr.grh.dgid, ours.ah_attr.grh.dgid);
        assert_eq!(back.qp_state, 3);
    }
}
