//! A hostile peer floods a device with valid-looking requests (forged with valid ICRCs from
//! the address of a connected QP's peer): READs of a whole 64 MiB region, their duplicates,
//! READs at past PSNs that never carried one, and small WRITEs. The process's peak memory
//! (VmHWM) may grow by at most [`BOUND_BYTES`] over what it was before the flood; before
//! READ responses were streamed in bounded bursts, one such READ alone held about 70 MB of
//! packet buffers (issue 23).
//!
//! Its own test binary, so that no other test's memory counts. UDP on 127.23.2.1 (the
//! device) and 127.23.2.2 (the attacker), which does not read what the device answers:
//! its socket buffer overflows and the kernel drops the rest, as a real attacker's would.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use softverbs_api::{AccessFlags, Gid, Mtu, QpInitAttr, QpType, VerbsContext};
use softverbs_emu::engine::{open_device, register_device, DeviceConfig, EmuContext};
use softverbs_emu::wire::{
    write_icrc, BthRepr, IcrcContext, IpHeaderInfo, Opcode, Psn, RethRepr, RoceRepr,
};
use softverbs_testkit::{ah_to, qp_cap, RcMoves};

/// How much the peak RSS may grow under the flood.
const BOUND_BYTES: u64 = 32 << 20;
/// The region every READ asks for whole.
const REGION_BYTES: usize = 64 << 20;

const DEVICE_IP: Ipv4Addr = Ipv4Addr::new(127, 23, 2, 1);
const ATTACKER_IP: Ipv4Addr = Ipv4Addr::new(127, 23, 2, 2);
const PEER_QPN: u32 = 0x99;

/// A `/proc/self/status` field in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field}"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

/// An RC QP of the device in RTS, connected to the attacker's address, and an MR of
/// `region` that remote peers may read and write. Returns the QPN and the MR's keys.
fn victim(ctx: &EmuContext, region: &mut [u8]) -> (u32, softverbs_api::backend::MrKeys) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap().0;
    let cap = qp_cap(16, 1);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let qpn = ctx.create_qp(pd, &init).unwrap().0;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let keys = ctx
        .reg_mr(pd, region.as_mut_ptr() as u64, region.len() as u64, access)
        .unwrap();
    let moves = RcMoves {
        access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        path_mtu: Mtu::Mtu4096,
        dest_qp_num: PEER_QPN,
        max_dest_rd_atomic: 16,
        ah_attr: ah_to(Gid::from_ip(IpAddr::V4(ATTACKER_IP))),
        max_rd_atomic: 1,
        ..RcMoves::default()
    };
    for (attr, mask) in moves.all() {
        ctx.modify_qp(qpn, &attr, mask).unwrap();
    }
    (qpn, keys)
}

/// The attacker: forges requests to the victim QP with valid ICRCs.
struct Attacker {
    socket: UdpSocket,
    qpn: u32,
    sent: u64,
}

impl Attacker {
    fn send(&mut self, repr: &RoceRepr<'_>) {
        let mut bytes = repr.to_vec().unwrap();
        let ctx = IcrcContext {
            ip: IpHeaderInfo::V4 {
                src: ATTACKER_IP,
                dst: DEVICE_IP,
                identification: 0,
                flags_fragment: 0x4000,
            },
            udp_src_port: 4791,
            udp_dst_port: 4791,
        };
        write_icrc(&ctx, &mut bytes);
        self.socket
            .send_to(&bytes, SocketAddr::new(IpAddr::V4(DEVICE_IP), 4791))
            .unwrap();
        self.sent += 1;
    }

    fn read(&mut self, psn: u32, va: u64, rkey: u32, len: u32) {
        let mut r = RoceRepr::new(
            BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, self.qpn, Psn::new(psn)),
            &[],
        );
        r.reth = Some(RethRepr {
            va,
            rkey,
            dma_len: len,
        });
        self.send(&r);
    }

    fn write(&mut self, psn: u32, va: u64, rkey: u32, data: &[u8]) {
        let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, self.qpn, Psn::new(psn));
        bth.ack_req = true;
        let mut r = RoceRepr::new(bth, data);
        r.reth = Some(RethRepr {
            va,
            rkey,
            dma_len: data.len() as u32,
        });
        self.send(&r);
    }
}

/// Waits until the device has taken every datagram sent so far off its socket and the QP
/// has finished with them (its counters are read under the QP's lock, which a READ's
/// responses hold until the last one left), or a datagram got lost on the way.
fn settle(ctx: &EmuContext, qpn: u32, sent: u64) {
    let start = Instant::now();
    loop {
        let got = ctx.qp_counters(qpn).unwrap().received_packets;
        if got >= sent || start.elapsed() > Duration::from_secs(20) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_flood_of_large_reads_and_their_duplicates_leaves_memory_bounded() {
    let config = DeviceConfig::new("flood0", IpAddr::V4(DEVICE_IP));
    register_device(config).unwrap();
    let ctx = open_device("flood0").unwrap();
    // Touched, so that its pages count before the flood, not during it.
    let mut region = vec![0x5au8; REGION_BYTES];
    let (qpn, keys) = victim(&ctx, &mut region);
    let rkey = keys.rkey;
    let va = region.as_ptr() as u64;
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ATTACKER_IP), 4791)).unwrap();
    let mut attacker = Attacker {
        socket,
        qpn,
        sent: 0,
    };
    // Warm up: one small READ, so that the engine's threads and pools exist.
    attacker.read(0, va, rkey, 4096);
    settle(&ctx, qpn, attacker.sent);
    let before = status_bytes("VmHWM:");

    let responses_per_read = (REGION_BYTES / 4096) as u32;
    let mut psn = 1;
    for round in 0..4 {
        let first = psn;
        attacker.read(first, va, rkey, REGION_BYTES as u32);
        psn += responses_per_read;
        // Duplicates of it (answered again, a burst at a time), and READs at past PSNs that
        // carried a WRITE (never executed).
        for _ in 0..2 {
            attacker.read(first, va, rkey, REGION_BYTES as u32);
        }
        attacker.write(psn, va + 64, rkey, &[round as u8; 64]);
        let write_psn = psn;
        psn += 1;
        for _ in 0..4 {
            attacker.read(write_psn, va, rkey, REGION_BYTES as u32);
        }
        // Small valid WRITEs in between.
        for i in 0..64u64 {
            attacker.write(psn, va + 4096 * i, rkey, &[round as u8; 64]);
            psn += 1;
        }
        settle(&ctx, qpn, attacker.sent);
    }
    let after = status_bytes("VmHWM:");
    let counters = ctx.qp_counters(qpn).unwrap();
    eprintln!(
        "peak RSS {} MiB before the flood, {} MiB after ({} KiB more); {} responses sent",
        before >> 20,
        after >> 20,
        (after - before) >> 10,
        counters.sent_responses
    );
    // The flood reached the QP: at least the first large READ was answered in full.
    assert!(
        counters.sent_responses >= u64::from(responses_per_read),
        "{counters:?}"
    );
    assert!(counters.duplicate_requests > 0, "{counters:?}");
    assert!(
        after <= before + BOUND_BYTES,
        "peak RSS grew by {} MiB under the flood (bound {} MiB): {counters:?}",
        (after - before) >> 20,
        BOUND_BYTES >> 20
    );
    ctx.dereg_mr(keys.lkey).unwrap();
    drop(region);
}
