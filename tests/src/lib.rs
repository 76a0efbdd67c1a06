//! Shared helpers of the cross-crate integration tests (`tests/tests/*.rs`).
//!
//! Every test file has its own *file number* and every test in it its own device numbers; a
//! device of file `f`, number `n` is named `sv-f{f}-{n}` and bound to 127.10.f.n, so that test
//! threads and test processes running in parallel never share a UDP port.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use softverbs::{
    register_device, AccessFlags, Context, Cq, DeviceConfig, Mr, Pd, Qp, QpCap, RcConnectOptions,
    RdmaBuffer, RecvWr, RemoteAddr, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use softverbs_testkit::qp_cap;

mod rtr_only;

pub use rtr_only::to_rtr_only;

/// Bound on every wait for a completion or an event: generous, since the machine is shared;
/// a test fails (never hangs) when it passes.
pub const WAIT: Duration = Duration::from_secs(10);

/// The loopback address of device `n` of test file `file`: 127.10.file.n.
pub fn test_ip(file: u8, n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, file, n))
}

/// The name of device `n` of test file `file`.
pub fn device_name(file: u8, n: u8) -> String {
    format!("sv-f{file}-{n}")
}

/// Registers `config` and opens it.
pub fn register_and_open(config: DeviceConfig) -> Context {
    let name = config.name.clone();
    register_device(config).unwrap_or_else(|e| panic!("registering {name}: {e}"));
    Context::open(&name).unwrap_or_else(|e| panic!("opening {name}: {e}"))
}

/// Registers the UDP device `n` of file `file` (on 127.10.file.n, port 4791) and opens it.
pub fn open_udp_device(file: u8, n: u8) -> Context {
    register_and_open(DeviceConfig::new(device_name(file, n), test_ip(file, n)))
}

/// A zeroed buffer of `len` bytes.
pub fn buffer(len: usize) -> RdmaBuffer {
    RdmaBuffer::new(len).expect("buffer allocation")
}

/// `len` bytes of test message `seed`: the bytes depend on both the position and the seed, so
/// misplaced, stale or duplicated data is caught.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ seed.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            (x >> 56) as u8
        })
        .collect()
}

/// How a side's QP and buffers are sized.
#[derive(Debug, Clone, Copy)]
pub struct SideConfig {
    /// QP capacities.
    pub cap: QpCap,
    /// `sq_sig_all` of the QP.
    pub sq_sig_all: bool,
    /// Bytes of each of the send and receive MRs.
    pub buf_len: usize,
    /// Capacity of each CQ.
    pub cq_depth: u32,
    /// One CQ for the send and the receive completions (`send_cq` and `recv_cq` are the
    /// same), as many programs have.
    pub shared_cq: bool,
}

impl Default for SideConfig {
    fn default() -> Self {
        SideConfig {
            cap: qp_cap(64, 4),
            sq_sig_all: false,
            buf_len: 64 * 1024,
            cq_depth: 256,
            shared_cq: false,
        }
    }
}

/// One side of an RC connection: a PD, separate send and receive CQs, a QP and two MRs.
pub struct Side {
    /// The opened device.
    pub ctx: Context,
    /// Its PD.
    pub pd: Pd,
    /// CQ of send completions.
    pub send_cq: Cq,
    /// CQ of receive completions.
    pub recv_cq: Cq,
    /// The RC QP (in RESET until connected).
    pub qp: Qp,
    /// Source of sends (LOCAL_WRITE so the test can fill it).
    pub send_mr: Mr,
    /// Target of receives (LOCAL_WRITE).
    pub recv_mr: Mr,
}

impl Side {
    /// Creates the objects of one side on `ctx`.
    pub fn new(ctx: &Context, cfg: &SideConfig) -> Side {
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let send_cq = ctx.create_cq(cfg.cq_depth).expect("create send CQ");
        let recv_cq = if cfg.shared_cq {
            send_cq.clone()
        } else {
            ctx.create_cq(cfg.cq_depth).expect("create recv CQ")
        };
        let qp = pd
            .qp_builder()
            .cap(cfg.cap)
            .sq_sig_all(cfg.sq_sig_all)
            .build(&send_cq, &recv_cq)
            .expect("create QP");
        let send_mr = pd
            .register(buffer(cfg.buf_len), AccessFlags::LOCAL_WRITE)
            .expect("register send MR");
        let recv_mr = pd
            .register(buffer(cfg.buf_len), AccessFlags::LOCAL_WRITE)
            .expect("register recv MR");
        Side {
            ctx: ctx.clone(),
            pd,
            send_cq,
            recv_cq,
            qp,
            send_mr,
            recv_mr,
        }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The transport counters of this side's QP.
    pub fn counters(&self) -> softverbs_emu::transport::Counters {
        self.ctx
            .emulator()
            .expect("an emulated device")
            .qp_counters(self.qpn())
            .expect("qp_counters")
    }

    /// Posts one receive WR; panics if the post fails.
    pub fn post_recv(&self, wr_id: u64, sg_list: Vec<Sge>) {
        self.qp
            .post_recv(&[RecvWr { wr_id, sg_list }])
            .unwrap_or_else(|e| panic!("post_recv {wr_id}: {e}"));
    }

    /// Posts one send WR; panics if the post fails.
    pub fn post_send(&self, wr: SendWr) {
        let id = wr.wr_id;
        self.qp
            .post_send(&[wr])
            .unwrap_or_else(|e| panic!("post_send {id}: {e}"));
    }
}

/// Connects two sides' QPs to each other (RESET -> RTS on both) with `opts`, `a` sending from
/// PSN `psn_a` and `b` from `psn_b`, both using GID index `opts.sgid_index`.
pub fn connect_pair(a: &Side, b: &Side, psn_a: u32, psn_b: u32, opts: &RcConnectOptions) {
    connect_pair_with(a, b, psn_a, psn_b, opts, opts);
}

/// Like [`connect_pair`] with different options on each side.
pub fn connect_pair_with(
    a: &Side,
    b: &Side,
    psn_a: u32,
    psn_b: u32,
    opts_a: &RcConnectOptions,
    opts_b: &RcConnectOptions,
) {
    let ep_a = a.qp.endpoint(psn_a, opts_a.sgid_index).expect("endpoint a");
    let ep_b = b.qp.endpoint(psn_b, opts_b.sgid_index).expect("endpoint b");
    a.qp.connect_rc(psn_a, &ep_b, opts_a).expect("connect a");
    b.qp.connect_rc(psn_b, &ep_a, opts_b).expect("connect b");
}

/// Creates and destroys `n` QPs on `ctx`, so that the next QP number there differs from that
/// of another device (each device numbers its QPs from the same start, and a test comparing
/// `qp_num` with `src_qp` must not see equal numbers on both sides).
pub fn burn_qpns(ctx: &Context, n: usize) {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(1).expect("create_cq");
    for _ in 0..n {
        drop(pd.qp_builder().build(&cq, &cq).expect("create QP"));
    }
}

/// Builds one side on each of `ctx_a` and `ctx_b` (not connected); b's QP number is made to
/// differ from a's.
pub fn side_pair(ctx_a: &Context, ctx_b: &Context, cfg: &SideConfig) -> (Side, Side) {
    let a = Side::new(ctx_a, cfg);
    burn_qpns(ctx_b, 3);
    let mut b = Side::new(ctx_b, cfg);
    // A device of a shared port starts at a random point of its slot's numbers, and two
    // devices of one process may share the slot: b's number can land on a's (one run in
    // some 65,000). The next one cannot.
    if b.qpn() == a.qpn() {
        b = Side::new(ctx_b, cfg);
    }
    assert_ne!(a.qpn(), b.qpn(), "QP numbers of the two sides must differ");
    (a, b)
}

/// Opens UDP devices `na` and `nb` of file `file`, builds a side on each and connects them
/// (a sends from PSN 0x123456, b from 0xfffff0 so that its PSNs wrap around 2^24).
pub fn rc_pair(
    file: u8,
    na: u8,
    nb: u8,
    cfg: &SideConfig,
    opts: &RcConnectOptions,
) -> (Side, Side) {
    let (a, b) = side_pair(&open_udp_device(file, na), &open_udp_device(file, nb), cfg);
    connect_pair(&a, &b, 0x12_3456, 0xff_fff0, opts);
    (a, b)
}

/// Waits (at most [`WAIT`]) for exactly `n` completions on `cq`; panics if fewer arrive.
pub fn poll_n(cq: &Cq, n: usize, what: &str) -> Vec<WorkCompletion> {
    let got = cq.poll_wait(n, WAIT).expect("poll_cq");
    assert_eq!(
        got.len(),
        n,
        "{what}: expected {n} completions within {WAIT:?}, got {got:?}"
    );
    got
}

/// Waits (at most [`WAIT`]) for one completion on `cq`.
pub fn poll_1(cq: &Cq, what: &str) -> WorkCompletion {
    poll_n(cq, 1, what).remove(0)
}

/// Waits (at most [`WAIT`]) until `cond` holds; panics naming `what` otherwise.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Asserts that `cq` holds no completion right now.
pub fn assert_cq_empty(cq: &Cq, what: &str) {
    let mut wc = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut wc).expect("poll_cq");
    assert_eq!(n, 0, "{what}: unexpected completions {:?}", &wc[..n]);
}

/// Checks every field of a successful send completion.
pub fn check_send_wc(wc: &WorkCompletion, wr_id: u64, byte_len: usize, qpn: u32) {
    assert_eq!(wc.wr_id, wr_id, "send wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "send status in {wc:?}");
    assert_eq!(wc.opcode, WcOpcode::Send, "send opcode in {wc:?}");
    assert_eq!(wc.qp_num, qpn, "send qp_num in {wc:?}");
    assert_eq!(wc.vendor_err, 0, "send vendor_err in {wc:?}");
    // As rxe does, a send completion reports the message length.
    assert_eq!(wc.byte_len as usize, byte_len, "send byte_len in {wc:?}");
}

/// Checks every field of a successful receive completion.
pub fn check_recv_wc(
    wc: &WorkCompletion,
    wr_id: u64,
    byte_len: usize,
    imm: Option<u32>,
    qpn: u32,
    src_qp: u32,
) {
    assert_eq!(wc.wr_id, wr_id, "recv wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "recv status in {wc:?}");
    assert_eq!(wc.opcode, WcOpcode::Recv, "recv opcode in {wc:?}");
    assert_eq!(wc.byte_len as usize, byte_len, "recv byte_len in {wc:?}");
    assert_eq!(wc.qp_num, qpn, "recv qp_num in {wc:?}");
    assert_eq!(wc.src_qp, src_qp, "recv src_qp in {wc:?}");
    assert_eq!(wc.vendor_err, 0, "recv vendor_err in {wc:?}");
    assert!(
        !wc.wc_flags.intersects(WcFlags::GRH | WcFlags::WITH_INV),
        "GRH / WITH_INV on an RC SEND in {wc:?}"
    );
    match imm {
        Some(imm) => {
            assert!(
                wc.wc_flags.contains(WcFlags::WITH_IMM),
                "WITH_IMM missing in {wc:?}"
            );
            assert_eq!(wc.imm_data, imm, "imm_data in {wc:?}");
        }
        None => assert!(
            !wc.wc_flags.contains(WcFlags::WITH_IMM),
            "WITH_IMM set on a plain SEND in {wc:?}"
        ),
    }
}

/// Checks a flushed completion (status WR_FLUSH_ERR) of `wr_id` on QP `qpn`.
pub fn check_flushed(wc: &WorkCompletion, wr_id: u64, qpn: u32) {
    assert_eq!(wc.wr_id, wr_id, "flushed wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::WrFlushErr, "flush status in {wc:?}");
    assert_eq!(wc.qp_num, qpn, "flushed qp_num in {wc:?}");
}

/// A scatter/gather layout: pieces `(offset in the MR, length)` in message order, which need
/// not be contiguous nor ascending in the MR. The bytes between pieces are never touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// (offset, length) of each SGE, in message order.
    pub pieces: Vec<(usize, u32)>,
}

impl Layout {
    /// Splits a message of `len` bytes by `weights` (relative sizes; a zero weight gives a
    /// zero-length SGE; the last piece also gets the rest), then places the pieces in the MR
    /// in the order `placement` (a permutation of piece indices), separated by `gap` bytes,
    /// starting at `start`. `extra` bytes are added to the last piece (receive slack).
    pub fn new(
        len: usize,
        weights: &[usize],
        placement: &[usize],
        start: usize,
        gap: usize,
        extra: usize,
    ) -> Layout {
        assert_eq!(weights.len(), placement.len());
        let total: usize = weights.iter().sum::<usize>().max(1);
        let mut lengths: Vec<usize> = weights.iter().map(|w| len * w / total).collect();
        let assigned: usize = lengths.iter().sum();
        let last_nonzero = weights.iter().rposition(|&w| w > 0).unwrap_or(0);
        lengths[last_nonzero] += len - assigned;
        *lengths.last_mut().expect("at least one piece") += extra;
        let mut offsets = vec![0usize; lengths.len()];
        let mut at = start;
        for &i in placement {
            offsets[i] = at;
            at += lengths[i] + gap;
        }
        Layout {
            pieces: offsets
                .into_iter()
                .zip(lengths)
                .map(|(o, l)| (o, l as u32))
                .collect(),
        }
    }

    /// Bytes of the MR the layout reaches (one past its highest byte).
    pub fn extent(&self) -> usize {
        self.pieces
            .iter()
            .map(|&(o, l)| o + l as usize)
            .max()
            .unwrap_or(0)
    }

    /// Total length of the pieces.
    pub fn total(&self) -> usize {
        self.pieces.iter().map(|&(_, l)| l as usize).sum()
    }

    /// The SGE list over `mr`.
    pub fn sges(&self, mr: &Mr) -> Vec<Sge> {
        self.pieces
            .iter()
            .map(|&(o, l)| mr.sge(o, l).expect("layout inside the MR"))
            .collect()
    }

    /// Writes `msg` into `mr` piece by piece.
    pub fn write(&self, mr: &Mr, msg: &[u8]) {
        let mut at = 0;
        for &(o, l) in &self.pieces {
            let l = (l as usize).min(msg.len() - at);
            mr.write(o, &msg[at..at + l]).expect("write piece");
            at += l;
        }
        assert_eq!(at, msg.len(), "message longer than the layout");
    }

    /// Reads `len` message bytes back out of `image` (a copy of the whole MR).
    pub fn gather(&self, image: &[u8], len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for &(o, l) in &self.pieces {
            let take = (l as usize).min(len - out.len());
            out.extend_from_slice(&image[o..o + take]);
        }
        assert_eq!(out.len(), len, "layout shorter than the message");
        out
    }

    /// Checks that every byte of `image` outside the first `len` message bytes of the layout
    /// still holds `canary`; returns the offset of the first byte that does not.
    pub fn untouched_outside(&self, image: &[u8], len: usize, canary: u8) -> Option<usize> {
        let mut written = vec![false; image.len()];
        let mut left = len;
        for &(o, l) in &self.pieces {
            let take = (l as usize).min(left);
            written[o..o + take].iter_mut().for_each(|w| *w = true);
            left -= take;
        }
        image
            .iter()
            .zip(&written)
            .position(|(&b, &w)| !w && b != canary)
    }
}

/// The index of the first byte where `got` and `want` differ, for assertion messages.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Asserts `got == want` with a short message naming the first differing byte.
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = first_difference(got, want) {
        panic!(
            "{what}: {} bytes received, {} expected; first difference at byte {i} (got {:?}, want {:?})",
            got.len(),
            want.len(),
            got.get(i),
            want.get(i)
        );
    }
}

/// Sends `len` bytes from `a` to `b` as one SEND and checks bytes and both completions; uses
/// the first `len` bytes of each side's MRs.
pub fn send_and_verify(a: &Side, b: &Side, len: usize, seed: u64) {
    let msg = pattern(seed, len);
    a.send_mr.write(0, &msg).expect("fill send MR");
    b.recv_mr.fill(0xEE).expect("canary");
    b.post_recv(seed, vec![b.recv_mr.sge(0, len as u32).expect("recv sge")]);
    a.post_send(SendWr::send(
        seed,
        vec![a.send_mr.sge(0, len as u32).expect("send sge")],
    ));
    let recv = poll_1(&b.recv_cq, "receive");
    check_recv_wc(&recv, seed, len, None, b.qpn(), a.qpn());
    let send = poll_1(&a.send_cq, "send");
    check_send_wc(&send, seed, len, a.qpn());
    let image = b.recv_mr.to_vec();
    assert_bytes_eq(&image[..len], &msg, "received message");
    assert!(
        image[len..].iter().all(|&x| x == 0xEE),
        "bytes beyond the message were written"
    );
}

/// The access an RDMA target MR needs for every remote operation (WRITE, READ and atomics),
/// with the LOCAL_WRITE that REMOTE_WRITE and REMOTE_ATOMIC require.
pub fn remote_all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A UD QP in `pd` with capacities `cap`, completing into `send_cq` and `recv_cq`, moved
/// to RTS with Q_Key `qkey`.
pub fn ud_qp(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, cap: QpCap, qkey: u32) -> Qp {
    let qp = pd
        .qp_builder()
        .qp_type(softverbs::QpType::Ud)
        .cap(cap)
        .build(send_cq, recv_cq)
        .expect("create a UD QP");
    qp.activate_ud(qkey, 0x55).expect("UD QP to RTS");
    qp
}

/// Registers a zeroed buffer of `len` bytes in `pd` with `access`.
pub fn register_mr(pd: &Pd, len: usize, access: AccessFlags) -> Mr {
    pd.register(buffer(len), access)
        .unwrap_or_else(|e| panic!("register {len}-byte MR with {access:?}: {e}"))
}

/// The remote address of byte `offset` of `mr`, with its rkey (what a peer puts in an RDMA
/// or atomic WR).
pub fn remote_at(mr: &Mr, offset: usize) -> RemoteAddr {
    RemoteAddr {
        remote_addr: mr.addr() + offset as u64,
        rkey: mr.rkey(),
    }
}

/// A signaled RDMA WRITE of `sg_list` to `remote`.
pub fn rdma_write_wr(wr_id: u64, sg_list: Vec<Sge>, remote: RemoteAddr) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote,
        ..SendWr::send(wr_id, sg_list)
    }
}

/// A signaled RDMA WRITE_WITH_IMM of `sg_list` to `remote` carrying `imm`.
pub fn rdma_write_imm_wr(wr_id: u64, sg_list: Vec<Sge>, remote: RemoteAddr, imm: u32) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: imm,
        ..rdma_write_wr(wr_id, sg_list, remote)
    }
}

/// A signaled RDMA READ from `remote` into `sg_list` (the length is the list's total).
pub fn rdma_read_wr(wr_id: u64, sg_list: Vec<Sge>, remote: RemoteAddr) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaRead,
        ..rdma_write_wr(wr_id, sg_list, remote)
    }
}

/// A signaled ATOMIC CMP_AND_SWP of the word at `remote`; the original value lands in `sge`.
pub fn cmp_swap_wr(wr_id: u64, sge: Sge, remote: RemoteAddr, compare: u64, swap: u64) -> SendWr {
    SendWr {
        opcode: WrOpcode::AtomicCmpAndSwp,
        compare_add: compare,
        swap,
        ..rdma_write_wr(wr_id, vec![sge], remote)
    }
}

/// A signaled ATOMIC FETCH_AND_ADD of `add` to the word at `remote`; the original value lands
/// in `sge`.
pub fn fetch_add_wr(wr_id: u64, sge: Sge, remote: RemoteAddr, add: u64) -> SendWr {
    SendWr {
        opcode: WrOpcode::AtomicFetchAndAdd,
        compare_add: add,
        ..rdma_write_wr(wr_id, vec![sge], remote)
    }
}

/// Checks a successful send-queue completion of any opcode: `wr_id`, `opcode`, `byte_len`
/// (the message length; 8 for atomics, as rxe reports) and QP.
pub fn check_send_wc_op(
    wc: &WorkCompletion,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: usize,
    qpn: u32,
) {
    assert_eq!(wc.wr_id, wr_id, "wr_id in {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "status in {wc:?}");
    assert_eq!(wc.opcode, opcode, "opcode in {wc:?}");
    assert_eq!(wc.qp_num, qpn, "qp_num in {wc:?}");
    assert_eq!(wc.vendor_err, 0, "vendor_err in {wc:?}");
    assert_eq!(wc.byte_len as usize, byte_len, "byte_len in {wc:?}");
}

/// Checks an error completion: `wr_id`, `status` and QP.
pub fn check_error_wc(wc: &WorkCompletion, wr_id: u64, status: WcStatus, qpn: u32) {
    assert_eq!(wc.wr_id, wr_id, "wr_id in {wc:?}");
    assert_eq!(wc.status, status, "status in {wc:?}");
    assert_eq!(wc.qp_num, qpn, "qp_num in {wc:?}");
}

/// The host-order u64 at byte `offset` of `mr` (where an atomic leaves the original value).
pub fn read_u64(mr: &Mr, offset: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read(offset, &mut b).expect("read 8 bytes of the MR");
    u64::from_ne_bytes(b)
}

/// Stores `value` in host order at byte `offset` of `mr`.
pub fn write_u64(mr: &Mr, offset: usize, value: u64) {
    mr.write(offset, &value.to_ne_bytes())
        .expect("write 8 bytes of the MR");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_splits_places_and_checks() {
        // Weights 1:0:2:1 of 10 bytes -> 2, 0, 5, 3 (rest to the last non-empty piece);
        // placed in the order 2, 0, 3, 1 from offset 5 with gaps of 1.
        let l = Layout::new(10, &[1, 0, 2, 1], &[2, 0, 3, 1], 5, 1, 0);
        assert_eq!(l.pieces, vec![(11, 2), (18, 0), (5, 5), (14, 3)]);
        assert_eq!(l.total(), 10);
        assert_eq!(l.extent(), 18);
        let msg: Vec<u8> = (1..=10).collect();
        let mut image = vec![0xEEu8; 20];
        let mut at = 0;
        for &(o, len) in &l.pieces {
            image[o..o + len as usize].copy_from_slice(&msg[at..at + len as usize]);
            at += len as usize;
        }
        assert_eq!(l.gather(&image, 10), msg);
        assert_eq!(l.untouched_outside(&image, 10, 0xEE), None);
        image[10] = 0;
        assert_eq!(l.untouched_outside(&image, 10, 0xEE), Some(10));
        // Receive slack goes to the last piece; a shorter message leaves it untouched.
        let r = Layout::new(6, &[1, 1], &[0, 1], 0, 0, 4);
        assert_eq!(r.pieces, vec![(0, 3), (3, 7)]);
        assert_eq!(
            r.untouched_outside(&[1, 2, 3, 4, 5, 6, 9, 9, 9, 9], 6, 9),
            None
        );
    }

    #[test]
    fn patterns_differ_by_seed_and_position() {
        let a = pattern(1, 4096);
        let b = pattern(2, 4096);
        assert_ne!(a, b);
        assert_ne!(a[..2048], a[2048..]);
        assert_eq!(first_difference(&a, &a), None);
        assert_eq!(first_difference(&a[..3], &a[..4]), Some(3));
    }
}
