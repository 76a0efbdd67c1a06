//! Every CM MAD of the kernel rdma_cm capture (perftest -R on rxe) parses, carries what the
//! perftest logs and the data packets say, and emits back to the identical bytes. Also
//! builds a REQ from scratch, round-trips random MADs and feeds truncated and garbage input.

mod conformance_dir;
use conformance_dir::conformance_dir;
use std::collections::BTreeMap;
use std::net::IpAddr;

use proptest::prelude::*;
use softverbs_emu::cm::{AcceptParams, CmConfig, CmEventKind, CmManager, CmOutput, QpRequest};
use softverbs_emu::net::pcap::read_capture;
use softverbs_emu::wire::cm::{
    attr, ip_service_id, method, parse_ip_service_id, roce_flow_label, CmMad, CmMessage, CmaHdr,
    MadError, MadHeaderRepr, PortSpace, ReqRepr, CMA_HDR_LEN, GSI_QKEY, GSI_QPN, MAD_LEN,
};
use softverbs_emu::wire::{parse_frame, IpHeaderInfo, Opcode, RoceRepr};

const CAPTURE: &str = "ib_send_lat_rdmacm_mtu1500.pcap";

/// One RoCE packet of the capture: frame number, source and destination IP, UDP payload.
struct Captured {
    frame_no: usize,
    src: IpAddr,
    dst: IpAddr,
    udp_payload: Vec<u8>,
}

fn captured() -> Vec<Captured> {
    captured_in(CAPTURE)
}

fn captured_in(file: &str) -> Vec<Captured> {
    let path = conformance_dir().join(file);
    let frames = read_capture(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let link = f.link_type().expect("supported link type");
        if let Some(rf) = parse_frame(link, &f.data).expect("frame parses") {
            let (src, dst) = match rf.ctx.ip {
                IpHeaderInfo::V4 { src, dst, .. } => (src.into(), dst.into()),
                IpHeaderInfo::V6 { src, dst } => (src.into(), dst.into()),
            };
            out.push(Captured {
                frame_no: i + 1,
                src,
                dst,
                udp_payload: rf.udp_payload.to_vec(),
            });
        }
    }
    out
}

/// (frame, source IP, destination IP, MAD bytes) of every UD SEND to QP1 with the GSI Q_Key.
fn cm_mads() -> Vec<(usize, IpAddr, IpAddr, Vec<u8>)> {
    cm_mads_in(CAPTURE)
}

fn cm_mads_in(file: &str) -> Vec<(usize, IpAddr, IpAddr, Vec<u8>)> {
    let mut out = Vec::new();
    for c in captured_in(file) {
        let (roce, _) = RoceRepr::parse(&c.udp_payload).expect("RoCE parses");
        if roce.bth.opcode == Opcode::UD_SEND_ONLY && roce.bth.dest_qp == GSI_QPN {
            let deth = roce.deth.expect("UD carries a DETH");
            assert_eq!(deth.qkey, GSI_QKEY, "frame {}", c.frame_no);
            assert_eq!(deth.src_qp, GSI_QPN, "frame {}", c.frame_no);
            out.push((c.frame_no, c.src, c.dst, roce.payload.to_vec()));
        }
    }
    out
}

/// "N 100\tCM: Name" lines of the capture's README section: Wireshark name -> count.
fn readme_cm_counts() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(conformance_dir().join("README.md")).expect("README");
    let section = text
        .split("### ")
        .find(|s| s.starts_with(CAPTURE))
        .expect("README section of the capture");
    let mut out = BTreeMap::new();
    for line in section.lines() {
        if let Some((count, name)) = line.split_once("CM: ").map(|(l, n)| (l, n.trim())) {
            let count: usize = count.split_whitespace().next().unwrap().parse().unwrap();
            *out.entry(name.to_string()).or_default() += count;
        }
    }
    out
}

fn wireshark_name(m: &CmMessage) -> &'static str {
    match m {
        CmMessage::Req(_) => "ConnectRequest",
        CmMessage::Rep(_) => "ConnectReply",
        CmMessage::Rtu(_) => "ReadyToUse",
        CmMessage::Dreq(_) => "DisconnectRequest",
        CmMessage::Drep(_) => "DisconnectReply",
        CmMessage::Rej(_) => "ConnectReject",
        CmMessage::Mra(_) => "MsgRcptAck",
        CmMessage::SidrReq(_) => "SIDR_REQ",
        CmMessage::SidrRep(_) => "SIDR_REP",
        CmMessage::ClassPortInfo(_) => "ClassPortInfo",
    }
}

#[test]
fn every_cm_mad_parses_and_reemits_byte_exact() {
    let mads = cm_mads();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for (frame, _, _, bytes) in &mads {
        assert_eq!(bytes.len(), MAD_LEN, "frame {frame}");
        let mad = CmMad::parse(bytes).unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        assert_eq!(mad.header.method, method::SEND);
        assert_eq!(mad.to_bytes().as_slice(), bytes.as_slice(), "frame {frame}");
        *kinds
            .entry(wireshark_name(&mad.message).to_string())
            .or_default() += 1;
    }
    assert_eq!(kinds, readme_cm_counts());
    assert_eq!(mads.len(), 10);
}

/// The lab's own CM captures (`softverbs rxe-lab capture`: kernel rxe's rdma_cm, as rping
/// sends it, facing softverbs): every MAD parses and emits back byte-exact, and kernel rxe
/// (10.77.0.2) sent at least one ConnectRequest for rping's port.
#[test]
fn lab_cm_captures_parse_and_reemit_byte_exact() {
    let dir = conformance_dir();
    let files: Vec<String> = std::fs::read_dir(&dir)
        .expect("conformance dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("lab_cm_") && n.ends_with(".pcap"))
        .collect();
    if files.is_empty() && std::env::var_os("SOFTVERBS_CONFORMANCE_DIR").is_some() {
        return; // another folder of captures, without the lab's
    }
    assert!(!files.is_empty(), "no lab_cm_*.pcap in {}", dir.display());
    for file in files {
        let mut requests = 0;
        for (frame, src, _, bytes) in cm_mads_in(&file) {
            let mad = CmMad::parse(&bytes).unwrap_or_else(|e| panic!("{file} frame {frame}: {e}"));
            assert_eq!(
                mad.to_bytes().as_slice(),
                bytes.as_slice(),
                "{file} frame {frame}"
            );
            if let CmMessage::Req(req) = &mad.message {
                if src == IpAddr::from([10, 77, 0, 2]) {
                    // rping's default port, and the address it was told to connect to.
                    assert_eq!(
                        parse_ip_service_id(req.service_id),
                        Some((PortSpace::Tcp, 7174)),
                        "{file} frame {frame}"
                    );
                    let private = CmaHdr::parse(&req.private_data).expect("rdma_cm header");
                    assert_eq!(private.dst_addr, IpAddr::from([10, 77, 0, 1]));
                    requests += 1;
                }
            }
        }
        assert!(requests > 0, "{file}: no ConnectRequest from kernel rxe");
    }
}

/// Reads "local address: ... QPN 0x002e" from a perftest log.
fn log_local_qpn(side: &str) -> u32 {
    let path = conformance_dir().join(format!("logs/ib_send_lat_rdmacm_mtu1500.{side}.txt"));
    let text = std::fs::read_to_string(&path).expect("log");
    let line = text
        .lines()
        .find(|l| l.contains("local address:"))
        .expect("local address line");
    let hex = line
        .split("QPN 0x")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next();
    u32::from_str_radix(hex.unwrap(), 16).unwrap()
}

fn mapped_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// PSN of the first RC SEND ONLY to `qpn`, if any.
fn first_send_psn(qpn: u32) -> Option<u32> {
    captured().iter().find_map(|c| {
        let (r, _) = RoceRepr::parse(&c.udp_payload).ok()?;
        (r.bth.opcode == Opcode::RC_SEND_ONLY && r.bth.dest_qp == qpn).then_some(r.bth.psn.value())
    })
}

#[test]
fn decoded_fields_match_the_logs_and_the_data_packets() {
    let mads: Vec<(IpAddr, IpAddr, CmMad)> = cm_mads()
        .into_iter()
        .map(|(_, s, d, b)| (s, d, CmMad::parse(&b).unwrap()))
        .collect();
    let reqs: Vec<_> = mads
        .iter()
        .filter_map(|(s, d, m)| match &m.message {
            CmMessage::Req(r) => Some((*s, *d, m.header.transaction_id, r.clone())),
            _ => None,
        })
        .collect();
    let mut psns_checked = 0;
    let mut log_connection_seen = false;
    for (src, dst, tid, req) in &reqs {
        // rdma_cm's service ID and private-data header: perftest's default port 18515.
        assert_eq!(
            parse_ip_service_id(req.service_id),
            Some((PortSpace::Tcp, 18515))
        );
        let hdr = CmaHdr::parse(&req.private_data).unwrap();
        assert_eq!((hdr.src_addr, hdr.dst_addr), (*src, *dst));
        assert!(req.private_data[CMA_HDR_LEN..].iter().all(|&b| b == 0));
        // rdma_cm's RoCE flow label: a hash of the two ports.
        assert_eq!(req.primary_flow_label, roce_flow_label(hdr.src_port, 18515));
        // RoCE: permissive LIDs, GIDs are the (mapped) IP addresses.
        assert_eq!(
            (req.primary_local_lid, req.primary_remote_lid),
            (0xffff, 0xffff)
        );
        assert_eq!(req.primary_local_gid, mapped_gid(*src));
        assert_eq!(req.primary_remote_gid, mapped_gid(*dst));
        // rdma_cm's defaults: 20 for both CM timeouts, 15 CM retries; perftest: 7/7, MTU 1024.
        assert_eq!(req.remote_cm_response_timeout, 20);
        assert_eq!(req.local_cm_response_timeout, 20);
        assert_eq!(req.max_cm_retries, 15);
        assert_eq!((req.retry_count, req.rnr_retry_count), (7, 7));
        assert_eq!(req.path_mtu, 3);
        assert_eq!(req.transport_service_type, 0);
        assert_eq!(req.pkey, 0xffff);
        // The REP answers this REQ with the same transaction ID; the RTU closes it.
        let rep = mads
            .iter()
            .find_map(|(_, _, m)| match &m.message {
                CmMessage::Rep(r) if r.remote_comm_id == req.local_comm_id => {
                    assert_eq!(m.header.transaction_id, *tid);
                    Some(r.clone())
                }
                _ => None,
            })
            .expect("a REP for every REQ");
        assert!(mads.iter().any(|(_, _, m)| matches!(&m.message,
            CmMessage::Rtu(r) if r.local_comm_id == req.local_comm_id
                && r.remote_comm_id == rep.local_comm_id
                && m.header.transaction_id == *tid)));
        // Disconnect names the peer's QPN.
        for (_, _, m) in &mads {
            if let CmMessage::Dreq(d) = &m.message {
                if d.local_comm_id == req.local_comm_id {
                    assert_eq!(d.remote_qpn_eecn, rep.local_qpn);
                }
                if d.local_comm_id == rep.local_comm_id {
                    assert_eq!(d.remote_qpn_eecn, req.local_qpn);
                }
            }
        }
        if req.local_qpn == log_local_qpn("cli") {
            assert_eq!(rep.local_qpn, log_local_qpn("srv"));
            log_connection_seen = true;
        }
        // Starting PSNs are the PSNs of the first data packets each way, crossed as the
        // kernel uses them: a REQ's starting PSN is what the passive side sends with (the
        // active side's rq_psn), a REP's is what the active side sends with.
        if let Some(psn) = first_send_psn(rep.local_qpn) {
            assert_eq!(psn, rep.starting_psn);
            psns_checked += 1;
        }
        if let Some(psn) = first_send_psn(req.local_qpn) {
            assert_eq!(psn, req.starting_psn);
            psns_checked += 1;
        }
    }
    assert_eq!(reqs.len(), 2);
    assert!(log_connection_seen, "the logged connection's REQ/REP");
    assert!(psns_checked >= 2, "starting PSNs checked against data");
}

/// The kernel's REQ, fed to our listener, is understood as rdma_cm would: the event carries
/// its header and QP, and accepting answers with a REP that echoes its IDs and asks for the
/// QP attributes the kernel's passive side would use.
#[test]
fn a_kernel_req_is_accepted_by_our_listener() {
    let (_, src, dst, bytes) = cm_mads().into_iter().nth(3).expect("second REQ");
    let CmMessage::Req(req) = CmMad::parse(&bytes).unwrap().message else {
        panic!("frame 24 is a REQ");
    };
    let mut cm = CmManager::new(CmConfig::new(dst, 0x5054_00ff_fe77_0001, 1));
    cm.listen(PortSpace::Tcp, 18515).unwrap();
    cm.handle_mad(0, src, &bytes).unwrap();
    let Some(CmOutput::Event(ev)) = cm.poll_output() else {
        panic!("a CONNECT_REQUEST event");
    };
    match &ev.kind {
        CmEventKind::ConnectRequest {
            cma, remote_qpn, ..
        } => {
            assert_eq!((cma.src_addr, cma.src_port), (src, 0xc1b2));
            assert_eq!(*remote_qpn, 0x2e);
        }
        other => panic!("{other:?}"),
    }
    let accept = AcceptParams {
        qpn: 0x32,
        responder_resources: 0,
        initiator_depth: 0,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
        qp_ack_timeout: None,
        manual_qp: false,
    };
    cm.accept(0, ev.id, &accept).unwrap();
    let outs: Vec<CmOutput> = std::iter::from_fn(|| cm.poll_output()).collect();
    match &outs[..] {
        [CmOutput::ModifyQp(QpRequest::Rtr {
            qpn: 0x32,
            attrs: rtr,
        }), CmOutput::ModifyQp(QpRequest::Rts { attrs: rts, .. }), CmOutput::SendMad { to, mad }] =>
        {
            assert_eq!(*to, src);
            assert_eq!(
                (rtr.dest_qpn, rtr.path_mtu, rtr.flow_label),
                (0x2e, 3, 0x7bce1)
            );
            assert_eq!(rts.sq_psn, req.starting_psn);
            assert_eq!((rts.timeout, rts.retry_cnt, rts.rnr_retry), (19, 7, 7));
            let rep = CmMad::parse(&mad[..]).unwrap();
            assert_eq!(rep.header.transaction_id, 0x0000_0002_c931_40c3);
            let CmMessage::Rep(rep) = rep.message else {
                panic!("a REP");
            };
            assert_eq!(
                (rep.remote_comm_id, rep.local_qpn),
                (req.local_comm_id, 0x32)
            );
            assert_eq!((rep.target_ack_delay, rep.rnr_retry_count), (15, 7));
            assert_eq!(rtr.rq_psn, rep.starting_psn);
        }
        other => panic!("{other:?}"),
    }
}

/// A REQ as rdma_cm would build it for 10.0.0.2:4000 -> 10.0.0.1:7471.
fn scratch_req() -> CmMad {
    let mut req = ReqRepr {
        local_comm_id: 0x1234_5678,
        service_id: ip_service_id(PortSpace::Tcp, 7471),
        local_ca_guid: 0x0200_00ff_fe00_0002,
        local_qpn: 0x11,
        responder_resources: 4,
        initiator_depth: 4,
        remote_cm_response_timeout: 20,
        starting_psn: 0xabcdef,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 5,
        rnr_retry_count: 6,
        max_cm_retries: 15,
        primary_local_lid: 0xffff,
        primary_remote_lid: 0xffff,
        primary_flow_label: 0x12345,
        primary_hop_limit: 64,
        primary_local_ack_timeout: 19,
        ..ReqRepr::default()
    };
    req.primary_local_gid = mapped_gid("10.0.0.2".parse().unwrap());
    req.primary_remote_gid = mapped_gid("10.0.0.1".parse().unwrap());
    CmaHdr {
        src_port: 4000,
        src_addr: "10.0.0.2".parse().unwrap(),
        dst_addr: "10.0.0.1".parse().unwrap(),
    }
    .emit(&mut req.private_data)
    .unwrap();
    req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + 5].copy_from_slice(b"hello");
    CmMad::send(0x42, CmMessage::Req(req))
}

#[test]
fn req_built_from_scratch_parses_back_equal() {
    let mad = scratch_req();
    let bytes = mad.to_bytes();
    assert_eq!(&bytes[..4], &[1, 0x07, 2, 3]);
    assert_eq!(&bytes[16..18], &[0x00, 0x10]);
    // Local QPN 0x11 then responder resources 4 at data offset 32.
    assert_eq!(&bytes[24 + 32..24 + 36], &[0, 0, 0x11, 4]);
    assert_eq!(CmMad::parse(&bytes).unwrap(), mad);
}

#[test]
fn truncated_oversized_and_garbage_mads_are_typed_errors() {
    for (frame, _, _, bytes) in cm_mads() {
        for len in 0..MAD_LEN {
            assert_eq!(
                CmMad::parse(&bytes[..len]),
                Err(MadError::Truncated {
                    needed: MAD_LEN,
                    got: len
                }),
                "frame {frame} cut to {len}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(CmMad::parse(&long), Err(MadError::BadLength(257)));
    }
    let good = scratch_req().to_bytes();
    let mut b = good;
    b[1] = 0x04;
    assert_eq!(CmMad::parse(&b), Err(MadError::NotCm(4)));
    let mut b = good;
    b[2] = 1;
    assert_eq!(CmMad::parse(&b), Err(MadError::BadClassVersion(1)));
    let mut b = good;
    b[3] = method::GET;
    assert!(matches!(CmMad::parse(&b), Err(MadError::BadMethod { .. })));
    let mut b = good;
    b[16..18].copy_from_slice(&attr::LAP.to_be_bytes());
    assert_eq!(
        CmMad::parse(&b),
        Err(MadError::UnsupportedAttribute(attr::LAP))
    );
    assert!(CmMad::parse(&[0xff; MAD_LEN]).is_err());
    let mut small = [0u8; 10];
    assert!(scratch_req().emit(&mut small).is_err());
}

const ATTRS: [u16; 9] = [
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any data under a valid CM header parses; emitting gives bytes that parse to the same
    /// value (only reserved bits may change), and a second emit is identical.
    #[test]
    fn random_mads_round_trip(data in proptest::collection::vec(any::<u8>(), 232), which in 0usize..9, tid in any::<u64>()) {
        let header = MadHeaderRepr::cm_send(ATTRS[which], tid);
        let mut mad = [0u8; MAD_LEN];
        header.emit(&mut softverbs_emu::wire::cm::MadHeaderPacket::new_checked(&mut mad[..]).unwrap());
        mad[24..].copy_from_slice(&data);
        let parsed = CmMad::parse(&mad).unwrap();
        let out = parsed.to_bytes();
        let reparsed = CmMad::parse(&out).unwrap();
        prop_assert_eq!(&reparsed, &parsed);
        prop_assert_eq!(reparsed.to_bytes(), out);
        prop_assert_eq!(parsed.message.attribute_id(), ATTRS[which]);
    }

    /// Arbitrary bytes of any length never panic.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(m) = CmMad::parse(&bytes) {
            prop_assert_eq!(CmMad::parse(&m.to_bytes()).unwrap(), m);
        }
    }
}
