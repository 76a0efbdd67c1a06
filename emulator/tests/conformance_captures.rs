//! Every RoCEv2 packet of every kernel-rxe capture in the conformance folder parses, has a
//! correct ICRC, and emits back to the identical bytes; counts match the folder's README.

mod conformance_dir;
use conformance_dir::conformance_dir;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use softverbs_emu::net::pcap::read_capture;
use softverbs_emu::transport::NetHeader;
use softverbs_emu::wire::{
    flow_label_udp_src_port, parse_frame, rc_udp_src_port, solve_ipv4_identification,
    ud_udp_src_port, verify_icrc, write_icrc, IcrcContext, IpHeaderInfo, Opcode, RoceRepr,
    Transport,
};

fn pcaps(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read conformance dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no captures in {}", dir.display());
    files
}

/// What the README says about one capture.
#[derive(Default, Debug)]
struct Expected {
    roce: usize,
    icrc_ok: usize,
    /// BTH opcode -> packet count.
    opcodes: BTreeMap<u8, usize>,
    /// AETH syndrome -> count.
    syndromes: BTreeMap<u8, usize>,
}

/// Reads the "### file.pcap" sections of the README: the `roce=N icrc_ok=N` summary, the
/// "count opcode name" lines and the "NxSYN" syndrome counts.
fn readme_expectations(dir: &Path) -> HashMap<String, Expected> {
    let text = std::fs::read_to_string(dir.join("README.md")).expect("README");
    let mut out: HashMap<String, Expected> = HashMap::new();
    let mut current: Option<String> = None;
    let mut in_opcodes = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            current = Some(name.trim().to_string());
            out.entry(name.trim().to_string()).or_default();
            in_opcodes = false;
            continue;
        }
        let Some(name) = &current else { continue };
        let e = out.get_mut(name).expect("entry");
        if line.contains("roce=") {
            for word in line.split([' ', ',']) {
                if let Some(v) = word.strip_prefix("roce=") {
                    e.roce = v.parse().expect("roce=N");
                }
                if let Some(v) = word.strip_prefix("icrc_ok=") {
                    e.icrc_ok = v.parse().expect("icrc_ok=N");
                }
            }
        } else if line.starts_with("BTH opcodes") {
            in_opcodes = true;
        } else if let Some(rest) = line.strip_prefix("AETH syndromes (count x value):") {
            in_opcodes = false;
            for item in rest.split('[').next().unwrap_or("").split_whitespace() {
                let (count, syn) = item.split_once("x0x").expect("NxSYN");
                *e.syndromes
                    .entry(u8::from_str_radix(syn, 16).expect("hex"))
                    .or_default() += count.parse::<usize>().expect("count");
            }
        } else if in_opcodes {
            let mut words = line.split_whitespace();
            match (
                words.next().map(str::parse::<usize>),
                words.next().map(str::parse::<u8>),
            ) {
                (Some(Ok(count)), Some(Ok(op))) => *e.opcodes.entry(op).or_default() += count,
                _ => in_opcodes = false,
            }
        }
    }
    out
}

/// One RoCE packet of a capture, owned.
struct Packet {
    frame_no: usize,
    ctx: IcrcContext,
    bytes: Vec<u8>,
}

fn roce_packets(path: &Path) -> Vec<Packet> {
    let frames = read_capture(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let link = f.link_type().expect("supported link type");
        match parse_frame(link, &f.data) {
            Ok(Some(rf)) => out.push(Packet {
                frame_no: i + 1,
                ctx: rf.ctx,
                bytes: rf.udp_payload.to_vec(),
            }),
            Ok(None) => {}
            Err(e) => panic!("{} frame {}: {e}", path.display(), i + 1),
        }
    }
    out
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

fn ips(ctx: &IcrcContext) -> (IpAddr, IpAddr) {
    match ctx.ip {
        IpHeaderInfo::V4 { src, dst, .. } => (src.into(), dst.into()),
        IpHeaderInfo::V6 { src, dst } => (src.into(), dst.into()),
    }
}

#[test]
fn every_packet_parses_verifies_and_roundtrips() {
    let dir = conformance_dir();
    let expected = readme_expectations(&dir);
    let mut total = 0;
    for path in pcaps(&dir) {
        let name = name_of(&path);
        let exp = expected
            .get(&name)
            .unwrap_or_else(|| panic!("{name} has no README section"));
        let packets = roce_packets(&path);
        let mut opcodes: BTreeMap<u8, usize> = BTreeMap::new();
        let mut syndromes: BTreeMap<u8, usize> = BTreeMap::new();
        let mut icrc_ok = 0;
        for p in &packets {
            let what = format!("{name} frame {}", p.frame_no);
            let (repr, stored) =
                RoceRepr::parse(&p.bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                verify_icrc(&p.ctx, &p.bytes),
                "{what}: bad ICRC 0x{stored:08x}"
            );
            icrc_ok += 1;
            // Into a buffer full of garbage, as recycled packet buffers are (the packet pool
            // does not zero them): emit must write every byte itself.
            let mut again = vec![0xA5u8; repr.buffer_len()];
            repr.emit(&mut again)
                .unwrap_or_else(|e| panic!("{what}: emit: {e}"));
            write_icrc(&p.ctx, &mut again);
            assert_eq!(again, p.bytes, "{what}: emit differs ({repr})");
            assert!(
                repr.to_string().starts_with(repr.bth.opcode.name()),
                "{what}"
            );
            *opcodes.entry(repr.bth.opcode.0).or_default() += 1;
            if let Some(a) = repr.aeth {
                *syndromes.entry(a.syndrome).or_default() += 1;
            }
        }
        assert_eq!(packets.len(), exp.roce, "{name}: RoCE packet count");
        assert_eq!(icrc_ok, exp.icrc_ok, "{name}: good ICRCs");
        assert_eq!(opcodes, exp.opcodes, "{name}: opcode counts");
        assert_eq!(syndromes, exp.syndromes, "{name}: AETH syndrome counts");
        total += packets.len();
    }
    eprintln!("{total} RoCE packets parsed, verified and re-emitted byte-exact");
    assert!(total >= 500, "suspiciously few packets: {total}");
}

#[test]
fn ipv4_identification_is_recovered_from_the_icrc() {
    let dir = conformance_dir();
    let mut solved = 0;
    for path in pcaps(&dir) {
        for p in roce_packets(&path) {
            let IpHeaderInfo::V4 { src, dst, .. } = p.ctx.ip else {
                continue;
            };
            let got = solve_ipv4_identification(
                src,
                dst,
                p.ctx.udp_src_port,
                p.ctx.udp_dst_port,
                &p.bytes,
            );
            assert_eq!(
                got,
                Some(p.ctx.ip),
                "{} frame {}",
                name_of(&path),
                p.frame_no
            );
            solved += 1;
        }
    }
    eprintln!("{solved} IPv4 identifications recovered");
    assert!(solved >= 500);
}

/// Every single corrupted byte (each position of each packet, a pseudo-random flip) fails
/// the full ICRC check; the ID-less check (16 bits of residual strength, see wire::icrc)
/// accepts about 2^-15 of them. BTH byte 4 is masked out of the ICRC by design.
#[test]
fn corrupted_bytes_are_rejected() {
    let dir = conformance_dir();
    let (mut trials, mut accepted_without_id) = (0u64, 0u64);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for path in pcaps(&dir) {
        for p in roce_packets(&path) {
            let mut bad = p.bytes.clone();
            for pos in (0..p.bytes.len()).filter(|&i| i != 4) {
                // xorshift: a deterministic nonzero flip pattern per position.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let flip = (seed as u8) | 1;
                bad[pos] ^= flip;
                assert!(
                    !verify_icrc(&p.ctx, &bad),
                    "{} frame {} byte {pos}",
                    name_of(&path),
                    p.frame_no
                );
                if let IpHeaderInfo::V4 { src, dst, .. } = p.ctx.ip {
                    trials += 1;
                    if solve_ipv4_identification(
                        src,
                        dst,
                        p.ctx.udp_src_port,
                        p.ctx.udp_dst_port,
                        &bad,
                    )
                    .is_some()
                    {
                        accepted_without_id += 1;
                    }
                }
                bad[pos] ^= flip;
            }
            // Masked byte: FECN/BECN may be set in flight without breaking the ICRC.
            bad[4] = 0xc0;
            assert!(verify_icrc(&p.ctx, &bad));
        }
    }
    let expected = trials as f64 / 32768.0;
    eprintln!(
        "ID-less ICRC check: {accepted_without_id} of {trials} single-byte corruptions of IPv4 packets accepted \
         (2^-15 each would be {expected:.1})"
    );
    assert!(trials > 100_000, "{trials}");
    // Far above the expectation would mean the solver accepts what it should not.
    assert!(
        (accepted_without_id as f64) < 4.0 * expected + 10.0,
        "{accepted_without_id} of {trials}"
    );
}

/// What a CM MAD (UD SEND to QP1) says about a connection being set up.
enum CmMessage {
    /// ConnectRequest: communication ID, requester QPN, primary path flow label.
    Request {
        comm_id: u32,
        qpn: u32,
        flow_label: u32,
    },
    /// ConnectReply: the requester's communication ID and the responder QPN.
    Reply { requester_comm_id: u32, qpn: u32 },
}

/// Decodes the CM messages we need. Offsets from the IBTA CM layouts: MAD header 24 bytes;
/// REQ: local comm ID at 0, local QPN at 32, primary flow label in the top 20 bits of the
/// word at 88; REP: remote comm ID at 4, local QPN at 12.
fn cm_message(repr: &RoceRepr<'_>) -> Option<CmMessage> {
    const MAD_HEADER: usize = 24;
    let mad = repr.payload;
    if repr.bth.opcode != Opcode::UD_SEND_ONLY
        || repr.bth.dest_qp != 1
        || mad.len() < MAD_HEADER + 92
    {
        return None;
    }
    let m = &mad[MAD_HEADER..];
    let u32_at = |at: usize| u32::from_be_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]]);
    match u16::from_be_bytes([mad[16], mad[17]]) {
        0x0010 => Some(CmMessage::Request {
            comm_id: u32_at(0),
            qpn: u32_at(32) >> 8,
            flow_label: u32_at(88) >> 12,
        }),
        0x0013 => Some(CmMessage::Reply {
            requester_comm_id: u32_at(4),
            qpn: u32_at(12) >> 8,
        }),
        _ => None,
    }
}

/// (requester QPN, responder QPN, flow label) of every connection RDMA CM set up.
fn cm_connections(reprs: &[RoceRepr<'_>]) -> Vec<(u32, u32, u32)> {
    let mut requests = HashMap::new();
    let mut replies = Vec::new();
    for r in reprs {
        match cm_message(r) {
            Some(CmMessage::Request {
                comm_id,
                qpn,
                flow_label,
            }) => {
                requests.insert(comm_id, (qpn, flow_label));
            }
            Some(CmMessage::Reply {
                requester_comm_id,
                qpn,
            }) => replies.push((requester_comm_id, qpn)),
            None => {}
        }
    }
    replies
        .into_iter()
        .filter_map(|(id, rqpn)| requests.get(&id).map(|&(lqpn, fl)| (lqpn, rqpn, fl)))
        .collect()
}

/// UDP source ports follow rxe's formulas: RC/UC from both QPNs (the sender's QPN is a
/// destination QP of the reverse direction) unless RDMA CM gave the connection a flow label
/// (then from that label); UD/CM from the DETH source QP.
#[test]
fn udp_source_ports_follow_rxe() {
    let dir = conformance_dir();
    let (mut by_qpns, mut by_cm_flow_label, mut ud, mut one_way_uc) = (0, 0, 0, 0);
    for path in pcaps(&dir) {
        let packets = roce_packets(&path);
        // (src ip, dst ip) -> destination QPs seen in that direction.
        let mut dest_qps: HashMap<(IpAddr, IpAddr), BTreeSet<u32>> = HashMap::new();
        let reprs: Vec<RoceRepr<'_>> = packets
            .iter()
            .map(|p| RoceRepr::parse(&p.bytes).expect("parses").0)
            .collect();
        for (p, repr) in packets.iter().zip(&reprs) {
            dest_qps
                .entry(ips(&p.ctx))
                .or_default()
                .insert(repr.bth.dest_qp);
        }
        let cm = cm_connections(&reprs);
        for (p, repr) in packets.iter().zip(&reprs) {
            let what = format!("{} frame {}", name_of(&path), p.frame_no);
            let port = p.ctx.udp_src_port;
            match repr.bth.opcode.info().map(|i| i.transport) {
                Some(Transport::Ud) => {
                    let deth = repr.deth.expect("UD has DETH");
                    assert_eq!(port, ud_udp_src_port(deth.src_qp), "{what}");
                    ud += 1;
                }
                Some(Transport::Rc | Transport::Uc) => {
                    let (src, dst) = ips(&p.ctx);
                    let dqp = repr.bth.dest_qp;
                    let Some(peers) = dest_qps.get(&(dst, src)) else {
                        // UC sent one way only: the sender's QPN never shows, so the
                        // port cannot be recomputed (RC always has its ACKs back).
                        assert_eq!(
                            repr.bth.opcode.info().map(|i| i.transport),
                            Some(Transport::Uc),
                            "{what}: no reverse traffic"
                        );
                        one_way_uc += 1;
                        continue;
                    };
                    if let Some(&(_, _, fl)) = cm.iter().find(|&&(l, r, _)| dqp == l || dqp == r) {
                        assert_eq!(
                            port,
                            flow_label_udp_src_port(fl),
                            "{what}: CM flow label 0x{fl:x}"
                        );
                        by_cm_flow_label += 1;
                    } else {
                        assert!(
                            peers.iter().any(|&q| rc_udp_src_port(q, dqp) == port),
                            "{what}: port {port} for dest QP 0x{dqp:x}, peers {peers:x?}"
                        );
                        by_qpns += 1;
                    }
                }
                other => panic!("{what}: unexpected transport {other:?}"),
            }
        }
    }
    eprintln!(
        "UDP source ports: {by_qpns} from QPNs, {by_cm_flow_label} from CM flow labels, {ud} UD \
         ({one_way_uc} one-way UC packets not checkable)"
    );
    assert!(by_qpns >= 400 && by_cm_flow_label >= 60 && ud >= 20);
}

/// What a UD receive writes into its GRH area is, for an IPv4 sender, 20 zero bytes and then
/// exactly the IPv4 header the datagram carried (rxe copies `ip_hdr(skb)`): rebuilt from the
/// header's fields, it must give the captured header bytes back, checksum included.
#[test]
fn ud_grh_area_reproduces_the_captured_ipv4_headers() {
    let path = conformance_dir().join("ud_pingpong_mtu1500.pcap");
    let frames = read_capture(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut checked = 0;
    for f in &frames {
        let link = f.link_type().expect("supported link type");
        let Ok(Some(rf)) = parse_frame(link, &f.data) else {
            continue;
        };
        let Ok((repr, _)) = RoceRepr::parse(rf.udp_payload) else {
            continue;
        };
        if repr.deth.is_none() || repr.bth.dest_qp == 1 {
            continue; // only UD data, not CM MADs on QP1
        }
        // The IPv4 header sits right before the 8-byte UDP header of the payload.
        let payload_at = rf.udp_payload.as_ptr() as usize - f.data.as_ptr() as usize;
        let ip_bytes = &f.data[payload_at - 8 - 20..payload_at - 8];
        let ip = etherparse::Ipv4HeaderSlice::from_slice(ip_bytes).expect("IPv4 header");
        let header = NetHeader {
            src: IpAddr::from(ip.source_addr()),
            dst: IpAddr::from(ip.destination_addr()),
            hop_limit: ip.ttl(),
            traffic_class: (ip.dcp().value() << 2) | ip.ecn().value(),
            ipv4_identification: ip.identification(),
            flow_label: 0,
            udp_payload_len: rf.udp_payload.len(),
        };
        let grh = header.grh_bytes();
        assert_eq!(&grh[..20], &[0u8; 20]);
        assert_eq!(&grh[20..], ip_bytes, "frame {}", checked + 1);
        checked += 1;
    }
    assert!(checked >= 2, "only {checked} UD packets in the capture");
}

/// Kernel rxe's address in the lab's captures (`lab_*.pcap`, made by `softverbs rxe-lab
/// capture`; softverbs is 10.77.0.1).
const LAB_RXE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 77, 0, 2));

/// The lab's captures hold, sent by kernel rxe itself, every opcode the lab's scenarios make
/// it send (every RC/UC/UD request and response form, atomics, SEND with invalidate) and
/// every AETH it answers with (ACK, RNR NAK, NAK PSN sequence error, NAK remote access),
/// all of which the test above parses and re-emits byte-exact.
#[test]
fn lab_captures_hold_every_opcode_rxe_sends_in_the_lab() {
    let dir = conformance_dir();
    let lab: Vec<PathBuf> = pcaps(&dir)
        .into_iter()
        .filter(|p| name_of(p).starts_with("lab_"))
        .collect();
    if lab.is_empty() && std::env::var_os("SOFTVERBS_CONFORMANCE_DIR").is_some() {
        return; // another folder of captures, without the lab's
    }
    let (mut opcodes, mut syndromes) = (BTreeSet::new(), BTreeSet::new());
    for path in &lab {
        for p in roce_packets(path) {
            if ips(&p.ctx).0 != LAB_RXE {
                continue;
            }
            let (repr, _) = RoceRepr::parse(&p.bytes).expect("parses");
            opcodes.insert(repr.bth.opcode.0);
            if let Some(a) = repr.aeth {
                // NAKs by code; every ACK and every RNR NAK timer as one class each.
                syndromes.insert(match a.syndrome >> 5 {
                    0 => 0x1f,
                    1 => 0x20,
                    _ => a.syndrome,
                });
            }
        }
    }
    let rc = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 23,
    ];
    let uc = [32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43];
    let ud = [100, 101];
    let missing: Vec<String> = rc
        .iter()
        .chain(&uc)
        .chain(&ud)
        .filter(|op| !opcodes.contains(op))
        .map(|&op| format!("{op} {}", Opcode(op).name()))
        .collect();
    assert!(
        missing.is_empty(),
        "rxe never sends {missing:?} in {} lab captures",
        lab.len()
    );
    // ACK, RNR NAK, NAK PSN sequence error, NAK remote access error.
    for syndrome in [0x1f, 0x20, 0x60, 0x62] {
        assert!(
            syndromes.contains(&syndrome),
            "no AETH 0x{syndrome:02x} from rxe: {syndromes:x?}"
        );
    }
}
