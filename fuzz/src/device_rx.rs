//! Target `device_rx`: one emulated device on an in-process channel network, fed arbitrary
//! datagrams from a peer endpoint through its whole receive pipeline (port, ICRC, parse,
//! BTH version and P_Key, QP lookup, transport vs QP type, source address; then the QP's
//! transport on the engine thread). Behind it: an RC QP connected to the peer, with a SEND
//! and a READ of its own outstanding (so that forged ACKs and READ responses reach its
//! completer), and a UD QP, both with receives posted.
//!
//! Input: records of `[mode: u8][len: u16 LE][len bytes]` (the last record takes what is
//! left). The bytes are the UDP payload; `mode` may rewrite parts of it so that random
//! bytes get past the checks that guard the deeper code:
//! - bits 0-1: the BTH destination QP: 0 as given, 1 the RC QP, 2 the UD QP, 3 QP1 (GSI);
//! - bit 2: the PSN, from its low 6 bits, near what the QP expects (requests) or has sent
//!   (responses);
//! - bit 3: the RETH / AtomicETH address and rkey into the device's exposed region, the
//!   DETH Q_Key the UD QP's;
//! - bit 4: sent from a stranger's address instead of the peer's;
//! - bit 5: the ICRC written correct (last, over the rewritten bytes).
//!
//! Findings: a panic on any thread (the engine thread's too: libFuzzer aborts on it; replayed
//! without libFuzzer, the device stops counting and the wait times out), a datagram that
//! the pipeline neither drops with a counted reason nor delivers, a byte changed outside
//! the registered region.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softverbs_api::qp::AhAttr;
use softverbs_api::wr::RemoteAddr;
use softverbs_api::{
    AccessFlags, Gid, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge,
    VerbsContext, WorkCompletion,
};
use softverbs_emu::engine::{open_device, register_device, DeviceConfig, EmuContext, LinkConfig};
use softverbs_emu::memory::RdmaBuffer;
use softverbs_emu::net::channel::{ChannelLink, ChannelNetwork};
use softverbs_emu::net::{Link, OutPacket};
use softverbs_emu::wire::{
    write_icrc, HeaderSet, IcrcContext, IpHeaderInfo, Opcode, Psn, BTH_LEN, ICRC_LEN,
};
use softverbs_testkit::{ah_to, qp_cap, RcMoves};

const DEVICE_IP: Ipv4Addr = Ipv4Addr::new(127, 23, 200, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(127, 23, 200, 2);
const STRANGER_IP: Ipv4Addr = Ipv4Addr::new(127, 23, 200, 3);
const ROCE_PORT: u16 = 4791;
/// The UDP source port the peer sends from.
const PEER_SRC_PORT: u16 = 0xc123;
/// QP number the device's RC QP believes its peer has.
const PEER_QPN: u32 = 0x99;
/// First PSN the peer sends (the RC QP's rq_psn).
const PEER_SQ_PSN: u32 = 0x10_0000;
/// First PSN the device's RC QP sends.
const DEVICE_SQ_PSN: u32 = 0x20_0000;
const UD_QKEY: u32 = 0x1111_1111;
/// Bytes of the exposed and receive regions, and of the guard zones around each.
const REGION: usize = 16 * 1024;
const GUARD: usize = 512;
const GUARD_BYTE: u8 = 0xa7;
/// Most datagrams of one input.
const MAX_DATAGRAMS: usize = 64;
/// Longest wait for the device to count what it was sent.
const COUNT_WAIT: Duration = Duration::from_secs(10);

/// A registered region with guard zones before and after it.
struct Guarded {
    buf: RdmaBuffer,
    lkey: u32,
    rkey: u32,
}

impl Guarded {
    fn new(ctx: &EmuContext, pd: u32, access: AccessFlags) -> Guarded {
        let buf = RdmaBuffer::new(GUARD + REGION + GUARD).expect("allocation");
        buf.fill(GUARD_BYTE);
        let keys = ctx
            .reg_mr(pd, buf.addr() + GUARD as u64, REGION as u64, access)
            .expect("reg_mr");
        Guarded {
            buf,
            lkey: keys.lkey,
            rkey: keys.rkey,
        }
    }

    fn addr(&self) -> u64 {
        self.buf.addr() + GUARD as u64
    }

    fn guards_intact(&self) -> bool {
        let all = self.buf.to_vec();
        all[..GUARD].iter().all(|&b| b == GUARD_BYTE)
            && all[GUARD + REGION..].iter().all(|&b| b == GUARD_BYTE)
    }
}

/// The device and what lives as long as it.
struct Fixture {
    ctx: EmuContext,
    peer: ChannelLink,
    stranger: ChannelLink,
    pd: u32,
    cq: u32,
    exposed: Guarded,
    recv: Guarded,
}

fn fixture() -> &'static Mutex<Fixture> {
    static FIXTURE: OnceLock<Mutex<Fixture>> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let net = ChannelNetwork::new();
        let name = format!("fuzz-rx-{}", std::process::id());
        let config = DeviceConfig {
            link: LinkConfig::Channel(net.clone()),
            ack_coalescing: false,
            ..DeviceConfig::new(name.clone(), IpAddr::V4(DEVICE_IP))
        };
        register_device(config).expect("register_device");
        let ctx = open_device(&name).expect("open_device");
        let peer = net
            .attach(SocketAddr::new(PEER_IP.into(), ROCE_PORT))
            .expect("attach");
        let stranger = net
            .attach(SocketAddr::new(STRANGER_IP.into(), ROCE_PORT))
            .expect("attach");
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let (cq, _) = ctx.create_cq(4096, None).expect("create_cq");
        let remote = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let exposed = Guarded::new(&ctx, pd, remote);
        let recv = Guarded::new(&ctx, pd, AccessFlags::LOCAL_WRITE);
        Mutex::new(Fixture {
            ctx,
            peer,
            stranger,
            pd,
            cq,
            exposed,
            recv,
        })
    })
}

/// The QPs of one input.
struct Qps {
    rc: u32,
    ud: u32,
}

impl Fixture {
    fn create_qps(&self) -> Qps {
        let init = |qp_type| QpInitAttr {
            qp_type,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            cap: qp_cap(16, 2),
            sq_sig_all: true,
        };
        let (rc, _) = self
            .ctx
            .create_qp(self.pd, &init(QpType::Rc))
            .expect("RC QP");
        let (ud, _) = self
            .ctx
            .create_qp(self.pd, &init(QpType::Ud))
            .expect("UD QP");
        self.connect_rc(rc);
        self.ready_ud(ud);
        for qpn in [rc, ud] {
            let wrs: Vec<RecvWr> = (0..8)
                .map(|i| RecvWr {
                    wr_id: 100 + i,
                    sg_list: vec![Sge {
                        addr: self.recv.addr() + i * 2048,
                        length: 2048,
                        lkey: self.recv.lkey,
                    }],
                })
                .collect();
            self.ctx.post_recv(qpn, &wrs).expect("post_recv");
        }
        // Work of its own outstanding, for forged ACKs and READ responses to complete.
        let local = |off: u64, len| Sge {
            addr: self.exposed.addr() + off,
            length: len,
            lkey: self.exposed.lkey,
        };
        let remote = RemoteAddr {
            remote_addr: 0x7000_0000,
            rkey: 0x1234,
        };
        let wrs = [
            SendWr::send(1, vec![local(0, 100)]),
            SendWr::read(2, vec![local(4096, 3000)], remote),
        ];
        self.ctx.post_send(rc, &wrs).expect("post_send");
        Qps { rc, ud }
    }

    fn connect_rc(&self, qpn: u32) {
        let moves = RcMoves {
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            dest_qp_num: PEER_QPN,
            rq_psn: PEER_SQ_PSN,
            ah_attr: AhAttr {
                hop_limit: 64,
                ..ah_to(Gid::from_ip(IpAddr::V4(PEER_IP)))
            },
            sq_psn: DEVICE_SQ_PSN,
            ..RcMoves::default()
        };
        for (attr, mask) in moves.all() {
            self.ctx.modify_qp(qpn, &attr, mask).expect("modify");
        }
    }

    fn ready_ud(&self, qpn: u32) {
        let modify = |attr: QpAttr, mask| self.ctx.modify_qp(qpn, &attr, mask).expect("modify");
        modify(
            QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey: UD_QKEY,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        );
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        modify(rtr, QpAttrMask::STATE);
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0,
            ..QpAttr::default()
        };
        modify(rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN);
    }

    /// Datagrams the device took in: delivered, or dropped for a counted reason.
    fn counted(&self) -> u64 {
        let c = self.ctx.counters();
        [
            &c.icrc_errors,
            &c.malformed,
            &c.bad_version,
            &c.bad_pkey,
            &c.unknown_qp,
            &c.wrong_transport,
            &c.wrong_source,
            &c.gsi_unhandled,
            &c.delivered,
            &c.gsi_delivered,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    fn drain_links(&self) {
        for link in [&self.peer, &self.stranger] {
            while link.recv_ready(1024, &mut |_| {}).unwrap_or(0) > 0 {}
        }
    }

    fn drain_cq(&self) {
        let mut wcs = vec![WorkCompletion::default(); 64];
        while self.ctx.poll_cq(self.cq, &mut wcs).unwrap_or(0) > 0 {}
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let fixture = fixture().lock();
    let qps = fixture.create_qps();
    let before = fixture.counted();
    let mut sent = 0u64;
    let mut rest = data;
    while sent < MAX_DATAGRAMS as u64 && rest.len() >= 3 {
        let mode = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let mut payload = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        let from_stranger = mode & 0x10 != 0;
        rewrite(&mut payload, mode, &qps, &fixture);
        let (link, src_ip) = if from_stranger {
            (&fixture.stranger, STRANGER_IP)
        } else {
            (&fixture.peer, PEER_IP)
        };
        if mode & 0x20 != 0 {
            let ctx = IcrcContext {
                ip: IpHeaderInfo::V4 {
                    src: src_ip,
                    dst: DEVICE_IP,
                    identification: 0,
                    flags_fragment: 0x4000,
                },
                udp_src_port: PEER_SRC_PORT,
                udp_dst_port: ROCE_PORT,
            };
            write_icrc(&ctx, &mut payload);
        }
        let packet = OutPacket {
            dst_ip: IpAddr::V4(DEVICE_IP),
            udp_dst_port: ROCE_PORT,
            udp_src_port: PEER_SRC_PORT,
            bytes: payload,
            payload: None,
        };
        link.send_raw(&packet).expect("channel send");
        sent += 1;
    }
    // The device takes datagrams in order, one receiver at a time, so once the count is
    // complete the transport calls of all of them are done.
    let started = Instant::now();
    while fixture.counted() < before + sent {
        assert!(
            started.elapsed() < COUNT_WAIT,
            "the device counted {} of {sent} datagrams",
            fixture.counted() - before
        );
        std::thread::yield_now();
    }
    assert_eq!(
        fixture.counted(),
        before + sent,
        "a datagram was counted twice"
    );
    fixture.ctx.destroy_qp(qps.rc).expect("destroy RC QP");
    fixture.ctx.destroy_qp(qps.ud).expect("destroy UD QP");
    fixture.drain_cq();
    fixture.drain_links();
    assert!(
        fixture.exposed.guards_intact() && fixture.recv.guards_intact(),
        "a byte outside a registered region changed"
    );
}

/// Applies the rewrites `mode` asks for (see the module docs).
fn rewrite(payload: &mut [u8], mode: u8, qps: &Qps, fixture: &Fixture) {
    if payload.len() < BTH_LEN {
        return;
    }
    let dest = match mode & 3 {
        1 => Some(qps.rc),
        2 => Some(qps.ud),
        3 => Some(1),
        _ => None,
    };
    if let Some(qpn) = dest {
        payload[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
    let info = Opcode(payload[0]).info();
    if mode & 0x04 != 0 {
        let base = if info.is_some_and(|i| i.is_request) {
            PEER_SQ_PSN
        } else {
            DEVICE_SQ_PSN
        };
        let psn = Psn::new(base.wrapping_add(u32::from(payload[11] & 0x3f)));
        payload[9..12].copy_from_slice(&psn.value().to_be_bytes()[1..]);
    }
    let Some(info) = info else { return };
    if mode & 0x08 != 0 {
        let body = payload.len().saturating_sub(ICRC_LEN);
        for header in [HeaderSet::RETH, HeaderSet::ATOMIC_ETH] {
            if let Some(at) = info.header_offset(header).filter(|&at| at + 12 <= body) {
                let offset = u64::from(u16::from_be_bytes([payload[at + 6], payload[at + 7]]));
                let va = fixture.exposed.addr() + offset % REGION as u64;
                payload[at..at + 8].copy_from_slice(&va.to_be_bytes());
                payload[at + 8..at + 12].copy_from_slice(&fixture.exposed.rkey.to_be_bytes());
            }
        }
        if let Some(at) = info
            .header_offset(HeaderSet::DETH)
            .filter(|&at| at + 4 <= body)
        {
            payload[at..at + 4].copy_from_slice(&UD_QKEY.to_be_bytes());
        }
    }
}
