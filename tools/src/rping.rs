//! `softverbs rping`: librdmacm's rping over softverbs::cm. Per iteration, as rping.c:
//! the client SENDs where its source buffer is, the server RDMA READs it and SENDs
//! "go ahead", the client SENDs where its sink buffer is, the server RDMA WRITEs what it
//! read there and SENDs the ack, and the client checks the sink equals the source.
//! The buffer adverts are rping's `struct rping_rdma_info` (big-endian buf, rkey, size).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use softverbs::cm::{
    create_ep, getaddrinfo, CmId, ConnParam, EventType, Local, PortSpace, QpOptions,
};
use softverbs::{Mr, RdmaBuffer, SendFlags, VerbsError, VerbsResult, WcStatus};

/// rping's smallest buffer: room for "rdma-ping-%d: " and a number.
const MIN_SIZE: usize = 23;
/// rping's largest buffer.
const MAX_SIZE: usize = 64 * 1024;
/// `struct rping_rdma_info`: u64 buf, u32 rkey, u32 size, big-endian.
const INFO_LEN: usize = 16;
/// How long a step may take before rping gives up.
const STEP: Duration = Duration::from_secs(30);

/// Arguments of `softverbs rping` (rping's own letters).
#[derive(clap::Args)]
pub struct RpingArgs {
    /// Server: listen on -a ADDR -p PORT.
    #[arg(short = 's', conflicts_with = "client")]
    pub(crate) server: bool,
    /// Client: connect to -a ADDR -p PORT.
    #[arg(short = 'c')]
    pub(crate) client: bool,
    /// The server's address (the address the server binds to).
    #[arg(short = 'a')]
    pub(crate) addr: String,
    /// The client's source address: picks the client's device.
    #[arg(short = 'I')]
    pub(crate) source: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    pub(crate) port: u16,
    /// Iterations (0: until interrupted or disconnected).
    #[arg(short = 'C', default_value_t = 0)]
    pub(crate) count: u32,
    /// Buffer size in bytes (23..=65536).
    #[arg(short = 'S', default_value_t = 64)]
    pub(crate) size: usize,
    /// Print the ping data of each iteration.
    #[arg(short = 'v')]
    pub(crate) verbose: bool,
    /// Print progress (connection events).
    #[arg(short = 'd')]
    pub(crate) debug: bool,
    /// Server: how long to wait for the connection request, in seconds.
    #[arg(long, default_value_t = 300)]
    pub(crate) request_wait_s: u64,
}

/// Runs rping; exit status 0 once every iteration's data checked.
pub fn run(args: &RpingArgs) -> ExitCode {
    let result = if !(MIN_SIZE..=MAX_SIZE).contains(&args.size) {
        Err(VerbsError::inval(format!(
            "size {} outside {MIN_SIZE}..={MAX_SIZE}",
            args.size
        )))
    } else if args.server {
        server(args)
    } else if args.client {
        client(args)
    } else {
        Err(VerbsError::inval("give -s (server) or -c (client)"))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ VerbsError::Io { .. }) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rping: {e} (errno {})", e.errno());
            ExitCode::FAILURE
        }
    }
}

/// The buffers of one side.
struct Buffers {
    recv: Mr,
    send: Mr,
    /// The client's source / the server's landing buffer.
    rdma: Mr,
    /// The client's sink (unused on the server).
    start: Option<Mr>,
}

fn buffer(len: usize) -> VerbsResult<RdmaBuffer> {
    RdmaBuffer::new(len).ok_or_else(|| VerbsError::nomem("buffer"))
}

fn advert(mr: &Mr, size: usize) -> [u8; INFO_LEN] {
    let mut info = [0u8; INFO_LEN];
    info[..8].copy_from_slice(&mr.addr().to_be_bytes());
    info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
    info[12..].copy_from_slice(&(size as u32).to_be_bytes());
    info
}

fn parse_advert(info: &[u8]) -> (u64, u32, u32) {
    let word = |a: usize, n: usize| {
        info[a..a + n]
            .iter()
            .fold(0u64, |v, &b| v << 8 | u64::from(b))
    };
    (word(0, 8), word(8, 4) as u32, word(12, 4) as u32)
}

/// Sends the 16 bytes in `bufs.send` and waits for their completion.
fn send_info(id: &CmId, bufs: &Buffers, info: &[u8; INFO_LEN]) -> VerbsResult<()> {
    bufs.send.write(0, info)?;
    id.post_send(1, Local::whole(&bufs.send), SendFlags::SIGNALED)?;
    completed(id.get_send_comp_timeout(STEP)?.status, "send")
}

/// Waits for the next message into `bufs.recv`, then posts the receive again.
fn recv_info(id: &CmId, bufs: &Buffers) -> VerbsResult<[u8; INFO_LEN]> {
    let wc = id.get_recv_comp_timeout(STEP)?;
    completed(wc.status, "receive")?;
    let mut info = [0u8; INFO_LEN];
    bufs.recv.read(0, &mut info)?;
    id.post_recv(2, &bufs.recv, 0, INFO_LEN as u32)?;
    Ok(info)
}

fn completed(status: WcStatus, what: &str) -> VerbsResult<()> {
    if status == WcStatus::Success {
        Ok(())
    } else {
        Err(VerbsError::Io {
            errno: libc::ECONNRESET,
            message: format!("{what} completed with {status:?}"),
        })
    }
}

fn qp_options() -> QpOptions {
    QpOptions::default()
}

pub(crate) fn server(args: &RpingArgs) -> VerbsResult<()> {
    let info = getaddrinfo(&args.addr, args.port, None, true, PortSpace::Tcp)?;
    let listener = create_ep(&info, None, None)?;
    listener.listen(1)?;
    debug(args, &format!("listening on {}:{}", args.addr, args.port));
    let (id, req) = listener.get_request(Duration::from_secs(args.request_wait_s))?;
    debug(args, &format!("connect request from {:?}", id.peer_addr()));
    let _ = req;
    id.create_qp(None, &qp_options())?;
    let bufs = Buffers {
        recv: id.reg_msgs(buffer(INFO_LEN)?)?,
        send: id.reg_msgs(buffer(INFO_LEN)?)?,
        rdma: id.reg_write(buffer(args.size)?)?,
        start: None,
    };
    id.post_recv(2, &bufs.recv, 0, INFO_LEN as u32)?;
    id.accept_sync(&ConnParam::default(), STEP)?;
    debug(args, "connected");
    let mut done = 0u32;
    while args.count == 0 || done < args.count {
        // The client's source advert; a flushed receive means it went away.
        let info = match recv_info(&id, &bufs) {
            Ok(info) => info,
            Err(_) if args.count == 0 => break,
            Err(e) => return Err(e),
        };
        let (addr, rkey, len) = parse_advert(&info);
        let len = (len as usize).min(args.size) as u32;
        id.post_read(3, &bufs.rdma, 0, len, SendFlags::SIGNALED, addr, rkey)?;
        completed(id.get_send_comp_timeout(STEP)?.status, "RDMA READ")?;
        if args.verbose {
            println!("server ping data: {}", text(&bufs.rdma, len as usize));
        }
        send_info(&id, &bufs, &[0; INFO_LEN])?; // go ahead
        let (addr, rkey, sink_len) = parse_advert(&recv_info(&id, &bufs)?);
        let len = len.min(sink_len);
        id.post_write(
            4,
            Local::Mr {
                mr: &bufs.rdma,
                offset: 0,
                len,
            },
            SendFlags::SIGNALED,
            addr,
            rkey,
        )?;
        completed(id.get_send_comp_timeout(STEP)?.status, "RDMA WRITE")?;
        send_info(&id, &bufs, &[0; INFO_LEN])?; // written
        done += 1;
    }
    if args.count != 0 {
        // Let the client disconnect first, as rping's server waits for it.
        let _ = id.expect(EventType::Disconnected, STEP);
    } else {
        let _ = id.disconnect();
    }
    debug(args, &format!("{done} iterations"));
    Ok(())
}

pub(crate) fn client(args: &RpingArgs) -> VerbsResult<()> {
    let info = getaddrinfo(
        &args.addr,
        args.port,
        args.source.as_deref(),
        false,
        PortSpace::Tcp,
    )?;
    let id = create_ep(&info, None, Some(&qp_options()))?;
    let bufs = Buffers {
        recv: id.reg_msgs(buffer(INFO_LEN)?)?,
        send: id.reg_msgs(buffer(INFO_LEN)?)?,
        rdma: id.reg_read(buffer(args.size)?)?,
        start: Some(id.reg_write(buffer(args.size)?)?),
    };
    let sink = bufs
        .start
        .as_ref()
        .ok_or_else(|| VerbsError::inval("no sink"))?;
    id.post_recv(2, &bufs.recv, 0, INFO_LEN as u32)?;
    id.connect_sync(&ConnParam::default(), STEP)?;
    debug(
        args,
        &format!(
            "connected from {:?}",
            id.local_addr().map(|a: SocketAddr| a.to_string())
        ),
    );
    let mut first = b'A';
    let mut ping = 0u32;
    while args.count == 0 || ping < args.count {
        let data = ping_data(ping, first, args.size);
        first = if first >= b'z' { b'A' } else { first + 1 };
        bufs.rdma.write(0, &data)?;
        sink.fill(0)?;
        send_info(&id, &bufs, &advert(&bufs.rdma, args.size))?;
        recv_info(&id, &bufs)?; // go ahead: the server has read it
        send_info(&id, &bufs, &advert(sink, args.size))?;
        recv_info(&id, &bufs)?; // written
        if sink.to_vec() != data {
            return Err(VerbsError::Io {
                errno: libc::EIO,
                message: format!("ping {ping}: data mismatch"),
            });
        }
        if args.verbose {
            println!("ping data: {}", text(sink, args.size));
        }
        ping += 1;
    }
    id.disconnect()?;
    id.expect(EventType::Disconnected, STEP)?;
    debug(args, &format!("{ping} iterations, data checked"));
    Ok(())
}

/// rping's message: "rdma-ping-N: " then letters from `first` up to 'z' and round again,
/// NUL-terminated.
fn ping_data(ping: u32, first: u8, size: usize) -> Vec<u8> {
    let mut data = format!("rdma-ping-{ping}: ").into_bytes();
    let mut c = first;
    while data.len() < size {
        data.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    data.truncate(size);
    data[size - 1] = 0;
    data
}

fn text(mr: &Mr, len: usize) -> String {
    let bytes = mr.to_vec();
    let bytes = &bytes[..len.min(bytes.len())];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn debug(args: &RpingArgs, what: &str) {
    if args.debug {
        eprintln!("rping: {what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_rpings_pattern() {
        let d = ping_data(3, b'y', 23);
        assert_eq!(&d[..], b"rdma-ping-3: yzABCDEFG\0");
    }
}
