//! The verbs objects of one side of a run: a device context, one PD, one CQ shared by every
//! QP (as perftest does), the QPs, and one buffer registered for remote access that every QP
//! reads from and writes to.

use softverbs::{
    AccessFlags, Context, Cq, Gid, Mr, Mtu, Qp, QpCap, RcConnectOptions, RcEndpoint, RdmaBuffer,
    VerbsError, VerbsResult,
};

use super::args::{Settings, Verb};
use crate::perftest_oob::{PerftestKeys, CYCLE_BUFFER};

/// The device's CQ limit (max_cqe).
const MAX_CQE: u64 = 0x1_0000;
/// Outstanding READ / atomic each side accepts: perftest's default.
pub const OUT_READS: u32 = 16;
/// Least send queue depth of a latency test (it signals one send in `-Q`, at most the tx
/// depth, and a server does not wait for its answers to complete before the next).
pub const LAT_SQ_DEPTH: u32 = 64;

/// One side's objects.
pub struct Side {
    /// The open device.
    pub ctx: Context,
    /// The CQ of every QP, sends and receives.
    pub cq: Cq,
    /// The QPs, in the order both sides agree on.
    pub qps: Vec<Qp>,
    /// The buffer: local source/target, and what the peer reads / writes.
    pub mr: Mr,
    /// Receive WRs kept posted per QP (SEND tests).
    pub rx_depth: u32,
    /// Where in the buffer this side's outgoing data (and READ / atomic results) lives; the
    /// peer's WRITEs and SENDs land at offset 0, so a ping-pong never sees its own data.
    pub src_off: usize,
    /// Largest message of the run.
    pub max_size: usize,
    /// Inline up to this many bytes.
    pub inline_size: u32,
    /// The peer's QPs, once connected.
    pub peer: Vec<PerftestKeys>,
}

/// The receive queue depth per QP of SEND tests: the tx depth, smaller when many QPs would
/// overflow the shared CQ.
fn rx_depth(s: &Settings) -> u32 {
    let per_qp = (MAX_CQE / 2 / s.qps as u64).max(1) as u32;
    s.tx_depth.max(2).min(per_qp)
}

impl Side {
    /// Opens `device` and creates the objects for the settings.
    pub fn new(device: &str, s: &Settings) -> VerbsResult<Side> {
        let verb = s
            .test
            .verb()
            .ok_or_else(|| VerbsError::inval("the UDP baseline uses no verbs"))?;
        let ctx = Context::open(device)?;
        let pd = ctx.alloc_pd()?;
        let rx = if verb == Verb::Send { rx_depth(s) } else { 0 };
        let latency = s.test.is_latency();
        let sq = if latency {
            LAT_SQ_DEPTH.max(2 * s.tx_depth)
        } else {
            s.tx_depth
        };
        let signaled_per_qp = if latency {
            sq as u64
        } else {
            (s.tx_depth / s.cq_mod) as u64 + 2
        };
        let cqe = (s.qps as u64 * (signaled_per_qp + rx as u64)).clamp(16, MAX_CQE) as u32;
        let cq = ctx.create_cq(cqe)?;
        let max_size = s.sizes.iter().copied().max().unwrap_or(0);
        // The part lent to the peer is at least perftest's cycle buffer (the page size it
        // announces): its clients walk their remote address through it (64 bytes per
        // atomic, a message per small WRITE or READ).
        let src_off = max_size.max(CYCLE_BUFFER).next_multiple_of(64);
        let buffer = RdmaBuffer::new(2 * src_off)
            .ok_or_else(|| VerbsError::nomem(format!("a {}-byte buffer", 2 * src_off)))?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = pd.register(buffer, access)?;
        let mut qps = Vec::with_capacity(s.qps as usize);
        for _ in 0..s.qps {
            let qp = pd
                .qp_builder()
                .cap(QpCap {
                    max_send_wr: sq,
                    max_recv_wr: rx.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: s.inline_size,
                })
                .build(&cq, &cq)?;
            qps.push(qp);
        }
        Ok(Side {
            ctx,
            cq,
            qps,
            mr,
            rx_depth: rx,
            src_off,
            max_size,
            inline_size: s.inline_size,
            peer: Vec::new(),
        })
    }

    /// What this side tells the peer about each QP.
    pub fn keys(&self) -> VerbsResult<Vec<PerftestKeys>> {
        let gid = self.ctx.query_gid(1, 1)?.gid;
        Ok(self
            .qps
            .iter()
            .map(|qp| PerftestKeys {
                out_reads: OUT_READS,
                qpn: qp.qp_num(),
                psn: first_psn(qp.qp_num(), gid),
                rkey: self.mr.rkey(),
                vaddr: self.mr.addr(),
                gid,
            })
            .collect())
    }

    /// Connects QP `i` to the peer's QP `i` (RESET to RTS).
    pub fn connect(
        &mut self,
        mine: &[PerftestKeys],
        theirs: &[PerftestKeys],
        mtu: u32,
    ) -> VerbsResult<()> {
        if theirs.len() != self.qps.len() {
            return Err(VerbsError::inval(format!(
                "the peer has {} QPs, this side {} (give both the same -q)",
                theirs.len(),
                self.qps.len()
            )));
        }
        let path_mtu = Mtu::from_bytes(mtu).unwrap_or(Mtu::Mtu1024);
        for ((qp, me), peer) in self.qps.iter().zip(mine).zip(theirs) {
            let opts = RcConnectOptions {
                path_mtu,
                max_rd_atomic: peer.out_reads.clamp(1, OUT_READS) as u8,
                max_dest_rd_atomic: OUT_READS as u8,
                ..RcConnectOptions::default()
            };
            let remote = RcEndpoint {
                qpn: peer.qpn,
                psn: peer.psn,
                gid: peer.gid,
                udp_port: None,
            };
            qp.connect_rc(me.psn, &remote, &opts)?;
        }
        self.peer = theirs.to_vec();
        Ok(())
    }
}

/// A first PSN that differs between QPs and devices (perftest draws a random one).
fn first_psn(qpn: u32, gid: Gid) -> u32 {
    let g = gid.0.iter().fold(0u32, |h, &b| h.rotate_left(5) ^ b as u32);
    (qpn.wrapping_mul(0x9E37_79B1) ^ g) & 0x00ff_ffff
}

/// The byte at `i` of the test data of a `size`-byte run (what the verifying side expects).
pub fn pattern_byte(size: usize, i: usize) -> u8 {
    crate::rc_pair::pattern_byte(size as u64, i)
}
