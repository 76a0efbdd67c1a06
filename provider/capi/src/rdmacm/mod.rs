//! The drop-in `librdmacm.so.1`: rdma-core 44's librdmacm ABI (every symbol and version
//! node of its map, see `symbols/librdmacm-44.symbols`) over the CM that runs on each
//! emulated device (`softverbs_emu::cm_service`), in the same library as the drop-in
//! libibverbs so that the ibverbs objects an `rdma_cm_id` exposes (`verbs`, `pd`, `qp`,
//! CQs and completion channels) are the drop-in's own and the inline helpers of
//! rdma_verbs.h (rdma_post_send, rdma_get_send_comp, ...) work through them.
//!
//! Files: `abi` (the rdma_cma.h structures), `devices` (the devices ids bind to, opened
//! once each), `sockaddr`, `shared` (the id's state and sink, the event channel's queue:
//! the bottom), `channel` (event channel calls, get/ack), `id` (create/destroy/migrate),
//! `event` (what a queued event becomes), `sync`
//! (synchronous ids), `addr` (bind, resolve, listen), `conn` (connect, accept, reject,
//! disconnect, get_request), `qp` (the id's QP, CQs and SRQ), `ep` (getaddrinfo,
//! create_ep), `misc`. librdmacm's calls fail with -1 and errno.

pub mod abi;
mod addr;
mod channel;
mod conn;
mod devices;
mod ep;
mod event;
mod id;
mod mcast;
mod misc;
mod qp;
mod shared;
mod sockaddr;
mod sync;

#[cfg(test)]
mod layout_test;

/// Sets errno to `e` and returns -1: how librdmacm's calls fail.
fn fail(e: i32) -> i32 {
    crate::handle::set_errno(e);
    -1
}
