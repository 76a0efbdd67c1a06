//! The seed man pages' helpers between two OS processes over UDP (127.28.5.x): this test
//! process is the client; it runs its own binary again as the server (the ignored test
//! `server_role`, which does nothing unless CM_TWO_PROCESS_SERVER is set).
//! rdma_post_recvv with three SGEs receives one message; rdma_post_send with a registered
//! MR and inline without one; rdma_post_write into the buffer whose address and rkey came
//! in the accept's private data.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use softverbs::cm::{create_ep, getaddrinfo, ConnParam, EventType, Local, PortSpace, QpOptions};
use softverbs::{register_device, Context, DeviceConfig, RdmaBuffer, SendFlags, WcStatus};

const WAIT: Duration = Duration::from_secs(10);
const ROLE_ENV: &str = "CM_TWO_PROCESS_SERVER";
const SERVER: &str = "127.28.5.1";
const CLIENT: &str = "127.28.5.2";
const PORT: u16 = 7190;

/// Both devices are known to both processes (each opens only its own).
fn register_both() {
    for (name, ip) in [("tp-server", SERVER), ("tp-client", CLIENT)] {
        register_device(DeviceConfig::new(name, ip.parse::<IpAddr>().unwrap())).unwrap();
    }
}

#[test]
#[ignore = "the server half of seed_helpers_between_two_processes, run by it"]
fn server_role() {
    if std::env::var_os(ROLE_ENV).is_none() {
        return;
    }
    register_both();
    let _device = Context::open("tp-server").unwrap();
    let info = getaddrinfo(SERVER, PORT, None, true, PortSpace::Tcp).unwrap();
    let listener = create_ep(&info, None, None).unwrap();
    listener.listen(1).unwrap();
    println!("listening");
    let (id, req) = listener.get_request(WAIT).unwrap();
    assert_eq!(&req.private_data[..5], b"hello");
    id.create_qp(None, &QpOptions::default()).unwrap();
    let recv = id.reg_msgs(RdmaBuffer::new(64).unwrap()).unwrap();
    let sgl = [
        recv.sge(0, 4).unwrap(),
        recv.sge(16, 5).unwrap(),
        recv.sge(32, 7).unwrap(),
    ];
    id.post_recvv(77, &sgl).unwrap();
    let small = id.reg_msgs(RdmaBuffer::new(16).unwrap()).unwrap();
    id.post_recv(78, &small, 0, 16).unwrap();
    let done = id.reg_msgs(RdmaBuffer::new(16).unwrap()).unwrap();
    id.post_recv(79, &done, 0, 16).unwrap();
    let target = id.reg_write(RdmaBuffer::new(64).unwrap()).unwrap();
    let mut pd = target.addr().to_le_bytes().to_vec();
    pd.extend_from_slice(&target.rkey().to_le_bytes());
    id.accept(&ConnParam::with_private_data(&pd)).unwrap();
    id.expect(EventType::Established, WAIT).unwrap();

    let wc = id.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (77, WcStatus::Success, 16)
    );
    let r = recv.to_vec();
    assert_eq!(
        (&r[0..4], &r[16..21], &r[32..39]),
        (&b"0123"[..], &b"45678"[..], &b"9abcdef"[..])
    );
    let wc = id.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (78, 7));
    assert_eq!(&small.to_vec()[..7], b"inline!");
    let wc = id.get_recv_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (79, 4));
    // The client SENDs "done" after its WRITE completed: the bytes are here.
    assert_eq!(&target.to_vec()[..15], b"written by rdma");
    println!("server ok");
    id.expect(EventType::Disconnected, WAIT).unwrap();
}

#[test]
fn seed_helpers_between_two_processes() {
    let mut server = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "server_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the server's output").unwrap();
        if line.contains("listening") {
            break;
        }
    }
    register_both();
    let _device = Context::open("tp-client").unwrap();
    let info = getaddrinfo(SERVER, PORT, Some(CLIENT), false, PortSpace::Tcp).unwrap();
    let id = create_ep(&info, None, Some(&QpOptions::default())).unwrap();
    let est = id
        .connect_sync(&ConnParam::with_private_data(b"hello"), WAIT)
        .unwrap();
    let addr = u64::from_le_bytes(est.private_data[..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(est.private_data[8..12].try_into().unwrap());

    let signaled = SendFlags::SIGNALED;
    let inline = signaled | SendFlags::INLINE;
    let msg = id.reg_msgs(RdmaBuffer::new(16).unwrap()).unwrap();
    msg.write(0, b"0123456789abcdef").unwrap();
    id.post_send(1, Local::whole(&msg), signaled).unwrap();
    assert_eq!(id.get_send_comp_timeout(WAIT).unwrap().wr_id, 1);
    id.post_send(2, Local::Inline(b"inline!"), inline).unwrap();
    assert_eq!(id.get_send_comp_timeout(WAIT).unwrap().wr_id, 2);
    id.post_write(3, Local::Inline(b"written by rdma"), inline, addr, rkey)
        .unwrap();
    let wc = id.get_send_comp_timeout(WAIT).unwrap();
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success));
    id.post_send(4, Local::Inline(b"done"), inline).unwrap();
    assert_eq!(id.get_send_comp_timeout(WAIT).unwrap().wr_id, 4);

    // The server checks every byte, says so, then waits for our DREQ; a failed check
    // ends its output early (and its exit status says so).
    let checked = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("server ok"));
    id.disconnect().unwrap();
    lines.for_each(drop); // the rest of its output, to its end
    let status = server.wait().unwrap();
    assert!(
        checked && status.success(),
        "the server half failed: {status:?}"
    );
    id.expect(EventType::Disconnected, WAIT).unwrap();
}
