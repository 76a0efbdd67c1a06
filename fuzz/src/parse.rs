//! Target `parse`: arbitrary bytes through every parser a remote peer (or a capture file)
//! reaches: a RoCE packet (BTH, the extension headers the opcode table names, payload, pad,
//! ICRC), its one-line decode, a CM MAD in the payload of a UD SEND to QP1 (with the
//! rdma_cm header of a REQ's private data), and a link-layer frame of each pcap link type.
//! Findings: panics, and a parse that accepts what `validate` then rejects.

use softverbs_emu::wire::cm::{CmMad, CmMessage, CmaHdr};
use softverbs_emu::wire::{parse_frame, verify_icrc, LinkType, RoceRepr};

/// QP number of the GSI, where CM MADs go.
const GSI_QPN: u32 = 1;

/// Runs one input.
pub fn run(data: &[u8]) {
    packet(data);
    for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
        if let Ok(Some(frame)) = parse_frame(link, data) {
            assert!(
                frame.udp_payload.len() <= data.len(),
                "the UDP payload lies inside the frame"
            );
            let _ = verify_icrc(&frame.ctx, frame.udp_payload);
            packet(frame.udp_payload);
        }
    }
}

fn packet(data: &[u8]) {
    let Ok((repr, _icrc)) = RoceRepr::parse(data) else {
        return;
    };
    let info = repr
        .validate()
        .unwrap_or_else(|e| panic!("parse accepted what validate rejects: {e}"));
    assert_eq!(
        repr.buffer_len(),
        data.len(),
        "parse accounts for every byte"
    );
    let _ = repr.to_string();
    if repr.bth.dest_qp == GSI_QPN && repr.deth.is_some() && info.has_payload {
        if let Ok(mad) = CmMad::parse(repr.payload) {
            let _ = format!("{mad:?}");
            match &mad.message {
                CmMessage::Req(req) => drop(CmaHdr::parse(&req.private_data)),
                CmMessage::SidrReq(req) => drop(CmaHdr::parse(&req.private_data)),
                _ => {}
            }
        }
    }
}
