//! The C layout test: compiles a program against the system's `<infiniband/verbs.h>`
//! (Debian's libibverbs-dev) that prints the size or offset of every field the library
//! relies on, and compares each with the Rust definitions of `abi`.

use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use crate::abi::*;

/// (C expression, the Rust value it must equal).
fn rows() -> Vec<(&'static str, usize)> {
    vec![
        ("sizeof(struct ibv_device)", size_of::<IbvDevice>()),
        (
            "offsetof(struct ibv_device, node_type)",
            offset_of!(IbvDevice, node_type),
        ),
        (
            "offsetof(struct ibv_device, transport_type)",
            offset_of!(IbvDevice, transport_type),
        ),
        (
            "offsetof(struct ibv_device, name)",
            offset_of!(IbvDevice, name),
        ),
        (
            "offsetof(struct ibv_device, dev_name)",
            offset_of!(IbvDevice, dev_name),
        ),
        (
            "offsetof(struct ibv_device, dev_path)",
            offset_of!(IbvDevice, dev_path),
        ),
        (
            "offsetof(struct ibv_device, ibdev_path)",
            offset_of!(IbvDevice, ibdev_path),
        ),
        ("sizeof(struct ibv_context_ops)", size_of::<IbvContextOps>()),
        (
            "offsetof(struct ibv_context_ops, alloc_mw)",
            offset_of!(IbvContextOps, alloc_mw),
        ),
        (
            "offsetof(struct ibv_context_ops, bind_mw)",
            offset_of!(IbvContextOps, bind_mw),
        ),
        (
            "offsetof(struct ibv_context_ops, dealloc_mw)",
            offset_of!(IbvContextOps, dealloc_mw),
        ),
        (
            "offsetof(struct ibv_context_ops, poll_cq)",
            offset_of!(IbvContextOps, poll_cq),
        ),
        (
            "offsetof(struct ibv_context_ops, req_notify_cq)",
            offset_of!(IbvContextOps, req_notify_cq),
        ),
        (
            "offsetof(struct ibv_context_ops, post_srq_recv)",
            offset_of!(IbvContextOps, post_srq_recv),
        ),
        (
            "offsetof(struct ibv_context_ops, post_send)",
            offset_of!(IbvContextOps, post_send),
        ),
        (
            "offsetof(struct ibv_context_ops, post_recv)",
            offset_of!(IbvContextOps, post_recv),
        ),
        ("sizeof(struct ibv_context)", size_of::<IbvContext>()),
        (
            "offsetof(struct ibv_context, device)",
            offset_of!(IbvContext, device),
        ),
        (
            "offsetof(struct ibv_context, ops)",
            offset_of!(IbvContext, ops),
        ),
        (
            "offsetof(struct ibv_context, cmd_fd)",
            offset_of!(IbvContext, cmd_fd),
        ),
        (
            "offsetof(struct ibv_context, async_fd)",
            offset_of!(IbvContext, async_fd),
        ),
        (
            "offsetof(struct ibv_context, num_comp_vectors)",
            offset_of!(IbvContext, num_comp_vectors),
        ),
        (
            "offsetof(struct ibv_context, mutex)",
            offset_of!(IbvContext, mutex),
        ),
        (
            "offsetof(struct ibv_context, abi_compat)",
            offset_of!(IbvContext, abi_compat),
        ),
        ("sizeof(struct verbs_context)", size_of::<VerbsContext>()),
        (
            "offsetof(struct verbs_context, query_port)",
            offset_of!(VerbsContext, query_port),
        ),
        (
            "offsetof(struct verbs_context, create_cq_ex)",
            offset_of!(VerbsContext, create_cq_ex),
        ),
        (
            "offsetof(struct verbs_context, priv)",
            offset_of!(VerbsContext, private),
        ),
        (
            "offsetof(struct verbs_context, query_device_ex)",
            offset_of!(VerbsContext, query_device_ex),
        ),
        (
            "offsetof(struct verbs_context, create_qp_ex)",
            offset_of!(VerbsContext, create_qp_ex),
        ),
        (
            "offsetof(struct verbs_context, get_srq_num)",
            offset_of!(VerbsContext, get_srq_num),
        ),
        (
            "offsetof(struct verbs_context, create_srq_ex)",
            offset_of!(VerbsContext, create_srq_ex),
        ),
        (
            "offsetof(struct verbs_context, sz)",
            offset_of!(VerbsContext, sz),
        ),
        (
            "offsetof(struct verbs_context, context)",
            offset_of!(VerbsContext, context),
        ),
        ("sizeof(struct ibv_pd)", size_of::<IbvPd>()),
        (
            "offsetof(struct ibv_pd, context)",
            offset_of!(IbvPd, context),
        ),
        ("offsetof(struct ibv_pd, handle)", offset_of!(IbvPd, handle)),
        ("sizeof(struct ibv_mr)", size_of::<IbvMr>()),
        (
            "offsetof(struct ibv_mr, context)",
            offset_of!(IbvMr, context),
        ),
        ("offsetof(struct ibv_mr, pd)", offset_of!(IbvMr, pd)),
        ("offsetof(struct ibv_mr, addr)", offset_of!(IbvMr, addr)),
        ("offsetof(struct ibv_mr, length)", offset_of!(IbvMr, length)),
        ("offsetof(struct ibv_mr, handle)", offset_of!(IbvMr, handle)),
        ("offsetof(struct ibv_mr, lkey)", offset_of!(IbvMr, lkey)),
        ("offsetof(struct ibv_mr, rkey)", offset_of!(IbvMr, rkey)),
        (
            "sizeof(struct ibv_comp_channel)",
            size_of::<IbvCompChannel>(),
        ),
        (
            "offsetof(struct ibv_comp_channel, context)",
            offset_of!(IbvCompChannel, context),
        ),
        (
            "offsetof(struct ibv_comp_channel, fd)",
            offset_of!(IbvCompChannel, fd),
        ),
        (
            "offsetof(struct ibv_comp_channel, refcnt)",
            offset_of!(IbvCompChannel, refcnt),
        ),
        ("sizeof(struct ibv_cq)", size_of::<IbvCq>()),
        (
            "offsetof(struct ibv_cq, context)",
            offset_of!(IbvCq, context),
        ),
        (
            "offsetof(struct ibv_cq, channel)",
            offset_of!(IbvCq, channel),
        ),
        (
            "offsetof(struct ibv_cq, cq_context)",
            offset_of!(IbvCq, cq_context),
        ),
        ("offsetof(struct ibv_cq, handle)", offset_of!(IbvCq, handle)),
        ("offsetof(struct ibv_cq, cqe)", offset_of!(IbvCq, cqe)),
        ("offsetof(struct ibv_cq, mutex)", offset_of!(IbvCq, mutex)),
        ("offsetof(struct ibv_cq, cond)", offset_of!(IbvCq, cond)),
        (
            "offsetof(struct ibv_cq, comp_events_completed)",
            offset_of!(IbvCq, comp_events_completed),
        ),
        (
            "offsetof(struct ibv_cq, async_events_completed)",
            offset_of!(IbvCq, async_events_completed),
        ),
        ("sizeof(struct ibv_cq_ex)", size_of::<IbvCqEx>()),
        (
            "offsetof(struct ibv_cq_ex, comp_mask)",
            offset_of!(IbvCqEx, comp_mask),
        ),
        (
            "offsetof(struct ibv_cq_ex, status)",
            offset_of!(IbvCqEx, status),
        ),
        (
            "offsetof(struct ibv_cq_ex, wr_id)",
            offset_of!(IbvCqEx, wr_id),
        ),
        (
            "offsetof(struct ibv_cq_ex, start_poll)",
            offset_of!(IbvCqEx, start_poll),
        ),
        (
            "offsetof(struct ibv_cq_ex, next_poll)",
            offset_of!(IbvCqEx, next_poll),
        ),
        (
            "offsetof(struct ibv_cq_ex, end_poll)",
            offset_of!(IbvCqEx, end_poll),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_opcode)",
            offset_of!(IbvCqEx, read_opcode),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_vendor_err)",
            offset_of!(IbvCqEx, read_vendor_err),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_byte_len)",
            offset_of!(IbvCqEx, read_byte_len),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_imm_data)",
            offset_of!(IbvCqEx, read_imm_data),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_qp_num)",
            offset_of!(IbvCqEx, read_qp_num),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_src_qp)",
            offset_of!(IbvCqEx, read_src_qp),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_wc_flags)",
            offset_of!(IbvCqEx, read_wc_flags),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_slid)",
            offset_of!(IbvCqEx, read_slid),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_sl)",
            offset_of!(IbvCqEx, read_sl),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_dlid_path_bits)",
            offset_of!(IbvCqEx, read_dlid_path_bits),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_completion_ts)",
            offset_of!(IbvCqEx, read_completion_ts),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_cvlan)",
            offset_of!(IbvCqEx, read_cvlan),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_flow_tag)",
            offset_of!(IbvCqEx, read_flow_tag),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_tm_info)",
            offset_of!(IbvCqEx, read_tm_info),
        ),
        (
            "offsetof(struct ibv_cq_ex, read_completion_wallclock_ns)",
            offset_of!(IbvCqEx, read_completion_wallclock_ns),
        ),
        ("sizeof(struct ibv_qp)", size_of::<IbvQp>()),
        (
            "offsetof(struct ibv_qp, context)",
            offset_of!(IbvQp, context),
        ),
        (
            "offsetof(struct ibv_qp, qp_context)",
            offset_of!(IbvQp, qp_context),
        ),
        ("offsetof(struct ibv_qp, pd)", offset_of!(IbvQp, pd)),
        (
            "offsetof(struct ibv_qp, send_cq)",
            offset_of!(IbvQp, send_cq),
        ),
        (
            "offsetof(struct ibv_qp, recv_cq)",
            offset_of!(IbvQp, recv_cq),
        ),
        ("offsetof(struct ibv_qp, srq)", offset_of!(IbvQp, srq)),
        ("offsetof(struct ibv_qp, handle)", offset_of!(IbvQp, handle)),
        ("offsetof(struct ibv_qp, qp_num)", offset_of!(IbvQp, qp_num)),
        ("offsetof(struct ibv_qp, state)", offset_of!(IbvQp, state)),
        (
            "offsetof(struct ibv_qp, qp_type)",
            offset_of!(IbvQp, qp_type),
        ),
        ("offsetof(struct ibv_qp, mutex)", offset_of!(IbvQp, mutex)),
        ("offsetof(struct ibv_qp, cond)", offset_of!(IbvQp, cond)),
        (
            "offsetof(struct ibv_qp, events_completed)",
            offset_of!(IbvQp, events_completed),
        ),
        // rdma-core 44's ibv_qp_ex ends at wr_atomic_write; ours also has the wr_flush slot
        // later rdma-core appends, so that programs built against newer headers find it.
        (
            "sizeof(struct ibv_qp_ex) + sizeof(void *)",
            size_of::<IbvQpEx>(),
        ),
        (
            "offsetof(struct ibv_qp_ex, qp_base)",
            offset_of!(IbvQpEx, qp_base),
        ),
        (
            "offsetof(struct ibv_qp_ex, comp_mask)",
            offset_of!(IbvQpEx, comp_mask),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_id)",
            offset_of!(IbvQpEx, wr_id),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_flags)",
            offset_of!(IbvQpEx, wr_flags),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_atomic_cmp_swp)",
            offset_of!(IbvQpEx, wr_atomic_cmp_swp),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_atomic_fetch_add)",
            offset_of!(IbvQpEx, wr_atomic_fetch_add),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_bind_mw)",
            offset_of!(IbvQpEx, wr_bind_mw),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_local_inv)",
            offset_of!(IbvQpEx, wr_local_inv),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_rdma_read)",
            offset_of!(IbvQpEx, wr_rdma_read),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_rdma_write)",
            offset_of!(IbvQpEx, wr_rdma_write),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_rdma_write_imm)",
            offset_of!(IbvQpEx, wr_rdma_write_imm),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_send)",
            offset_of!(IbvQpEx, wr_send),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_send_imm)",
            offset_of!(IbvQpEx, wr_send_imm),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_send_inv)",
            offset_of!(IbvQpEx, wr_send_inv),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_send_tso)",
            offset_of!(IbvQpEx, wr_send_tso),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_ud_addr)",
            offset_of!(IbvQpEx, wr_set_ud_addr),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_xrc_srqn)",
            offset_of!(IbvQpEx, wr_set_xrc_srqn),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_inline_data)",
            offset_of!(IbvQpEx, wr_set_inline_data),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_inline_data_list)",
            offset_of!(IbvQpEx, wr_set_inline_data_list),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_sge)",
            offset_of!(IbvQpEx, wr_set_sge),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_sge_list)",
            offset_of!(IbvQpEx, wr_set_sge_list),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_start)",
            offset_of!(IbvQpEx, wr_start),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_complete)",
            offset_of!(IbvQpEx, wr_complete),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_abort)",
            offset_of!(IbvQpEx, wr_abort),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_atomic_write)",
            offset_of!(IbvQpEx, wr_atomic_write),
        ),
        ("sizeof(struct ibv_data_buf)", size_of::<IbvDataBuf>()),
        ("sizeof(struct ibv_srq)", size_of::<IbvSrq>()),
        (
            "offsetof(struct ibv_srq, context)",
            offset_of!(IbvSrq, context),
        ),
        (
            "offsetof(struct ibv_srq, srq_context)",
            offset_of!(IbvSrq, srq_context),
        ),
        ("offsetof(struct ibv_srq, pd)", offset_of!(IbvSrq, pd)),
        (
            "offsetof(struct ibv_srq, handle)",
            offset_of!(IbvSrq, handle),
        ),
        ("offsetof(struct ibv_srq, mutex)", offset_of!(IbvSrq, mutex)),
        ("offsetof(struct ibv_srq, cond)", offset_of!(IbvSrq, cond)),
        (
            "offsetof(struct ibv_srq, events_completed)",
            offset_of!(IbvSrq, events_completed),
        ),
        ("sizeof(struct ibv_ah)", size_of::<IbvAh>()),
        (
            "offsetof(struct ibv_ah, context)",
            offset_of!(IbvAh, context),
        ),
        ("offsetof(struct ibv_ah, pd)", offset_of!(IbvAh, pd)),
        ("offsetof(struct ibv_ah, handle)", offset_of!(IbvAh, handle)),
        ("sizeof(struct ibv_mw)", size_of::<IbvMw>()),
        (
            "offsetof(struct ibv_mw, context)",
            offset_of!(IbvMw, context),
        ),
        ("offsetof(struct ibv_mw, pd)", offset_of!(IbvMw, pd)),
        ("offsetof(struct ibv_mw, rkey)", offset_of!(IbvMw, rkey)),
        ("offsetof(struct ibv_mw, handle)", offset_of!(IbvMw, handle)),
        ("offsetof(struct ibv_mw, type)", offset_of!(IbvMw, mw_type)),
        ("sizeof(struct ibv_device_attr)", size_of::<IbvDeviceAttr>()),
        (
            "offsetof(struct ibv_device_attr, fw_ver)",
            offset_of!(IbvDeviceAttr, fw_ver),
        ),
        (
            "offsetof(struct ibv_device_attr, node_guid)",
            offset_of!(IbvDeviceAttr, node_guid),
        ),
        (
            "offsetof(struct ibv_device_attr, sys_image_guid)",
            offset_of!(IbvDeviceAttr, sys_image_guid),
        ),
        (
            "offsetof(struct ibv_device_attr, max_mr_size)",
            offset_of!(IbvDeviceAttr, max_mr_size),
        ),
        (
            "offsetof(struct ibv_device_attr, page_size_cap)",
            offset_of!(IbvDeviceAttr, page_size_cap),
        ),
        (
            "offsetof(struct ibv_device_attr, vendor_id)",
            offset_of!(IbvDeviceAttr, vendor_id),
        ),
        (
            "offsetof(struct ibv_device_attr, vendor_part_id)",
            offset_of!(IbvDeviceAttr, vendor_part_id),
        ),
        (
            "offsetof(struct ibv_device_attr, hw_ver)",
            offset_of!(IbvDeviceAttr, hw_ver),
        ),
        (
            "offsetof(struct ibv_device_attr, max_qp)",
            offset_of!(IbvDeviceAttr, max_qp),
        ),
        (
            "offsetof(struct ibv_device_attr, max_qp_wr)",
            offset_of!(IbvDeviceAttr, max_qp_wr),
        ),
        (
            "offsetof(struct ibv_device_attr, device_cap_flags)",
            offset_of!(IbvDeviceAttr, device_cap_flags),
        ),
        (
            "offsetof(struct ibv_device_attr, max_sge)",
            offset_of!(IbvDeviceAttr, max_sge),
        ),
        (
            "offsetof(struct ibv_device_attr, max_sge_rd)",
            offset_of!(IbvDeviceAttr, max_sge_rd),
        ),
        (
            "offsetof(struct ibv_device_attr, max_cq)",
            offset_of!(IbvDeviceAttr, max_cq),
        ),
        (
            "offsetof(struct ibv_device_attr, max_cqe)",
            offset_of!(IbvDeviceAttr, max_cqe),
        ),
        (
            "offsetof(struct ibv_device_attr, max_mr)",
            offset_of!(IbvDeviceAttr, max_mr),
        ),
        (
            "offsetof(struct ibv_device_attr, max_pd)",
            offset_of!(IbvDeviceAttr, max_pd),
        ),
        (
            "offsetof(struct ibv_device_attr, max_qp_rd_atom)",
            offset_of!(IbvDeviceAttr, max_qp_rd_atom),
        ),
        (
            "offsetof(struct ibv_device_attr, max_ee_rd_atom)",
            offset_of!(IbvDeviceAttr, max_ee_rd_atom),
        ),
        (
            "offsetof(struct ibv_device_attr, max_res_rd_atom)",
            offset_of!(IbvDeviceAttr, max_res_rd_atom),
        ),
        (
            "offsetof(struct ibv_device_attr, max_qp_init_rd_atom)",
            offset_of!(IbvDeviceAttr, max_qp_init_rd_atom),
        ),
        (
            "offsetof(struct ibv_device_attr, max_ee_init_rd_atom)",
            offset_of!(IbvDeviceAttr, max_ee_init_rd_atom),
        ),
        (
            "offsetof(struct ibv_device_attr, atomic_cap)",
            offset_of!(IbvDeviceAttr, atomic_cap),
        ),
        (
            "offsetof(struct ibv_device_attr, max_ee)",
            offset_of!(IbvDeviceAttr, max_ee),
        ),
        (
            "offsetof(struct ibv_device_attr, max_rdd)",
            offset_of!(IbvDeviceAttr, max_rdd),
        ),
        (
            "offsetof(struct ibv_device_attr, max_mw)",
            offset_of!(IbvDeviceAttr, max_mw),
        ),
        (
            "offsetof(struct ibv_device_attr, max_raw_ipv6_qp)",
            offset_of!(IbvDeviceAttr, max_raw_ipv6_qp),
        ),
        (
            "offsetof(struct ibv_device_attr, max_raw_ethy_qp)",
            offset_of!(IbvDeviceAttr, max_raw_ethy_qp),
        ),
        (
            "offsetof(struct ibv_device_attr, max_mcast_grp)",
            offset_of!(IbvDeviceAttr, max_mcast_grp),
        ),
        (
            "offsetof(struct ibv_device_attr, max_mcast_qp_attach)",
            offset_of!(IbvDeviceAttr, max_mcast_qp_attach),
        ),
        (
            "offsetof(struct ibv_device_attr, max_total_mcast_qp_attach)",
            offset_of!(IbvDeviceAttr, max_total_mcast_qp_attach),
        ),
        (
            "offsetof(struct ibv_device_attr, max_ah)",
            offset_of!(IbvDeviceAttr, max_ah),
        ),
        (
            "offsetof(struct ibv_device_attr, max_fmr)",
            offset_of!(IbvDeviceAttr, max_fmr),
        ),
        (
            "offsetof(struct ibv_device_attr, max_map_per_fmr)",
            offset_of!(IbvDeviceAttr, max_map_per_fmr),
        ),
        (
            "offsetof(struct ibv_device_attr, max_srq)",
            offset_of!(IbvDeviceAttr, max_srq),
        ),
        (
            "offsetof(struct ibv_device_attr, max_srq_wr)",
            offset_of!(IbvDeviceAttr, max_srq_wr),
        ),
        (
            "offsetof(struct ibv_device_attr, max_srq_sge)",
            offset_of!(IbvDeviceAttr, max_srq_sge),
        ),
        (
            "offsetof(struct ibv_device_attr, max_pkeys)",
            offset_of!(IbvDeviceAttr, max_pkeys),
        ),
        (
            "offsetof(struct ibv_device_attr, local_ca_ack_delay)",
            offset_of!(IbvDeviceAttr, local_ca_ack_delay),
        ),
        (
            "offsetof(struct ibv_device_attr, phys_port_cnt)",
            offset_of!(IbvDeviceAttr, phys_port_cnt),
        ),
        ("sizeof(struct ibv_device_attr_ex)", DEVICE_ATTR_EX_SIZE),
        (
            "offsetof(struct ibv_device_attr_ex, comp_mask)",
            DEVICE_ATTR_EX_COMP_MASK,
        ),
        (
            "offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex)",
            DEVICE_ATTR_EX_PHYS_PORT_CNT,
        ),
        ("sizeof(struct ibv_port_attr)", size_of::<IbvPortAttr>()),
        (
            "offsetof(struct ibv_port_attr, state)",
            offset_of!(IbvPortAttr, state),
        ),
        (
            "offsetof(struct ibv_port_attr, max_mtu)",
            offset_of!(IbvPortAttr, max_mtu),
        ),
        (
            "offsetof(struct ibv_port_attr, active_mtu)",
            offset_of!(IbvPortAttr, active_mtu),
        ),
        (
            "offsetof(struct ibv_port_attr, gid_tbl_len)",
            offset_of!(IbvPortAttr, gid_tbl_len),
        ),
        (
            "offsetof(struct ibv_port_attr, port_cap_flags)",
            offset_of!(IbvPortAttr, port_cap_flags),
        ),
        (
            "offsetof(struct ibv_port_attr, max_msg_sz)",
            offset_of!(IbvPortAttr, max_msg_sz),
        ),
        (
            "offsetof(struct ibv_port_attr, bad_pkey_cntr)",
            offset_of!(IbvPortAttr, bad_pkey_cntr),
        ),
        (
            "offsetof(struct ibv_port_attr, qkey_viol_cntr)",
            offset_of!(IbvPortAttr, qkey_viol_cntr),
        ),
        (
            "offsetof(struct ibv_port_attr, pkey_tbl_len)",
            offset_of!(IbvPortAttr, pkey_tbl_len),
        ),
        (
            "offsetof(struct ibv_port_attr, lid)",
            offset_of!(IbvPortAttr, lid),
        ),
        (
            "offsetof(struct ibv_port_attr, sm_lid)",
            offset_of!(IbvPortAttr, sm_lid),
        ),
        (
            "offsetof(struct ibv_port_attr, lmc)",
            offset_of!(IbvPortAttr, lmc),
        ),
        (
            "offsetof(struct ibv_port_attr, max_vl_num)",
            offset_of!(IbvPortAttr, max_vl_num),
        ),
        (
            "offsetof(struct ibv_port_attr, sm_sl)",
            offset_of!(IbvPortAttr, sm_sl),
        ),
        (
            "offsetof(struct ibv_port_attr, subnet_timeout)",
            offset_of!(IbvPortAttr, subnet_timeout),
        ),
        (
            "offsetof(struct ibv_port_attr, init_type_reply)",
            offset_of!(IbvPortAttr, init_type_reply),
        ),
        (
            "offsetof(struct ibv_port_attr, active_width)",
            offset_of!(IbvPortAttr, active_width),
        ),
        (
            "offsetof(struct ibv_port_attr, active_speed)",
            offset_of!(IbvPortAttr, active_speed),
        ),
        (
            "offsetof(struct ibv_port_attr, phys_state)",
            offset_of!(IbvPortAttr, phys_state),
        ),
        (
            "offsetof(struct ibv_port_attr, link_layer)",
            offset_of!(IbvPortAttr, link_layer),
        ),
        (
            "offsetof(struct ibv_port_attr, flags)",
            offset_of!(IbvPortAttr, flags),
        ),
        (
            "offsetof(struct ibv_port_attr, port_cap_flags2)",
            offset_of!(IbvPortAttr, port_cap_flags2),
        ),
        ("sizeof(struct ibv_gid_entry)", size_of::<IbvGidEntry>()),
        (
            "offsetof(struct ibv_gid_entry, gid)",
            offset_of!(IbvGidEntry, gid),
        ),
        (
            "offsetof(struct ibv_gid_entry, gid_index)",
            offset_of!(IbvGidEntry, gid_index),
        ),
        (
            "offsetof(struct ibv_gid_entry, port_num)",
            offset_of!(IbvGidEntry, port_num),
        ),
        (
            "offsetof(struct ibv_gid_entry, gid_type)",
            offset_of!(IbvGidEntry, gid_type),
        ),
        (
            "offsetof(struct ibv_gid_entry, ndev_ifindex)",
            offset_of!(IbvGidEntry, ndev_ifindex),
        ),
        ("sizeof(struct ibv_async_event)", size_of::<IbvAsyncEvent>()),
        (
            "offsetof(struct ibv_async_event, element)",
            offset_of!(IbvAsyncEvent, element),
        ),
        (
            "offsetof(struct ibv_async_event, event_type)",
            offset_of!(IbvAsyncEvent, event_type),
        ),
        ("sizeof(struct ibv_qp_cap)", size_of::<IbvQpCap>()),
        (
            "offsetof(struct ibv_qp_cap, max_send_wr)",
            offset_of!(IbvQpCap, max_send_wr),
        ),
        (
            "offsetof(struct ibv_qp_cap, max_recv_wr)",
            offset_of!(IbvQpCap, max_recv_wr),
        ),
        (
            "offsetof(struct ibv_qp_cap, max_send_sge)",
            offset_of!(IbvQpCap, max_send_sge),
        ),
        (
            "offsetof(struct ibv_qp_cap, max_recv_sge)",
            offset_of!(IbvQpCap, max_recv_sge),
        ),
        (
            "offsetof(struct ibv_qp_cap, max_inline_data)",
            offset_of!(IbvQpCap, max_inline_data),
        ),
        (
            "sizeof(struct ibv_qp_init_attr)",
            size_of::<IbvQpInitAttr>(),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, qp_context)",
            offset_of!(IbvQpInitAttr, qp_context),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, send_cq)",
            offset_of!(IbvQpInitAttr, send_cq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, recv_cq)",
            offset_of!(IbvQpInitAttr, recv_cq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, srq)",
            offset_of!(IbvQpInitAttr, srq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, cap)",
            offset_of!(IbvQpInitAttr, cap),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, qp_type)",
            offset_of!(IbvQpInitAttr, qp_type),
        ),
        (
            "offsetof(struct ibv_qp_init_attr, sq_sig_all)",
            offset_of!(IbvQpInitAttr, sq_sig_all),
        ),
        (
            "sizeof(struct ibv_qp_init_attr_ex)",
            size_of::<IbvQpInitAttrEx>(),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, qp_context)",
            offset_of!(IbvQpInitAttrEx, qp_context),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, send_cq)",
            offset_of!(IbvQpInitAttrEx, send_cq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, recv_cq)",
            offset_of!(IbvQpInitAttrEx, recv_cq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, srq)",
            offset_of!(IbvQpInitAttrEx, srq),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, cap)",
            offset_of!(IbvQpInitAttrEx, cap),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, qp_type)",
            offset_of!(IbvQpInitAttrEx, qp_type),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, sq_sig_all)",
            offset_of!(IbvQpInitAttrEx, sq_sig_all),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, comp_mask)",
            offset_of!(IbvQpInitAttrEx, comp_mask),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, pd)",
            offset_of!(IbvQpInitAttrEx, pd),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, xrcd)",
            offset_of!(IbvQpInitAttrEx, xrcd),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, create_flags)",
            offset_of!(IbvQpInitAttrEx, create_flags),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, max_tso_header)",
            offset_of!(IbvQpInitAttrEx, max_tso_header),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, rwq_ind_tbl)",
            offset_of!(IbvQpInitAttrEx, rwq_ind_tbl),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, rx_hash_conf)",
            offset_of!(IbvQpInitAttrEx, rx_hash_conf),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, source_qpn)",
            offset_of!(IbvQpInitAttrEx, source_qpn),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, send_ops_flags)",
            offset_of!(IbvQpInitAttrEx, send_ops_flags),
        ),
        (
            "sizeof(struct ibv_global_route)",
            size_of::<IbvGlobalRoute>(),
        ),
        (
            "offsetof(struct ibv_global_route, dgid)",
            offset_of!(IbvGlobalRoute, dgid),
        ),
        (
            "offsetof(struct ibv_global_route, flow_label)",
            offset_of!(IbvGlobalRoute, flow_label),
        ),
        (
            "offsetof(struct ibv_global_route, sgid_index)",
            offset_of!(IbvGlobalRoute, sgid_index),
        ),
        (
            "offsetof(struct ibv_global_route, hop_limit)",
            offset_of!(IbvGlobalRoute, hop_limit),
        ),
        (
            "offsetof(struct ibv_global_route, traffic_class)",
            offset_of!(IbvGlobalRoute, traffic_class),
        ),
        ("sizeof(struct ibv_ah_attr)", size_of::<IbvAhAttr>()),
        (
            "offsetof(struct ibv_ah_attr, grh)",
            offset_of!(IbvAhAttr, grh),
        ),
        (
            "offsetof(struct ibv_ah_attr, dlid)",
            offset_of!(IbvAhAttr, dlid),
        ),
        (
            "offsetof(struct ibv_ah_attr, sl)",
            offset_of!(IbvAhAttr, sl),
        ),
        (
            "offsetof(struct ibv_ah_attr, src_path_bits)",
            offset_of!(IbvAhAttr, src_path_bits),
        ),
        (
            "offsetof(struct ibv_ah_attr, static_rate)",
            offset_of!(IbvAhAttr, static_rate),
        ),
        (
            "offsetof(struct ibv_ah_attr, is_global)",
            offset_of!(IbvAhAttr, is_global),
        ),
        (
            "offsetof(struct ibv_ah_attr, port_num)",
            offset_of!(IbvAhAttr, port_num),
        ),
        ("sizeof(struct ibv_qp_attr)", size_of::<IbvQpAttr>()),
        (
            "offsetof(struct ibv_qp_attr, qp_state)",
            offset_of!(IbvQpAttr, qp_state),
        ),
        (
            "offsetof(struct ibv_qp_attr, cur_qp_state)",
            offset_of!(IbvQpAttr, cur_qp_state),
        ),
        (
            "offsetof(struct ibv_qp_attr, path_mtu)",
            offset_of!(IbvQpAttr, path_mtu),
        ),
        (
            "offsetof(struct ibv_qp_attr, path_mig_state)",
            offset_of!(IbvQpAttr, path_mig_state),
        ),
        (
            "offsetof(struct ibv_qp_attr, qkey)",
            offset_of!(IbvQpAttr, qkey),
        ),
        (
            "offsetof(struct ibv_qp_attr, rq_psn)",
            offset_of!(IbvQpAttr, rq_psn),
        ),
        (
            "offsetof(struct ibv_qp_attr, sq_psn)",
            offset_of!(IbvQpAttr, sq_psn),
        ),
        (
            "offsetof(struct ibv_qp_attr, dest_qp_num)",
            offset_of!(IbvQpAttr, dest_qp_num),
        ),
        (
            "offsetof(struct ibv_qp_attr, qp_access_flags)",
            offset_of!(IbvQpAttr, qp_access_flags),
        ),
        (
            "offsetof(struct ibv_qp_attr, cap)",
            offset_of!(IbvQpAttr, cap),
        ),
        (
            "offsetof(struct ibv_qp_attr, ah_attr)",
            offset_of!(IbvQpAttr, ah_attr),
        ),
        (
            "offsetof(struct ibv_qp_attr, alt_ah_attr)",
            offset_of!(IbvQpAttr, alt_ah_attr),
        ),
        (
            "offsetof(struct ibv_qp_attr, pkey_index)",
            offset_of!(IbvQpAttr, pkey_index),
        ),
        (
            "offsetof(struct ibv_qp_attr, alt_pkey_index)",
            offset_of!(IbvQpAttr, alt_pkey_index),
        ),
        (
            "offsetof(struct ibv_qp_attr, en_sqd_async_notify)",
            offset_of!(IbvQpAttr, en_sqd_async_notify),
        ),
        (
            "offsetof(struct ibv_qp_attr, sq_draining)",
            offset_of!(IbvQpAttr, sq_draining),
        ),
        (
            "offsetof(struct ibv_qp_attr, max_rd_atomic)",
            offset_of!(IbvQpAttr, max_rd_atomic),
        ),
        (
            "offsetof(struct ibv_qp_attr, max_dest_rd_atomic)",
            offset_of!(IbvQpAttr, max_dest_rd_atomic),
        ),
        (
            "offsetof(struct ibv_qp_attr, min_rnr_timer)",
            offset_of!(IbvQpAttr, min_rnr_timer),
        ),
        (
            "offsetof(struct ibv_qp_attr, port_num)",
            offset_of!(IbvQpAttr, port_num),
        ),
        (
            "offsetof(struct ibv_qp_attr, timeout)",
            offset_of!(IbvQpAttr, timeout),
        ),
        (
            "offsetof(struct ibv_qp_attr, retry_cnt)",
            offset_of!(IbvQpAttr, retry_cnt),
        ),
        (
            "offsetof(struct ibv_qp_attr, rnr_retry)",
            offset_of!(IbvQpAttr, rnr_retry),
        ),
        (
            "offsetof(struct ibv_qp_attr, alt_port_num)",
            offset_of!(IbvQpAttr, alt_port_num),
        ),
        (
            "offsetof(struct ibv_qp_attr, alt_timeout)",
            offset_of!(IbvQpAttr, alt_timeout),
        ),
        (
            "offsetof(struct ibv_qp_attr, rate_limit)",
            offset_of!(IbvQpAttr, rate_limit),
        ),
        ("sizeof(struct ibv_srq_attr)", size_of::<IbvSrqAttr>()),
        (
            "offsetof(struct ibv_srq_attr, max_wr)",
            offset_of!(IbvSrqAttr, max_wr),
        ),
        (
            "offsetof(struct ibv_srq_attr, max_sge)",
            offset_of!(IbvSrqAttr, max_sge),
        ),
        (
            "offsetof(struct ibv_srq_attr, srq_limit)",
            offset_of!(IbvSrqAttr, srq_limit),
        ),
        (
            "sizeof(struct ibv_srq_init_attr)",
            size_of::<IbvSrqInitAttr>(),
        ),
        (
            "offsetof(struct ibv_srq_init_attr, srq_context)",
            offset_of!(IbvSrqInitAttr, srq_context),
        ),
        (
            "offsetof(struct ibv_srq_init_attr, attr)",
            offset_of!(IbvSrqInitAttr, attr),
        ),
        (
            "sizeof(struct ibv_srq_init_attr_ex)",
            size_of::<IbvSrqInitAttrEx>(),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, srq_context)",
            offset_of!(IbvSrqInitAttrEx, srq_context),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, attr)",
            offset_of!(IbvSrqInitAttrEx, attr),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, comp_mask)",
            offset_of!(IbvSrqInitAttrEx, comp_mask),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, srq_type)",
            offset_of!(IbvSrqInitAttrEx, srq_type),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, pd)",
            offset_of!(IbvSrqInitAttrEx, pd),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, xrcd)",
            offset_of!(IbvSrqInitAttrEx, xrcd),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, cq)",
            offset_of!(IbvSrqInitAttrEx, cq),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, tm_cap)",
            offset_of!(IbvSrqInitAttrEx, tm_cap),
        ),
        (
            "sizeof(struct ibv_cq_init_attr_ex)",
            size_of::<IbvCqInitAttrEx>(),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, cqe)",
            offset_of!(IbvCqInitAttrEx, cqe),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, cq_context)",
            offset_of!(IbvCqInitAttrEx, cq_context),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, channel)",
            offset_of!(IbvCqInitAttrEx, channel),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, comp_vector)",
            offset_of!(IbvCqInitAttrEx, comp_vector),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, wc_flags)",
            offset_of!(IbvCqInitAttrEx, wc_flags),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, comp_mask)",
            offset_of!(IbvCqInitAttrEx, comp_mask),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, flags)",
            offset_of!(IbvCqInitAttrEx, flags),
        ),
        (
            "offsetof(struct ibv_cq_init_attr_ex, parent_domain)",
            offset_of!(IbvCqInitAttrEx, parent_domain),
        ),
        (
            "sizeof(struct ibv_mw_bind_info)",
            size_of::<IbvMwBindInfo>(),
        ),
        (
            "offsetof(struct ibv_mw_bind_info, mr)",
            offset_of!(IbvMwBindInfo, mr),
        ),
        (
            "offsetof(struct ibv_mw_bind_info, addr)",
            offset_of!(IbvMwBindInfo, addr),
        ),
        (
            "offsetof(struct ibv_mw_bind_info, length)",
            offset_of!(IbvMwBindInfo, length),
        ),
        (
            "offsetof(struct ibv_mw_bind_info, mw_access_flags)",
            offset_of!(IbvMwBindInfo, mw_access_flags),
        ),
        ("sizeof(struct ibv_mw_bind)", size_of::<IbvMwBind>()),
        (
            "offsetof(struct ibv_mw_bind, wr_id)",
            offset_of!(IbvMwBind, wr_id),
        ),
        (
            "offsetof(struct ibv_mw_bind, send_flags)",
            offset_of!(IbvMwBind, send_flags),
        ),
        (
            "offsetof(struct ibv_mw_bind, bind_info)",
            offset_of!(IbvMwBind, bind_info),
        ),
        ("sizeof(struct ibv_sge)", size_of::<IbvSge>()),
        ("offsetof(struct ibv_sge, addr)", offset_of!(IbvSge, addr)),
        (
            "offsetof(struct ibv_sge, length)",
            offset_of!(IbvSge, length),
        ),
        ("offsetof(struct ibv_sge, lkey)", offset_of!(IbvSge, lkey)),
        ("sizeof(struct ibv_send_wr)", size_of::<IbvSendWr>()),
        (
            "offsetof(struct ibv_send_wr, wr_id)",
            offset_of!(IbvSendWr, wr_id),
        ),
        (
            "offsetof(struct ibv_send_wr, next)",
            offset_of!(IbvSendWr, next),
        ),
        (
            "offsetof(struct ibv_send_wr, sg_list)",
            offset_of!(IbvSendWr, sg_list),
        ),
        (
            "offsetof(struct ibv_send_wr, num_sge)",
            offset_of!(IbvSendWr, num_sge),
        ),
        (
            "offsetof(struct ibv_send_wr, opcode)",
            offset_of!(IbvSendWr, opcode),
        ),
        (
            "offsetof(struct ibv_send_wr, send_flags)",
            offset_of!(IbvSendWr, send_flags),
        ),
        (
            "offsetof(struct ibv_send_wr, imm_data)",
            offset_of!(IbvSendWr, imm_data_or_invalidate_rkey),
        ),
        (
            "offsetof(struct ibv_send_wr, wr)",
            offset_of!(IbvSendWr, wr),
        ),
        (
            "offsetof(struct ibv_send_wr, qp_type.xrc.remote_srqn)",
            offset_of!(IbvSendWr, xrc_remote_srqn),
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw)",
            offset_of!(IbvSendWr, extra),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.atomic.rkey)",
            offset_of!(IbvSendWr, wr) + offset_of!(WrAtomic, rkey),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.atomic.swap)",
            offset_of!(IbvSendWr, wr) + offset_of!(WrAtomic, swap),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)",
            offset_of!(IbvSendWr, wr) + offset_of!(WrUd, remote_qkey),
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw.bind_info)",
            offset_of!(IbvSendWr, extra) + offset_of!(WrBindMw, bind_info),
        ),
        (
            "offsetof(struct ibv_send_wr, tso.mss)",
            offset_of!(IbvSendWr, extra) + offset_of!(WrTso, mss),
        ),
        ("sizeof(struct ibv_recv_wr)", size_of::<IbvRecvWr>()),
        (
            "offsetof(struct ibv_recv_wr, wr_id)",
            offset_of!(IbvRecvWr, wr_id),
        ),
        (
            "offsetof(struct ibv_recv_wr, next)",
            offset_of!(IbvRecvWr, next),
        ),
        (
            "offsetof(struct ibv_recv_wr, sg_list)",
            offset_of!(IbvRecvWr, sg_list),
        ),
        (
            "offsetof(struct ibv_recv_wr, num_sge)",
            offset_of!(IbvRecvWr, num_sge),
        ),
        ("sizeof(struct ibv_wc)", size_of::<IbvWc>()),
        ("offsetof(struct ibv_wc, wr_id)", offset_of!(IbvWc, wr_id)),
        ("offsetof(struct ibv_wc, status)", offset_of!(IbvWc, status)),
        ("offsetof(struct ibv_wc, opcode)", offset_of!(IbvWc, opcode)),
        (
            "offsetof(struct ibv_wc, vendor_err)",
            offset_of!(IbvWc, vendor_err),
        ),
        (
            "offsetof(struct ibv_wc, byte_len)",
            offset_of!(IbvWc, byte_len),
        ),
        (
            "offsetof(struct ibv_wc, imm_data)",
            offset_of!(IbvWc, imm_data_or_invalidated_rkey),
        ),
        ("offsetof(struct ibv_wc, qp_num)", offset_of!(IbvWc, qp_num)),
        ("offsetof(struct ibv_wc, src_qp)", offset_of!(IbvWc, src_qp)),
        (
            "offsetof(struct ibv_wc, wc_flags)",
            offset_of!(IbvWc, wc_flags),
        ),
        (
            "offsetof(struct ibv_wc, pkey_index)",
            offset_of!(IbvWc, pkey_index),
        ),
        ("offsetof(struct ibv_wc, slid)", offset_of!(IbvWc, slid)),
        ("offsetof(struct ibv_wc, sl)", offset_of!(IbvWc, sl)),
        (
            "offsetof(struct ibv_wc, dlid_path_bits)",
            offset_of!(IbvWc, dlid_path_bits),
        ),
        (
            "sizeof(struct ibv_poll_cq_attr)",
            size_of::<IbvPollCqAttr>(),
        ),
    ]
}

#[test]
fn layouts_match_verbs_h() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!(
            "SKIPPED: /usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)"
        );
        return;
    }
    let rows = rows();
    let mut c = String::from("#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n");
    for (expr, _) in &rows {
        c.push_str(&format!("    printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    c.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("softverbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc).arg(&src).arg("-o").arg(&exe).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: no C compiler ({cc}: {e}); apt-get install gcc");
            return;
        }
    };
    assert!(
        built.status.success(),
        "compiling the layout program failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().expect("run the layout program");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let c_values: Vec<usize> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(c_values.len(), rows.len());
    let mismatches: Vec<String> = rows
        .iter()
        .zip(&c_values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((expr, rust), c)| format!("{expr}: C {c}, Rust {rust}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "layout differs from verbs.h:\n{}",
        mismatches.join("\n")
    );
}
