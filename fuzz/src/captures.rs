//! The RoCE packets of the kernel-rxe captures in the repository's `conformance/` (or
//! `$SOFTVERBS_CONFORMANCE_DIR`): the fuzzers' seed corpora and `rc_pair`'s templates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use softverbs_emu::net::pcap::read_capture;
use softverbs_emu::wire::{parse_frame, IcrcContext, RoceRepr, Transport};

/// One RoCE packet of a capture.
#[derive(Debug, Clone)]
pub struct CapturedPacket {
    /// The capture's file name.
    pub file: String,
    /// What its ICRC covers besides the packet.
    pub ctx: IcrcContext,
    /// The UDP payload: BTH .. ICRC.
    pub bytes: Vec<u8>,
}

/// The capture folder.
pub fn conformance_dir() -> PathBuf {
    std::env::var_os("SOFTVERBS_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance")))
}

fn read_dir(dir: &Path) -> Vec<CapturedPacket> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let frames =
            read_capture(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for frame in frames {
            let Ok(link) = frame.link_type() else {
                continue;
            };
            if let Ok(Some(roce)) = parse_frame(link, &frame.data) {
                out.push(CapturedPacket {
                    file: file.clone(),
                    ctx: roce.ctx,
                    bytes: roce.udp_payload.to_vec(),
                });
            }
        }
    }
    out
}

/// Every RoCE packet of every capture, files in name order (read once).
pub fn captured_packets() -> &'static [CapturedPacket] {
    static PACKETS: OnceLock<Vec<CapturedPacket>> = OnceLock::new();
    PACKETS.get_or_init(|| read_dir(&conformance_dir()))
}

/// One packet of each distinct (opcode, payload length up to 64 / longer) of the RC
/// traffic of the captures: what `rc_pair` mutates when it does not replay live traffic.
pub fn rc_templates() -> &'static [Vec<u8>] {
    static TEMPLATES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for p in captured_packets() {
            let Ok((repr, _)) = RoceRepr::parse(&p.bytes) else {
                continue;
            };
            let Some(info) = repr.bth.opcode.info() else {
                continue;
            };
            if info.transport != Transport::Rc {
                continue;
            }
            if seen.insert((repr.bth.opcode.0, repr.payload.len().min(65))) {
                out.push(p.bytes.clone());
            }
        }
        out
    })
}
