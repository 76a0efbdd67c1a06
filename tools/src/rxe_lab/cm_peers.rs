//! softverbs' halves of librdmacm's ucmatose and udaddy (rdma-core's
//! librdmacm/examples), written on `softverbs::cm` to each program's exchange so that the
//! unmodified program in the guest accepts them:
//!
//! - ucmatose (RC, port 7471): N connections; once all are up the server SENDs `count`
//!   messages of `size` bytes on each, the client receives them and SENDs as many back;
//!   then the server disconnects every connection and the client waits for DISCONNECTED.
//! - udaddy (UD through SIDR, port 7174): the client resolves the server's QP with a
//!   SIDR_REQ and SENDs `count` messages with immediate data = its QPN; the server answers
//!   each through an address handle made from the first receive (GRH) to that QPN.
//!
//! Every completion is checked (status, length, immediate data); a peer that disconnects
//! first must be seen doing so (DISCONNECTED before our own disconnect).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use softverbs::cm::{
    create_ep, getaddrinfo, CmId, ConnParam, EventChannel, EventType, Local, PortSpace, QpOptions,
    RDMA_UDP_QKEY,
};
use softverbs::{
    QpCap, RdmaBuffer, SendFlags, SendWr, VerbsError, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

/// ucmatose's port.
pub const UCMATOSE_PORT: u16 = 7471;
/// udaddy's port (UDP port space).
pub const UDADDY_PORT: u16 = 7174;
/// The 40 bytes in front of a UD receive.
const GRH_BYTES: usize = 40;
/// Longest wait for one event or completion.
const STEP: Duration = Duration::from_secs(30);

/// One run's shape: connections, messages per connection and their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// Connections (ucmatose's -c; udaddy runs one).
    pub connections: u32,
    /// Messages each way per connection (-C).
    pub count: u32,
    /// Bytes per message (-S).
    pub size: u32,
}

fn e(x: VerbsError) -> String {
    x.to_string()
}

fn options(count: u32) -> QpOptions {
    QpOptions {
        cap: QpCap {
            max_send_wr: count.max(1),
            max_recv_wr: count.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    }
}

/// One connection's end: the id and its message buffer.
struct Node {
    id: CmId,
    mr: softverbs::Mr,
}

impl Node {
    fn new(id: CmId, bytes: usize) -> Result<Node, String> {
        let buf = RdmaBuffer::new(bytes.max(1)).ok_or("buffer allocation failed")?;
        let mr = id.reg_msgs(buf).map_err(e)?;
        Ok(Node { id, mr })
    }

    fn post_recvs(&self, count: u32, len: u32) -> Result<(), String> {
        (0..count).try_for_each(|i| self.id.post_recv(u64::from(i), &self.mr, 0, len).map_err(e))
    }

    /// `count` signaled SENDs of the first `len` bytes of the buffer.
    fn post_sends(&self, count: u32, len: u32) -> Result<(), String> {
        (0..count).try_for_each(|i| {
            let data = Local::Mr {
                mr: &self.mr,
                offset: 0,
                len,
            };
            self.id
                .post_send(u64::from(i), data, SendFlags::SIGNALED)
                .map_err(e)
        })
    }

    fn recv(&self, what: &str) -> Result<WorkCompletion, String> {
        let wc = self.id.get_recv_comp_timeout(STEP).map_err(e)?;
        ok(&wc, what)?;
        Ok(wc)
    }

    fn send_done(&self, what: &str) -> Result<(), String> {
        ok(&self.id.get_send_comp_timeout(STEP).map_err(e)?, what)
    }
}

fn ok(wc: &WorkCompletion, what: &str) -> Result<(), String> {
    if wc.status != WcStatus::Success {
        return Err(format!("{what}: completion {:?}", wc.status));
    }
    Ok(())
}

fn expect_len(wc: &WorkCompletion, len: u32, what: &str) -> Result<(), String> {
    if wc.byte_len != len || wc.opcode != WcOpcode::Recv {
        return Err(format!(
            "{what}: received {:?} of {} bytes, expected a RECV of {len}",
            wc.opcode, wc.byte_len
        ));
    }
    Ok(())
}

/// ucmatose's server side, bound to the wildcard address as ucmatose binds without -b:
/// accepts `x.connections`, SENDs first, receives the replies, then disconnects each
/// connection first.
pub fn ucmatose_server(x: Exchange, request_wait: Duration) -> Result<String, String> {
    let channel = EventChannel::new().map_err(e)?;
    let listener = CmId::new(&channel, PortSpace::Tcp).map_err(e)?;
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), UCMATOSE_PORT);
    listener.bind_addr(any).map_err(e)?;
    listener.listen(x.connections).map_err(e)?;
    let mut nodes = Vec::new();
    for _ in 0..x.connections {
        let (id, _req) = listener.get_request(request_wait).map_err(e)?;
        id.create_qp(None, &options(x.count)).map_err(e)?;
        let node = Node::new(id, x.size as usize)?;
        node.post_recvs(x.count, x.size)?;
        node.id
            .accept_sync(&ConnParam::default(), STEP)
            .map_err(e)?;
        nodes.push(node);
    }
    for node in &nodes {
        node.post_sends(x.count, x.size)?;
    }
    for node in &nodes {
        (0..x.count).try_for_each(|_| node.send_done("ucmatose server SEND"))?;
    }
    for node in &nodes {
        for _ in 0..x.count {
            expect_len(&node.recv("ucmatose server RECV")?, x.size, "server")?;
        }
    }
    // We disconnect first; the kernel's DREP (or its own DREQ crossing ours) ends each.
    for node in &nodes {
        node.id.disconnect().map_err(e)?;
    }
    for node in &nodes {
        node.id
            .expect(EventType::Disconnected, STEP)
            .map_err(|x| format!("after our disconnect: {x}"))?;
    }
    Ok(format!(
        "{} connections to softverbs bound to 0.0.0.0, {} x {} B each way, softverbs disconnected first",
        x.connections, x.count, x.size
    ))
}

/// ucmatose's client side towards `server` from `source`: connects `x.connections`,
/// receives, replies, and waits for the server to disconnect first.
pub fn ucmatose_client(server: &str, source: &str, x: Exchange) -> Result<String, String> {
    let mut nodes = Vec::new();
    for _ in 0..x.connections {
        let info =
            getaddrinfo(server, UCMATOSE_PORT, Some(source), false, PortSpace::Tcp).map_err(e)?;
        let id = create_ep(&info, None, Some(&options(x.count))).map_err(e)?;
        let node = Node::new(id, x.size as usize)?;
        node.post_recvs(x.count, x.size)?;
        let param = ConnParam {
            retry_count: 5,
            ..ConnParam::default()
        };
        node.id.connect_sync(&param, STEP).map_err(e)?;
        nodes.push(node);
    }
    for node in &nodes {
        for _ in 0..x.count {
            expect_len(&node.recv("ucmatose client RECV")?, x.size, "client")?;
        }
        node.post_sends(x.count, x.size)?;
        (0..x.count).try_for_each(|_| node.send_done("ucmatose client SEND"))?;
    }
    for node in &nodes {
        node.id
            .expect(EventType::Disconnected, STEP)
            .map_err(|x| format!("waiting for the kernel to disconnect first: {x}"))?;
    }
    Ok(format!(
        "{} connections, {} x {} B each way, rxe disconnected first",
        x.connections, x.count, x.size
    ))
}

/// udaddy's server side on `addr`: answers the SIDR_REQ with its UD QP, receives `count`
/// SENDs with immediate data = the client's QPN, and replies to that QPN as many times.
pub fn udaddy_server(addr: &str, x: Exchange, request_wait: Duration) -> Result<String, String> {
    let info = getaddrinfo(addr, UDADDY_PORT, None, true, PortSpace::Udp).map_err(e)?;
    let listener = create_ep(&info, None, None).map_err(e)?;
    listener.listen(1).map_err(e)?;
    let (id, _req) = listener.get_request(request_wait).map_err(e)?;
    id.create_qp(None, &options(x.count)).map_err(e)?;
    let node = Node::new(id, x.size as usize + GRH_BYTES)?;
    node.post_recvs(x.count, x.size + GRH_BYTES as u32)?;
    node.id.accept(&ConnParam::default()).map_err(e)?;
    let mut first = None;
    for _ in 0..x.count {
        let wc = node.recv("udaddy server RECV")?;
        expect_len(&wc, x.size + GRH_BYTES as u32, "udaddy server")?;
        if !wc.wc_flags.contains(WcFlags::WITH_IMM) {
            return Err(format!(
                "udaddy server: a SEND without immediate data: {wc:?}"
            ));
        }
        first.get_or_insert(wc);
    }
    let first = first.ok_or("udaddy server: no message")?;
    // udaddy's create_reply_ah: the AH from the first receive's GRH, the QPN from its
    // immediate data (big-endian on the wire, host order here).
    let mut grh = [0u8; GRH_BYTES];
    node.mr.read(0, &mut grh).map_err(e)?;
    let pd = node.id.pd().ok_or("udaddy server: no PD")?;
    let ah = pd.create_ah_from_wc(&first, &grh).map_err(e)?;
    let client_qpn = first.imm_data;
    if client_qpn != first.src_qp {
        return Err(format!(
            "udaddy server: immediate data {client_qpn:#x} is not the sender's QPN {:#x}",
            first.src_qp
        ));
    }
    let qp = node.id.qp().ok_or("udaddy server: no QP")?;
    for i in 0..x.count {
        let sge = node.mr.sge(GRH_BYTES, x.size).map_err(e)?;
        let wr = SendWr {
            ud: Some(ah.dest(client_qpn, RDMA_UDP_QKEY)),
            ..SendWr::send_with_imm(u64::from(i), vec![sge], qp.qp_num())
        };
        qp.post_send(&[wr]).map_err(|x| x.error.to_string())?;
    }
    (0..x.count).try_for_each(|_| node.send_done("udaddy server SEND"))?;
    Ok(format!(
        "SIDR to QP {:#x}, {} x {} B each way (imm = QPN)",
        qp.qp_num(),
        x.count,
        x.size
    ))
}

/// udaddy's client side towards `server` from `source`: SIDR, `count` SENDs with our
/// QPN as immediate data, then the server's `count` replies.
pub fn udaddy_client(server: &str, source: &str, x: Exchange) -> Result<String, String> {
    let info = getaddrinfo(server, UDADDY_PORT, Some(source), false, PortSpace::Udp).map_err(e)?;
    let id = create_ep(&info, None, Some(&options(x.count))).map_err(e)?;
    let node = Node::new(id, x.size as usize + GRH_BYTES)?;
    node.post_recvs(x.count, x.size + GRH_BYTES as u32)?;
    let est = node
        .id
        .connect_sync(&ConnParam::default(), STEP)
        .map_err(e)?;
    let ud = est.ud.ok_or("ESTABLISHED without UD parameters")?;
    if ud.qkey != RDMA_UDP_QKEY {
        return Err(format!("the SIDR_REP's Q_Key is {:#x}", ud.qkey));
    }
    let qp = node.id.qp().ok_or("no QP")?;
    for i in 0..x.count {
        let sge = node.mr.sge(GRH_BYTES, x.size).map_err(e)?;
        let wr = SendWr {
            ud: Some(ud.ah.dest(ud.qp_num, ud.qkey)),
            ..SendWr::send_with_imm(u64::from(i), vec![sge], qp.qp_num())
        };
        qp.post_send(&[wr]).map_err(|x| x.error.to_string())?;
    }
    (0..x.count).try_for_each(|_| node.send_done("udaddy client SEND"))?;
    for _ in 0..x.count {
        let wc = node.recv("udaddy client RECV")?;
        expect_len(&wc, x.size + GRH_BYTES as u32, "udaddy client")?;
        if wc.src_qp != ud.qp_num {
            return Err(format!(
                "udaddy client: reply from QP {:#x}, not the resolved {:#x}",
                wc.src_qp, ud.qp_num
            ));
        }
    }
    Ok(format!(
        "SIDR resolved QP {:#x} Q_Key {:#x}, {} x {} B each way",
        ud.qp_num, ud.qkey, x.count, x.size
    ))
}
