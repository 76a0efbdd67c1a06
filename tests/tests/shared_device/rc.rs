//! RC between processes of one device: the client roles (run in children) and the
//! server's side of each connection (run by the test process).

use std::time::{Duration, Instant};

use softverbs::{
    AccessFlags, Context, Cq, Mr, Pd, Qp, QpCap, RcConnectOptions, RcEndpoint, RecvWr, RemoteAddr,
    SendWr, WcOpcode, WcStatus,
};
use softverbs_conformance::{
    check_send_wc_op, cmp_swap_wr, fetch_add_wr, pattern, poll_1, rdma_read_wr, rdma_write_wr,
    register_mr, remote_all_access,
};

use super::child::{field, hear, num, say, wait_for_parent, Dev};

/// Bytes of each client's region in the server's MR; the shared counter word follows the
/// regions of [`MAX_CLIENTS`] clients.
pub const REGION: usize = 64 * 1024;
pub const MAX_CLIENTS: usize = 4;
/// What the server's MR holds where nobody wrote.
pub const CANARY: u8 = 0xEE;
/// Where, in a client's region, the server put bytes for the client to READ.
pub const PREFILL_AT: usize = 32 * 1024;
pub const PREFILL_LEN: usize = 5000;
/// Where, in a client's region, the client WRITEs, and how much.
pub const WRITE_LEN: usize = 20_000;
/// The client's compare-and-swap word in its region.
pub const SWAP_AT: usize = 60_000;
/// FETCH_AND_ADDs each client makes on the shared counter (adding its index + 1).
pub const ADDS: usize = 50;
const CLIENT_PSN: u32 = 0x00ab_cdef;
const SERVER_PSN: u32 = 0x00ff_fff0;

/// The seed of what client `k` SENDs, WRITEs, and finds prefilled.
pub fn seed(k: u64, what: u64) -> u64 {
    k * 10 + what
}

/// The endpoint in a line that has `qpn= psn= gid=` among other fields.
pub fn endpoint_of(line: &str) -> RcEndpoint {
    format!(
        "qpn={} psn={} gid={}",
        field(line, "qpn"),
        field(line, "psn"),
        field(line, "gid")
    )
    .parse()
    .unwrap_or_else(|e| panic!("endpoint in {line:?}: {e}"))
}

pub fn qp_on(pd: &Pd, cq: &Cq, depth: u32) -> Qp {
    pd.qp_builder()
        .cap(QpCap {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .build(cq, cq)
        .expect("create QP")
}

/// The ACK timeout and retries of connections whose peer may be killed: a dead peer
/// is found in well under a second.
pub fn short_retry() -> RcConnectOptions {
    RcConnectOptions {
        timeout: 10,
        retry_cnt: 2,
        ..RcConnectOptions::default()
    }
}

/// The slot of the process's share of the device.
pub fn slot_of(ctx: &Context) -> u8 {
    ctx.emulator()
        .expect("an emulated device")
        .shared_slot()
        .expect("a UDP device shares its port by default")
}

fn post(qp: &Qp, wr: SendWr) {
    let id = wr.wr_id;
    qp.post_send(&[wr])
        .unwrap_or_else(|e| panic!("post_send {id}: {e}"));
}

/// Role `rc K MODE [N]`: client K of an RC server on the device. MODE `full` SENDs,
/// WRITEs, READs and does atomics, checking every byte; `stream N` WRITEs 64 KiB N times
/// (reading the region back every 25 WRITEs); `victim` WRITEs until it is killed.
pub fn client_role(args: &[&str]) {
    let k: u64 = args[0].parse().unwrap();
    let ctx = Dev::from_env().open();
    let slot = slot_of(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = qp_on(&pd, &cq, 64);
    let local = register_mr(&pd, 4 * REGION, AccessFlags::LOCAL_WRITE);
    let ep = qp.endpoint(CLIENT_PSN, 1).unwrap();
    say(&format!("ep {ep} slot={slot}"));
    let line = hear().expect("the server's endpoint");
    let opts = if args[1] == "victim" {
        short_retry()
    } else {
        RcConnectOptions::default()
    };
    qp.connect_rc(CLIENT_PSN, &endpoint_of(&line), &opts)
        .unwrap();
    let region = RemoteAddr {
        remote_addr: num(&line, "addr"),
        rkey: num(&line, "rkey") as u32,
    };
    let counter = RemoteAddr {
        remote_addr: num(&line, "counter"),
        ..region
    };
    let c = Client {
        k,
        qp,
        cq,
        local,
        region,
    };
    match args[1] {
        "full" => c.full(counter),
        "stream" => c.stream(args[2].parse().unwrap(), &ctx),
        "victim" => c.victim(),
        other => panic!("unknown mode {other}"),
    }
    wait_for_parent();
}

struct Client {
    k: u64,
    qp: Qp,
    cq: Cq,
    local: Mr,
    region: RemoteAddr,
}

impl Client {
    fn at(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            remote_addr: self.region.remote_addr + offset as u64,
            ..self.region
        }
    }

    fn done(&self, wr_id: u64, opcode: WcOpcode, len: usize) {
        let wc = poll_1(&self.cq, "client completion");
        check_send_wc_op(&wc, wr_id, opcode, len, self.qp.qp_num());
    }

    fn local_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.local.read(offset, &mut v).unwrap();
        v
    }

    fn full(&self, counter: RemoteAddr) {
        let k = self.k;
        let local = &self.local;
        local.write(0, &pattern(seed(k, 1), 3000)).unwrap();
        post(&self.qp, SendWr::send(1, vec![local.sge(0, 3000).unwrap()]));
        self.done(1, WcOpcode::Send, 3000);

        local.write(4096, &pattern(seed(k, 2), WRITE_LEN)).unwrap();
        let sge = local.sge(4096, WRITE_LEN as u32).unwrap();
        post(&self.qp, rdma_write_wr(2, vec![sge], self.at(0)));
        self.done(2, WcOpcode::RdmaWrite, WRITE_LEN);
        // What it wrote, read back from the server's memory.
        let sge = local.sge(REGION, WRITE_LEN as u32).unwrap();
        post(&self.qp, rdma_read_wr(3, vec![sge], self.at(0)));
        self.done(3, WcOpcode::RdmaRead, WRITE_LEN);
        assert_eq!(
            self.local_bytes(REGION, WRITE_LEN),
            pattern(seed(k, 2), WRITE_LEN)
        );
        // What the server put there for it.
        let sge = local.sge(2 * REGION, PREFILL_LEN as u32).unwrap();
        post(&self.qp, rdma_read_wr(4, vec![sge], self.at(PREFILL_AT)));
        self.done(4, WcOpcode::RdmaRead, PREFILL_LEN);
        assert_eq!(
            self.local_bytes(2 * REGION, PREFILL_LEN),
            pattern(seed(k, 3), PREFILL_LEN)
        );

        // Every client adds to one counter: each sees it grow.
        let mut last = None;
        for i in 0..ADDS {
            let sge = local.sge(3 * REGION + 8 * i, 8).unwrap();
            post(&self.qp, fetch_add_wr(10 + i as u64, sge, counter, k + 1));
            self.done(10 + i as u64, WcOpcode::FetchAdd, 8);
            let was = softverbs_conformance::read_u64(local, 3 * REGION + 8 * i);
            assert!(
                last.is_none_or(|l| was > l),
                "counter went {last:?} -> {was}"
            );
            last = Some(was);
        }
        // Swaps in (the word is 0), then does not (it no longer is): the word keeps the
        // first swap's value, and each returns what it found.
        let swap_to = 0xABC0 + k;
        for (wr_id, swap, found) in [(100, swap_to, 0), (101, swap_to + 1, swap_to)] {
            let sge = local.sge(3 * REGION + 4096, 8).unwrap();
            post(&self.qp, cmp_swap_wr(wr_id, sge, self.at(SWAP_AT), 0, swap));
            self.done(wr_id, WcOpcode::CompSwap, 8);
            let was = softverbs_conformance::read_u64(local, 3 * REGION + 4096);
            assert_eq!(was, found, "compare-and-swap {wr_id}");
        }
        local.write(0, b"done").unwrap();
        post(&self.qp, SendWr::send(5, vec![local.sge(0, 4).unwrap()]));
        self.done(5, WcOpcode::Send, 4);
        say("ok");
    }

    fn write_64k(&self, wr_id: u64) {
        let data = pattern(self.k * 1000 + wr_id, REGION);
        self.local.write(0, &data).unwrap();
        let sge = self.local.sge(0, REGION as u32).unwrap();
        post(&self.qp, rdma_write_wr(wr_id, vec![sge], self.at(0)));
    }

    fn stream(&self, n: u64, ctx: &Context) {
        for i in 0..n {
            self.write_64k(i);
            self.done(i, WcOpcode::RdmaWrite, REGION);
            if i == 10 {
                say("streaming");
            }
            if i % 25 == 24 || i + 1 == n {
                let sge = self.local.sge(REGION, REGION as u32).unwrap();
                post(&self.qp, rdma_read_wr(1 << 32 | i, vec![sge], self.at(0)));
                self.done(1 << 32 | i, WcOpcode::RdmaRead, REGION);
                assert_eq!(
                    self.local_bytes(REGION, REGION),
                    pattern(self.k * 1000 + i, REGION),
                    "the server's region after WRITE {i}"
                );
            }
        }
        say(&format!("ok last={}", n - 1));
        // Asked after the victim was killed, as often as the server asks: what this process
        // counted for its QPs. An empty poll first hands what waits in the socket to the
        // pipeline, as the engine thread does once its nap ends.
        while hear().as_deref() == Some("report") {
            let mut none = [softverbs::WorkCompletion::default(); 1];
            assert_eq!(self.cq.poll(&mut none).unwrap(), 0);
            let unknown = ctx
                .emulator()
                .unwrap()
                .counters()
                .unknown_qp
                .load(std::sync::atomic::Ordering::Relaxed);
            say(&format!("report unknown_qp={unknown}"));
        }
    }

    fn victim(&self) {
        let started = Instant::now();
        for i in 0.. {
            self.write_64k(i);
            let wc = self.cq.poll_wait(1, Duration::from_secs(10)).unwrap();
            if wc.first().map(|w| w.status) != Some(WcStatus::Success) {
                return;
            }
            if i == 0 {
                say("started");
            }
            // Bounded, though the parent kills it long before.
            if started.elapsed() > Duration::from_secs(60) {
                return;
            }
        }
    }
}

/// The test process's side: one MR holding every client's region and the counter, and a
/// connection per client.
pub struct Server {
    pub ctx: Context,
    pub pd: Pd,
    pub mr: Mr,
    pub recv_mr: Mr,
    pub conns: Vec<(Cq, Qp)>,
}

impl Server {
    pub fn new(ctx: Context) -> Server {
        let pd = ctx.alloc_pd().unwrap();
        let mr = register_mr(&pd, (MAX_CLIENTS + 1) * REGION, remote_all_access());
        mr.fill(CANARY).unwrap();
        for k in 0..MAX_CLIENTS {
            mr.write(
                k * REGION + PREFILL_AT,
                &pattern(seed(k as u64, 3), PREFILL_LEN),
            )
            .unwrap();
            mr.write(k * REGION + SWAP_AT, &0u64.to_ne_bytes()).unwrap();
        }
        mr.write(MAX_CLIENTS * REGION, &0u64.to_ne_bytes()).unwrap();
        let recv_mr = register_mr(&pd, MAX_CLIENTS * 8192, AccessFlags::LOCAL_WRITE);
        Server {
            ctx,
            pd,
            mr,
            recv_mr,
            conns: Vec::new(),
        }
    }

    /// Connects to the client whose `ep` line is `line` (client `k`, its region `k`);
    /// returns the line for the client.
    pub fn accept(&mut self, k: usize, line: &str, opts: &RcConnectOptions) -> String {
        let cq = self.ctx.create_cq(64).unwrap();
        let qp = qp_on(&self.pd, &cq, 16);
        qp.connect_rc(SERVER_PSN, &endpoint_of(line), opts).unwrap();
        // Posted before the client hears our endpoint, so before it can send.
        for (wr_id, at) in [(100, 0), (101, 4096)] {
            qp.post_recv(&[RecvWr {
                wr_id,
                sg_list: vec![self.recv_mr.sge(k * 8192 + at, 4096).unwrap()],
            }])
            .unwrap();
        }
        let ep = qp.endpoint(SERVER_PSN, 1).unwrap();
        let reply = format!(
            "{ep} addr={} rkey={} counter={}",
            self.mr.addr() + (k * REGION) as u64,
            self.mr.rkey(),
            self.mr.addr() + (MAX_CLIENTS * REGION) as u64
        );
        self.conns.push((cq, qp));
        reply
    }

    /// Bytes `range` of the MR.
    pub fn bytes(&self, at: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(at, &mut v).unwrap();
        v
    }

    /// Checks what full client `k` (connection `conn`) did: its two SENDs, its WRITE,
    /// its swap, and nothing else in its region.
    pub fn check_full_client(&self, conn: usize, k: usize) {
        let (cq, qp) = &self.conns[conn];
        let wcs = cq.poll_wait(2, softverbs_conformance::WAIT).unwrap();
        assert_eq!(wcs.len(), 2, "client {k}'s two SENDs: {wcs:?}");
        for (wc, (wr_id, len)) in wcs.iter().zip([(100, 3000), (101, 4)]) {
            assert_eq!(
                (
                    wc.wr_id,
                    wc.status,
                    wc.opcode,
                    wc.byte_len as usize,
                    wc.qp_num
                ),
                (wr_id, WcStatus::Success, WcOpcode::Recv, len, qp.qp_num())
            );
        }
        let mut got = vec![0u8; 3000];
        self.recv_mr.read(k * 8192, &mut got).unwrap();
        assert_eq!(got, pattern(seed(k as u64, 1), 3000), "client {k}'s SEND");
        let mut done = [0u8; 4];
        self.recv_mr.read(k * 8192 + 4096, &mut done).unwrap();
        assert_eq!(&done, b"done");
        let base = k * REGION;
        let region = self.bytes(base, REGION);
        assert_eq!(
            &region[..WRITE_LEN],
            &pattern(seed(k as u64, 2), WRITE_LEN)[..],
            "client {k}'s WRITE"
        );
        assert_eq!(
            &region[PREFILL_AT..PREFILL_AT + PREFILL_LEN],
            &pattern(seed(k as u64, 3), PREFILL_LEN)[..]
        );
        assert_eq!(
            &region[SWAP_AT..SWAP_AT + 8],
            &(0xABC0 + k as u64).to_ne_bytes()
        );
        let untouched = |r: std::ops::Range<usize>| region[r].iter().all(|&b| b == CANARY);
        assert!(untouched(WRITE_LEN..PREFILL_AT), "client {k}: stray bytes");
        assert!(untouched(PREFILL_AT + PREFILL_LEN..SWAP_AT));
        assert!(untouched(SWAP_AT + 8..REGION));
    }

    /// The shared counter word.
    pub fn counter(&self) -> u64 {
        let b = self.bytes(MAX_CLIENTS * REGION, 8);
        u64::from_ne_bytes(b.try_into().unwrap())
    }
}
