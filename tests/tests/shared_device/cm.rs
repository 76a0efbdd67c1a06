//! softverbs::cm between processes of one device: the test process listens, child
//! processes connect to it at the device's own address. Requests reach the listener and
//! every answer the process whose communication ID it names, whichever member the kernel
//! handed the MAD to.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use softverbs::cm::{
    create_ep, getaddrinfo, CmId, ConnParam, EventType, Local, PortSpace, QpOptions,
};
use softverbs::{Context, RdmaBuffer, SendFlags, WcStatus};
use softverbs_conformance::pattern;

use super::child::{hear, say, wait_for_parent, Dev};

pub const PORT: u16 = 7290;
const WAIT: Duration = Duration::from_secs(10);
pub const MSG: usize = 1500;

/// What this process forwarded to other members (QP1 MADs included).
pub fn forwarded(ctx: &Context) -> u64 {
    let emu = ctx.emulator().expect("emulated");
    emu.shared_counters()
        .expect("shared")
        .forwarded_out
        .load(Relaxed)
}

/// The listener of the test process on the device.
pub fn listen(dev: &Dev) -> CmId {
    let info = getaddrinfo(&dev.ip.to_string(), PORT, None, true, PortSpace::Tcp).unwrap();
    let listener = create_ep(&info, None, None).unwrap();
    listener.listen(8).unwrap();
    listener
}

/// Accepts one request: checks its private data names a client, receives the client's
/// message and checks it. Returns the connection and the client's number.
pub fn serve_one(listener: &CmId) -> (CmId, u64) {
    let (id, req) = listener.get_request(WAIT).unwrap();
    let text = String::from_utf8_lossy(&req.private_data).to_string();
    let k: u64 = text
        .trim_end_matches('\0')
        .strip_prefix("client ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("private data {text:?}"));
    id.create_qp(None, &QpOptions::default()).unwrap();
    let recv = id.reg_msgs(RdmaBuffer::new(4096).unwrap()).unwrap();
    id.post_recv(k, &recv, 0, 4096).unwrap();
    id.accept(&ConnParam::with_private_data(
        format!("server for {k}").as_bytes(),
    ))
    .unwrap();
    id.expect(EventType::Established, WAIT).unwrap();
    let wc = id.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len as usize),
        (k, WcStatus::Success, MSG)
    );
    assert_eq!(
        &recv.to_vec()[..MSG],
        &pattern(500 + k, MSG)[..],
        "client {k}'s SEND"
    );
    (id, k)
}

/// Role `cm K`: connects to the listener on its own device, checks the accept's private
/// data, SENDs a message; once the parent is done, disconnects. Then says how many
/// datagrams it forwarded.
pub fn client_role(args: &[&str]) {
    let k: u64 = args[0].parse().unwrap();
    let dev = Dev::from_env();
    let ctx = dev.open();
    let ip = dev.ip.to_string();
    let info = getaddrinfo(&ip, PORT, Some(&ip), false, PortSpace::Tcp).unwrap();
    let id = create_ep(&info, None, Some(&QpOptions::default())).unwrap();
    let est = id
        .connect_sync(
            &ConnParam::with_private_data(format!("client {k}").as_bytes()),
            WAIT,
        )
        .unwrap();
    let reply = format!("server for {k}");
    assert_eq!(&est.private_data[..reply.len()], reply.as_bytes());
    let msg = id.reg_msgs(RdmaBuffer::new(MSG).unwrap()).unwrap();
    msg.write(0, &pattern(500 + k, MSG)).unwrap();
    id.post_send(1, Local::whole(&msg), SendFlags::SIGNALED)
        .unwrap();
    let wc = id.get_send_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    say("ok");
    assert_eq!(hear().as_deref(), Some("disconnect"));
    id.disconnect().unwrap();
    id.expect(EventType::Disconnected, WAIT).unwrap();
    say(&format!("done forwarded={}", forwarded(&ctx)));
    wait_for_parent();
}

/// Role `cm_listen`: listening on the port the parent listens on is refused.
pub fn listen_role() {
    let dev = Dev::from_env();
    let _ctx = dev.open();
    let info = getaddrinfo(&dev.ip.to_string(), PORT, None, true, PortSpace::Tcp).unwrap();
    let listener = create_ep(&info, None, None).unwrap();
    let err = listener
        .listen(1)
        .expect_err("another process listens there");
    say(&format!("refused errno={}", err.errno()));
    wait_for_parent();
}

/// Port of the SIDR test's UDP listener.
pub const UD_PORT: u16 = 7291;

/// Role `sidr K`: resolves the UD service on its own device (SIDR_REQ, SIDR_REP), then
/// sends one datagram to the QP the answer named.
pub fn sidr_role(args: &[&str]) {
    let k: u64 = args[0].parse().unwrap();
    let dev = Dev::from_env();
    let _ctx = dev.open();
    let ip = dev.ip.to_string();
    let info = getaddrinfo(&ip, UD_PORT, Some(&ip), false, PortSpace::Udp).unwrap();
    let id = create_ep(&info, None, Some(&QpOptions::default())).unwrap();
    id.connect(&ConnParam::with_private_data(format!("ud {k}").as_bytes()))
        .unwrap();
    let est = id.expect(EventType::Established, WAIT).unwrap();
    let ud = est.ud.clone().expect("UD parameters in the SIDR_REP");
    let flags = SendFlags::SIGNALED | SendFlags::INLINE;
    let msg = format!("datagram {k}");
    id.post_ud_send(4, Local::Inline(msg.as_bytes()), flags, &ud.ah, ud.qp_num)
        .unwrap();
    assert_eq!(
        id.get_send_comp_timeout(WAIT).unwrap().status,
        WcStatus::Success
    );
    say(&format!("sent qpn={:#x}", ud.qp_num));
    wait_for_parent();
}
