//! Target `roundtrip`: a packet that parses emits back to its own bytes, as the conformance
//! test asserts for every captured rxe packet. Arbitrary bytes may set bits the parser
//! ignores (reserved BTH and DETH bits, the pad bytes; rxe ignores them too), which emit
//! writes as zero: everywhere else the bytes must be equal. The re-emitted packet, with its
//! ICRC written, must parse to the same fields and re-emit byte for byte (a fixed point),
//! and its ICRC must verify.

use std::net::Ipv4Addr;

use softverbs_emu::wire::{
    verify_icrc, write_icrc, HeaderSet, IcrcContext, IpHeaderInfo, RoceRepr, BTH_LEN, ICRC_LEN,
};

/// Reserved bits of BTH byte 4 (after FECN and BECN) and byte 8 (after AckReq).
const BTH_RESERVED: [(usize, u8); 2] = [(4, 0x3f), (8, 0x7f)];
/// The reserved byte of the DETH, at this offset in it.
const DETH_RESERVED_AT: usize = 4;

/// Any context will do: the property is about the packet bytes.
const CTX: IcrcContext = IcrcContext {
    ip: IpHeaderInfo::V4 {
        src: Ipv4Addr::new(127, 23, 200, 1),
        dst: Ipv4Addr::new(127, 23, 200, 2),
        identification: 0,
        flags_fragment: 0x4000,
    },
    udp_src_port: 0xc000,
    udp_dst_port: 4791,
};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok((repr, _icrc)) = RoceRepr::parse(data) else {
        return;
    };
    // Emit must write every byte itself, whatever the buffer held.
    let mut again = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut again)
        .unwrap_or_else(|e| panic!("a parsed packet does not emit: {e} ({repr})"));
    assert_eq!(again.len(), data.len(), "length changed ({repr})");
    let ignored = ignored_bits(&repr, data.len());
    for (i, ((&was, &now), &mask)) in data.iter().zip(&again).zip(&ignored).enumerate() {
        assert_eq!(
            was & !mask,
            now & !mask,
            "byte {i} changed from {was:#04x} to {now:#04x} ({repr})"
        );
        assert_eq!(now & mask, 0, "byte {i}: emit set an ignored bit ({repr})");
    }

    write_icrc(&CTX, &mut again);
    assert!(verify_icrc(&CTX, &again), "a written ICRC does not verify");
    let (back, icrc) = RoceRepr::parse(&again).expect("the re-emitted packet parses");
    assert_eq!(back, repr, "fields changed in the round trip");
    let mut third = vec![0x5a; back.buffer_len()];
    back.emit(&mut third).expect("emits again");
    write_icrc(&CTX, &mut third);
    assert_eq!(third, again, "parse -> emit is not a fixed point ({repr})");
    assert_eq!(
        icrc.to_le_bytes(),
        third[third.len() - ICRC_LEN..],
        "the stored ICRC is the last 4 bytes, little-endian"
    );
}

/// Per byte of the packet, the bits the parser ignores and emit zeroes: reserved bits, the
/// pad and the ICRC (emit leaves it zero; it is compared after `write_icrc`).
fn ignored_bits(repr: &RoceRepr<'_>, len: usize) -> Vec<u8> {
    let mut mask = vec![0u8; len];
    for (at, bits) in BTH_RESERVED {
        mask[at] = bits;
    }
    if let Some(info) = repr.bth.opcode.info() {
        if let Some(deth_at) = info.header_offset(HeaderSet::DETH) {
            mask[deth_at + DETH_RESERVED_AT] = 0xff;
        }
    }
    let pad_from = len - ICRC_LEN - repr.pad_len();
    mask[pad_from..].fill(0xff);
    debug_assert!(pad_from >= BTH_LEN);
    mask
}
