//! RC SEND_WITH_INV against kernel rxe, both directions. The responder binds a type 2 memory
//! window; the requester first WRITEs through it (proving the rkey is live), then sends a
//! SEND_WITH_INV of that rkey, and finally WRITEs through it again, which must now fail with
//! a remote access error and leave the responder's memory untouched. The receive completion
//! must carry WITH_INV and the invalidated rkey.

use softverbs::{
    AccessFlags, MwBindTarget, MwType, RemoteAddr, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};

use super::guest_pair::{
    connect, expect_guest_wc, expect_host_wc, fail, guest_check, host_check, Host, GUARD_BYTES,
    WAIT,
};
use super::guest_peer::GuestPeer;
use super::ibv_wc::{
    IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_REM_ACCESS_ERR, IBV_WC_SEND, IBV_WC_WITH_INV,
    RXE_WC_WITH_INVALIDATE,
};
use super::lab_env::LabEnv;
use super::pattern::lab_pattern;
use super::scenario::Direction;

/// Where the window lies in the responder's buffer, and its length.
const WINDOW_OFFSET: usize = 8192;
const WINDOW_BYTES: usize = 4096;
/// Bytes of each WRITE through the window and of the SEND_WITH_INV.
const MSG_BYTES: usize = 64;

/// Runs the scenario in `dir` at path MTU `mtu`.
pub fn run(env: &LabEnv, device: &str, dir: Direction, mtu: u32) -> Result<String, String> {
    let (host, mut peer) = connect(env, device, mtu)?;
    match dir {
        Direction::SoftverbsToRxe => softverbs_invalidates(&host, &mut peer)?,
        Direction::RxeToSoftverbs => rxe_invalidates(&host, &mut peer)?,
    }
    Ok(format!(
        "type 2 window of {WINDOW_BYTES} B: WRITE through it, SEND_WITH_INV of {MSG_BYTES} B, \
         WRITE after it gets REM_ACCESS_ERR"
    ))
}

fn softverbs_invalidates(host: &Host, peer: &mut GuestPeer) -> Result<(), String> {
    let our_qpn = host.qp.qp_num();
    let bound = peer.call(&format!(
        "bind_mw wr_id=1 offset={WINDOW_OFFSET} length={WINDOW_BYTES}"
    ))?;
    let window = RemoteAddr {
        remote_addr: GuestPeer::num(&bound, "addr")?,
        rkey: GuestPeer::num(&bound, "rkey")? as u32,
    };
    peer.call(&format!(
        "zero offset=0 length={}",
        WINDOW_OFFSET + WINDOW_BYTES
    ))?;
    // 1. The window works.
    host.write(0, &lab_pattern(61, MSG_BYTES))?;
    host.post_send(SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: window,
        ..SendWr::send(10, host.sges(0, MSG_BYTES)?)
    })?;
    expect_host_wc(&host.poll()?, 10, WcOpcode::RdmaWrite, None, our_qpn)?;
    guest_check(peer, WINDOW_OFFSET, MSG_BYTES, 61)?;
    // 2. SEND_WITH_INV of its rkey.
    peer.call(&format!(
        "post_recv wr_id=11 offset=0 length={}",
        MSG_BYTES + GUARD_BYTES
    ))?;
    host.write(0, &lab_pattern(62, MSG_BYTES))?;
    host.post_send(SendWr {
        opcode: WrOpcode::SendWithInv,
        invalidate_rkey: window.rkey,
        ..SendWr::send(11, host.sges(0, MSG_BYTES)?)
    })?;
    expect_host_wc(&host.poll()?, 11, WcOpcode::Send, None, our_qpn)?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, 11, IBV_WC_RECV, Some(MSG_BYTES))?;
    let flags = GuestPeer::num(&wc, "wc_flags")?;
    // The union of imm_data and invalidated_rkey, in host order for the rkey.
    let invalidated = GuestPeer::num(&wc, "imm")?;
    if flags & (IBV_WC_WITH_INV | RXE_WC_WITH_INVALIDATE) == 0
        || invalidated != u64::from(window.rkey)
    {
        return fail(format!(
            "rxe receive flags {flags:#x}, invalidated rkey {invalidated:#x}; want WITH_INV and {:#x}",
            window.rkey
        ));
    }
    guest_check(peer, 0, MSG_BYTES, 62)?;
    // 3. The window is gone: a WRITE through it fails and changes nothing.
    host.write(0, &lab_pattern(63, MSG_BYTES))?;
    host.post_send(SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: window,
        ..SendWr::send(12, host.sges(0, MSG_BYTES)?)
    })?;
    let wc = host.poll()?;
    if wc.wr_id != 12 || wc.status != WcStatus::RemAccessErr {
        return fail(format!(
            "WRITE through the invalidated window: {wc:?}, want REM_ACCESS_ERR"
        ));
    }
    guest_check(peer, WINDOW_OFFSET, MSG_BYTES, 61)
        .map_err(|e| format!("after the refused WRITE: {e}"))
}

fn rxe_invalidates(host: &Host, peer: &mut GuestPeer) -> Result<(), String> {
    let our_qpn = host.qp.qp_num();
    let e = |x: softverbs::VerbsError| x.to_string();
    let mw = host.pd.alloc_mw(MwType::Type2).map_err(e)?;
    let target = MwBindTarget {
        mr: &host.mr,
        offset: WINDOW_OFFSET,
        len: WINDOW_BYTES,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    };
    host.post_send(mw.bind_wr(target, 1, SendFlags::SIGNALED).map_err(e)?)?;
    expect_host_wc(&host.poll()?, 1, WcOpcode::BindMw, None, our_qpn)?;
    let (raddr, rkey) = (host.mr.addr() + WINDOW_OFFSET as u64, mw.rkey());
    host.write(0, &vec![0u8; WINDOW_OFFSET + WINDOW_BYTES])?;
    // 1. The window works.
    peer.call(&format!("fill offset=0 length={MSG_BYTES} seed=71"))?;
    peer.call(&format!(
        "post_send wr_id=10 op=WRITE offset=0 length={MSG_BYTES} raddr={raddr} rkey={rkey}"
    ))?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, 10, IBV_WC_RDMA_WRITE, None)?;
    host_check(host, WINDOW_OFFSET, MSG_BYTES, 71)?;
    // 2. SEND_WITH_INV of its rkey.
    host.post_recv(11, 0, MSG_BYTES + GUARD_BYTES)?;
    peer.call(&format!("fill offset=0 length={MSG_BYTES} seed=72"))?;
    peer.call(&format!(
        "post_send wr_id=11 op=SEND_INV offset=0 length={MSG_BYTES} inv={rkey}"
    ))?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    expect_guest_wc(&wc, 11, IBV_WC_SEND, None)?;
    let wc = host.poll()?;
    expect_host_wc(&wc, 11, WcOpcode::Recv, Some(MSG_BYTES), our_qpn)?;
    if !wc.wc_flags.contains(WcFlags::WITH_INV) || wc.invalidated_rkey != rkey {
        return fail(format!(
            "softverbs receive {wc:?}: want WITH_INV and invalidated rkey {rkey:#x}"
        ));
    }
    host_check(host, 0, MSG_BYTES, 72)?;
    // 3. The window is gone: rxe's WRITE through it fails and changes nothing.
    peer.call(&format!("fill offset=0 length={MSG_BYTES} seed=73"))?;
    peer.call(&format!(
        "post_send wr_id=12 op=WRITE offset=0 length={MSG_BYTES} raddr={raddr} rkey={rkey}"
    ))?;
    let wc = peer.call(&format!("poll timeout_ms={}", WAIT.as_millis()))?;
    if GuestPeer::num(&wc, "wr_id")? != 12
        || GuestPeer::num(&wc, "status")? != IBV_WC_REM_ACCESS_ERR
    {
        return fail(format!(
            "rxe WRITE through the invalidated window: {wc:?}, want REM_ACCESS_ERR"
        ));
    }
    host_check(host, WINDOW_OFFSET, MSG_BYTES, 71)
        .map_err(|e| format!("after the refused WRITE: {e}"))
}
