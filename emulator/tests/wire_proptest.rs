//! Property tests of the RoCE parser: arbitrary and mutated real packets never panic and
//! give the specific typed error; valid reprs survive emit -> parse unchanged.

mod conformance_dir;
use conformance_dir::conformance_dir;
use std::sync::OnceLock;

use proptest::prelude::*;
use softverbs_emu::net::pcap::read_capture;
use softverbs_emu::wire::{
    parse_frame, verify_icrc, write_icrc, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr,
    DethRepr, FethRepr, HeaderSet, IcrcContext, LinkType, Opcode, OpcodeInfo, Psn, RethRepr,
    RoceRepr, WireError, ICRC_LEN,
};

/// (ICRC context, UDP payload) of every RoCE packet in the conformance captures.
fn captured() -> &'static [(IcrcContext, Vec<u8>)] {
    static PACKETS: OnceLock<Vec<(IcrcContext, Vec<u8>)>> = OnceLock::new();
    PACKETS.get_or_init(|| {
        let dir = conformance_dir();
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "pcap") {
                continue;
            }
            for f in read_capture(&path).expect("capture reads") {
                if let Some(rf) = parse_frame(f.link_type().expect("link"), &f.data).expect("frame")
                {
                    out.push((rf.ctx, rf.udp_payload.to_vec()));
                }
            }
        }
        assert!(out.len() > 500, "captures missing in {}", dir.display());
        out
    })
}

fn header_len_of(bytes: &[u8]) -> usize {
    Opcode(bytes[0])
        .info()
        .map(OpcodeInfo::header_len)
        .expect("captured opcodes are known")
}

/// Every byte a successful parse does not keep: BTH reserved bits, the DETH reserved
/// byte, pad bytes and the ICRC. Zeroing them must give exactly what emit writes.
fn canonical(bytes: &[u8], repr: &RoceRepr<'_>) -> Vec<u8> {
    let mut c = bytes.to_vec();
    c[4] &= 0xc0;
    c[8] &= 0x80;
    if let Some(info) = repr.bth.opcode.info() {
        if let Some(at) = info.header_offset(HeaderSet::DETH) {
            c[at + 4] = 0;
        }
    }
    let n = c.len();
    c[n - ICRC_LEN - repr.pad_len()..].fill(0);
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random bytes: no panic; whatever parses is canonical (emit gives the same bytes up
    /// to the fields parse does not keep).
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200), first in any::<u8>()) {
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() {
            *b = first;
        }
        if let Ok((repr, _)) = RoceRepr::parse(&bytes) {
            let _ = repr.to_string();
            let out = repr.to_vec().expect("a parsed repr emits");
            prop_assert_eq!(out, canonical(&bytes, &repr));
        }
    }

    /// Random frames of every link type: the frame parser never panics, and a RoCE frame it
    /// finds lies inside the input.
    #[test]
    fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), ip in any::<bool>()) {
        let mut bytes = bytes;
        // Make IP/UDP/4791 likely enough that the deeper paths run.
        if bytes.len() >= 42 {
            bytes[12..14].copy_from_slice(if ip { &[0x08, 0x00] } else { &[0x86, 0xdd] });
            bytes[14] = if ip { 0x45 } else { 0x60 };
            bytes[23] = 17;
            bytes[36..38].copy_from_slice(&4791u16.to_be_bytes());
        }
        for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
            if let Ok(Some(rf)) = parse_frame(link, &bytes) {
                prop_assert!(rf.udp_payload.len() < bytes.len());
                let _ = RoceRepr::parse(rf.udp_payload);
            }
        }
    }

    /// Truncated real packets: below headers + ICRC it is exactly `Truncated`; otherwise
    /// whatever parses fails the ICRC.
    #[test]
    fn truncation(idx in any::<prop::sample::Index>(), cut in 1usize..1100) {
        let (ctx, p) = &captured()[idx.index(captured().len())];
        let len = p.len().saturating_sub(cut);
        let short = &p[..len];
        let needed = if len < 12 { 12 } else { header_len_of(p) + ICRC_LEN };
        match RoceRepr::parse(short) {
            Err(WireError::Truncated { needed: n, got }) => {
                prop_assert_eq!((n, got), (needed, len));
            }
            other => {
                prop_assert!(len >= needed, "{:?}", other);
                prop_assert!(!verify_icrc(ctx, short));
            }
        }
    }

    /// Flipping bits of any covered byte breaks the ICRC and never panics the parser.
    #[test]
    fn byte_flips_fail_icrc(idx in any::<prop::sample::Index>(), pos in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let (ctx, p) = &captured()[idx.index(captured().len())];
        let mut bad = p.clone();
        let at = pos.index(bad.len());
        bad[at] ^= flip;
        let _ = RoceRepr::parse(&bad);
        if at == 4 {
            // FECN/BECN/reserved: masked out of the ICRC on purpose.
            prop_assert!(verify_icrc(ctx, &bad));
        } else {
            prop_assert!(!verify_icrc(ctx, &bad));
        }
    }

    /// Any other opcode: unknown ones give exactly `UnknownOpcode`, known ones never panic.
    #[test]
    fn opcode_changes(idx in any::<prop::sample::Index>(), op in any::<u8>()) {
        let (_, p) = &captured()[idx.index(captured().len())];
        let mut bad = p.clone();
        bad[0] = op;
        match Opcode(op).info() {
            None => prop_assert_eq!(RoceRepr::parse(&bad).unwrap_err(), WireError::UnknownOpcode(op)),
            Some(_) => {
                let _ = RoceRepr::parse(&bad);
            }
        }
    }

    /// A pad count beyond the bytes after the headers is `BadPadCount`; otherwise a changed
    /// pad count is a length error, or a shorter payload that fails the ICRC.
    #[test]
    fn pad_count_changes(idx in any::<prop::sample::Index>(), delta in 1u8..4) {
        let (ctx, p) = &captured()[idx.index(captured().len())];
        let pad = (((p[1] >> 4) & 3) + delta) % 4;
        let mut bad = p.clone();
        bad[1] = (bad[1] & !0x30) | (pad << 4);
        let available = p.len() - ICRC_LEN - header_len_of(p);
        let info = Opcode(p[0]).info().expect("known");
        match RoceRepr::parse(&bad) {
            Err(WireError::BadPadCount { pad_count, available: a }) => {
                prop_assert!(usize::from(pad) > available);
                prop_assert_eq!((pad_count, a), (pad, available));
            }
            Err(WireError::LengthMismatch { .. }) => prop_assert!(!info.has_payload || info.fixed_payload_len.is_some()),
            Ok((repr, _)) => {
                prop_assert!(usize::from(pad) <= available);
                prop_assert_eq!(repr.payload.len(), available - usize::from(pad));
                prop_assert!(!verify_icrc(ctx, &bad));
            }
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
    }

    /// Extra bytes after a packet: misaligned or on an opcode without (variable) payload it
    /// is a `LengthMismatch`; otherwise the longer packet fails the ICRC.
    #[test]
    fn extension(idx in any::<prop::sample::Index>(), extra in proptest::collection::vec(any::<u8>(), 1..64)) {
        let (ctx, p) = &captured()[idx.index(captured().len())];
        let mut long = p.clone();
        long.extend_from_slice(&extra);
        let info = Opcode(p[0]).info().expect("known");
        let variable_payload = info.has_payload && info.fixed_payload_len.is_none();
        match RoceRepr::parse(&long) {
            Err(WireError::LengthMismatch { .. }) => prop_assert!(extra.len() % 4 != 0 || !variable_payload),
            Ok(_) => {
                prop_assert!(extra.len() % 4 == 0 && variable_payload);
                prop_assert!(!verify_icrc(ctx, &long));
            }
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
    }
}

fn any_opcode_info() -> impl Strategy<Value = &'static OpcodeInfo> {
    let all: Vec<&'static OpcodeInfo> = Opcode::all().collect();
    prop::sample::select(all)
}

prop_compose! {
    fn any_bth(opcode: Opcode)(
        solicited in any::<bool>(), mig_req in any::<bool>(), tver in 0u8..16, pkey in any::<u16>(),
        fecn in any::<bool>(), becn in any::<bool>(), dest_qp in 0u32..1 << 24, ack_req in any::<bool>(),
        psn in 0u32..1 << 24,
    ) -> BthRepr {
        BthRepr { opcode, solicited, mig_req, pad_count: 0, tver, pkey, fecn, becn, dest_qp, ack_req, psn: Psn::new(psn) }
    }
}

/// All extension header values, from which an opcode takes the ones it carries.
#[derive(Debug, Clone)]
struct Headers {
    reth: RethRepr,
    aeth: AethRepr,
    immdt: u32,
    ieth: u32,
    deth: DethRepr,
    atomic_eth: AtomicEthRepr,
    atomic_ack_eth: AtomicAckEthRepr,
    feth: FethRepr,
}

prop_compose! {
    fn any_headers()(
        reth in (any::<u64>(), any::<u32>(), any::<u32>()),
        aeth in (any::<u8>(), 0u32..1 << 24),
        immdt in any::<u32>(), ieth in any::<u32>(),
        deth in (any::<u32>(), 0u32..1 << 24),
        atomic in (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        orig in any::<u64>(), feth in any::<u32>(),
    ) -> Headers {
        Headers {
            reth: RethRepr { va: reth.0, rkey: reth.1, dma_len: reth.2 },
            aeth: AethRepr { syndrome: aeth.0, msn: aeth.1 },
            immdt,
            ieth,
            deth: DethRepr { qkey: deth.0, src_qp: deth.1 },
            atomic_eth: AtomicEthRepr { va: atomic.0, rkey: atomic.1, swap_add: atomic.2, compare: atomic.3 },
            atomic_ack_eth: AtomicAckEthRepr { orig },
            feth: FethRepr { raw: feth },
        }
    }
}

fn any_packet() -> impl Strategy<Value = (BthRepr, Headers, Vec<u8>)> {
    any_opcode_info().prop_flat_map(|info| {
        let payload = match (info.has_payload, info.fixed_payload_len) {
            (false, _) => proptest::collection::vec(any::<u8>(), 0..=0),
            (true, Some(n)) => proptest::collection::vec(any::<u8>(), n..=n),
            (true, None) => proptest::collection::vec(any::<u8>(), 0..300),
        };
        (any_bth(info.opcode), any_headers(), payload)
    })
}

fn build<'a>(bth: BthRepr, h: &Headers, payload: &'a [u8]) -> RoceRepr<'a> {
    let set = bth.opcode.info().expect("known").headers;
    let pick = |flag: HeaderSet| set.contains(flag);
    let mut r = RoceRepr::new(bth, payload);
    r.reth = pick(HeaderSet::RETH).then_some(h.reth);
    r.aeth = pick(HeaderSet::AETH).then_some(h.aeth);
    r.immdt = pick(HeaderSet::IMMDT).then_some(h.immdt);
    r.ieth = pick(HeaderSet::IETH).then_some(h.ieth);
    r.deth = pick(HeaderSet::DETH).then_some(h.deth);
    r.atomic_eth = pick(HeaderSet::ATOMIC_ETH).then_some(h.atomic_eth);
    r.atomic_ack_eth = pick(HeaderSet::ATOMIC_ACK_ETH).then_some(h.atomic_ack_eth);
    r.feth = pick(HeaderSet::FETH).then_some(h.feth);
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any valid repr of any opcode: emit -> parse gives it back (pad count derived), and
    /// the ICRC written for a context verifies under it.
    #[test]
    fn roundtrip((bth, headers, payload) in any_packet()) {
        let mut repr = build(bth, &headers, &payload);
        repr.bth.pad_count = repr.pad_len() as u8;
        let mut bytes = repr.to_vec().expect("valid repr emits");
        prop_assert_eq!(bytes.len(), repr.buffer_len());
        prop_assert_eq!(bytes.len() % 4, 0);
        let (back, icrc) = RoceRepr::parse(&bytes).expect("emitted bytes parse");
        prop_assert_eq!(back, repr);
        prop_assert_eq!(icrc, 0);
        let ctx = captured()[0].0;
        write_icrc(&ctx, &mut bytes);
        prop_assert!(verify_icrc(&ctx, &bytes));
    }

    /// A repr with a header its opcode does not carry (or without one it does) is refused.
    #[test]
    fn wrong_header_set_is_refused((bth, headers, payload) in any_packet(), which in 0usize..8) {
        let mut repr = build(bth, &headers, &payload);
        match which {
            0 => repr.reth = repr.reth.xor(Some(headers.reth)),
            1 => repr.aeth = repr.aeth.xor(Some(headers.aeth)),
            2 => repr.immdt = repr.immdt.xor(Some(headers.immdt)),
            3 => repr.ieth = repr.ieth.xor(Some(headers.ieth)),
            4 => repr.deth = repr.deth.xor(Some(headers.deth)),
            5 => repr.atomic_eth = repr.atomic_eth.xor(Some(headers.atomic_eth)),
            6 => repr.atomic_ack_eth = repr.atomic_ack_eth.xor(Some(headers.atomic_ack_eth)),
            _ => repr.feth = repr.feth.xor(Some(headers.feth)),
        }
        let is_header_mismatch = matches!(repr.validate(), Err(WireError::HeaderMismatch { .. }));
        prop_assert!(is_header_mismatch);
        let mut buf = vec![0u8; repr.buffer_len()];
        prop_assert!(repr.emit(&mut buf).is_err());
    }
}
