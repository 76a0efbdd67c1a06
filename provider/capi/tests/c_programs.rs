//! Small C programs of tests/c/, compiled against Debian's verbs.h, linked with the drop-in
//! (BIND_NOW) and run on it:
//! - bad_input.c: NULL pointers, destroyed handles, wrong comp_mask / sizes, unsupported
//!   verbs; each errno checked, and the library never crashes;
//! - srq_limit.c: an SRQ limit event on the real async_fd, completion-channel waits, and
//!   every byte and completion field of the messages checked;
//! - rereg_mr.c: ibv_rereg_mr's return codes and errno on bad input, and CHANGE_ACCESS /
//!   CHANGE_TRANSLATION / CHANGE_PD seen through RDMA WRITE and READ from the other device;
//! - mcast.c: UD multicast (ibv_attach_mcast / ibv_detach_mcast) between the two devices,
//!   every byte and completion field checked, EBUSY for destroying an attached QP.

mod common;

use std::path::PathBuf;

/// Compiles tests/c/`name`.c against the drop-in libibverbs.
fn compile(name: &str) -> Option<PathBuf> {
    common::compile_c(name, &["libibverbs.so.1"])
}

/// Runs a compiled program on the devices of `slot`; it must exit 0 and print `expect`.
fn run(exe: &std::path::Path, slot: u8, expect: &str) {
    let child = common::on_dropin(exe, slot)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (out, in_time) = common::wait(child, std::time::Duration::from_secs(60));
    let t = common::text(&out);
    assert!(in_time && out.status.success(), "{exe:?}:\n{t}");
    assert!(t.contains(expect), "{t}");
}

#[test]
fn bad_input_from_c_gets_errors_not_crashes() {
    if let Some(exe) = compile("bad_input") {
        run(&exe, 30, "checks passed");
    }
}

#[test]
fn srq_limit_event_and_completion_channel_from_c() {
    if let Some(exe) = compile("srq_limit") {
        run(&exe, 31, "limit event received");
    }
}

#[test]
fn rereg_mr_from_c_moves_the_region_and_rejects_bad_input() {
    if let Some(exe) = compile("rereg_mr") {
        run(&exe, 32, "checks passed");
    }
}

#[test]
fn ud_multicast_from_c_reaches_every_attached_qp() {
    if let Some(exe) = compile("mcast") {
        run(&exe, 33, "checks passed");
    }
}
