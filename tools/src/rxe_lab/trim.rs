//! Cuts a lab capture down to the packets worth committing (conformance/) and describes it
//! the way conformance/README.md does, so that the conformance tests can check the counts.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

use softverbs_emu::net::pcap::{read_capture, PcapWriter};
use softverbs_emu::wire::opcode::Position;
use softverbs_emu::wire::{parse_frame, verify_icrc, IpHeaderInfo, Opcode, RoceRepr};

/// MIDDLE packets kept per message: enough to show the header layout and the PSN steps.
pub const MIDDLES_KEPT: usize = 2;

/// What a trimmed capture holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Bytes of the file written.
    pub file_bytes: u64,
    /// RoCE packets in it (every frame is one).
    pub roce: usize,
    /// Of which with a correct ICRC.
    pub icrc_ok: usize,
    /// Packets left out: MIDDLEs beyond [`MIDDLES_KEPT`] per message.
    pub middles_dropped: usize,
    /// Frames that were not RoCE (ARP, the guest's ARP-priming datagram).
    pub other_dropped: usize,
    /// BTH opcode -> count.
    pub opcodes: BTreeMap<u8, usize>,
    /// AETH syndrome -> count.
    pub syndromes: BTreeMap<u8, usize>,
    /// Sender IP -> packets.
    pub senders: BTreeMap<IpAddr, usize>,
}

/// Copies the RoCE frames of `from` into `to`, dropping every MIDDLE packet of a message
/// past the first `middles_kept` (a message is counted per sender and destination QP, from
/// its last non-MIDDLE packet) and every frame that is not RoCE.
pub fn trim(from: &Path, to: &Path, middles_kept: usize) -> Result<Summary, String> {
    let frames = read_capture(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut writer = PcapWriter::create(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let mut summary = Summary::default();
    let mut middles: HashMap<(IpAddr, u32), usize> = HashMap::new();
    for f in &frames {
        let link = f.link_type().map_err(|e| e.to_string())?;
        let Ok(Some(rf)) = parse_frame(link, &f.data) else {
            summary.other_dropped += 1;
            continue;
        };
        let (repr, _) = RoceRepr::parse(rf.udp_payload)
            .map_err(|e| format!("{}: a RoCE frame does not parse: {e}", from.display()))?;
        let src = match rf.ctx.ip {
            IpHeaderInfo::V4 { src, .. } => IpAddr::from(src),
            IpHeaderInfo::V6 { src, .. } => IpAddr::from(src),
        };
        let stream = middles.entry((src, repr.bth.dest_qp)).or_default();
        match repr.bth.opcode.info().map(|i| i.position) {
            Some(Position::Middle) => {
                *stream += 1;
                if *stream > middles_kept {
                    summary.middles_dropped += 1;
                    continue;
                }
            }
            _ => *stream = 0,
        }
        summary.roce += 1;
        summary.icrc_ok += usize::from(verify_icrc(&rf.ctx, rf.udp_payload));
        *summary.opcodes.entry(repr.bth.opcode.0).or_default() += 1;
        if let Some(aeth) = repr.aeth {
            *summary.syndromes.entry(aeth.syndrome).or_default() += 1;
        }
        *summary.senders.entry(src).or_default() += 1;
        writer
            .write_frame(f.timestamp, &f.data)
            .map_err(|e| format!("{}: {e}", to.display()))?;
    }
    use std::io::Write;
    writer
        .into_inner()
        .flush()
        .map_err(|e| format!("{}: {e}", to.display()))?;
    summary.file_bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(summary)
}

/// The README section of one capture, in the format the conformance tests read:
/// `### name`, a `roce=N icrc_ok=N` line, "count opcode name" lines and the AETH syndromes.
pub fn readme_section(name: &str, how: &str, s: &Summary) -> String {
    let mut out = format!("### {name}\n{how}\n```\n");
    let senders: Vec<String> = s
        .senders
        .iter()
        .map(|(ip, n)| format!("{n} from {ip}"))
        .collect();
    out.push_str(&format!(
        "size: {} B, frames: {}, roce={} icrc_ok={} icrc_bad={} ({}); left out: {} MIDDLE packets, {} non-RoCE frames\n",
        s.file_bytes,
        s.roce,
        s.roce,
        s.icrc_ok,
        s.roce - s.icrc_ok,
        senders.join(", "),
        s.middles_dropped,
        s.other_dropped
    ));
    out.push_str("BTH opcodes (count, opcode number, name):\n");
    for (&op, &n) in &s.opcodes {
        out.push_str(&format!("{n:>8} {op}\t{}\n", Opcode(op).name()));
    }
    if !s.syndromes.is_empty() {
        let items: Vec<String> = s
            .syndromes
            .iter()
            .map(|(syn, n)| format!("{n}x0x{syn:02x}"))
            .collect();
        out.push_str(&format!(
            "AETH syndromes (count x value): {}  [0x1f ACK; 0x20-0x3f RNR NAK (timer=low 5 bits); 0x60 NAK PSN seq err; 0x62 NAK remote access]\n",
            items.join(" ")
        ));
    }
    out.push_str("```\n");
    out
}

/// Marks the part of conformance/README.md that `softverbs rxe-lab capture` writes.
pub const BEGIN_MARK: &str = "<!-- softverbs rxe-lab capture: generated from here -->";
/// Ends it.
pub const END_MARK: &str = "<!-- softverbs rxe-lab capture: generated up to here -->";

/// `readme` with the text between the marks replaced by `generated` (the marks appended at
/// the end when absent).
pub fn replace_generated(readme: &str, generated: &str) -> String {
    let block = format!("{BEGIN_MARK}\n{generated}{END_MARK}\n");
    match (readme.find(BEGIN_MARK), readme.find(END_MARK)) {
        (Some(b), Some(e)) if b < e => {
            let tail = &readme[e + END_MARK.len()..];
            format!(
                "{}{block}{}",
                &readme[..b],
                tail.strip_prefix('\n').unwrap_or(tail)
            )
        }
        _ => format!(
            "{}\n{block}",
            readme.trim_end_matches('\n').to_string() + "\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_block_is_replaced_in_place_or_appended() {
        let first = replace_generated("# t\nintro\n", "A\n");
        assert_eq!(
            first,
            format!("# t\nintro\n\n{BEGIN_MARK}\nA\n{END_MARK}\n")
        );
        let again = replace_generated(&(first.clone() + "after\n"), "B\n");
        assert_eq!(
            again,
            format!("# t\nintro\n\n{BEGIN_MARK}\nB\n{END_MARK}\nafter\n")
        );
    }

    #[test]
    fn section_lists_counts_in_the_readme_format() {
        let s = Summary {
            file_bytes: 100,
            roce: 3,
            icrc_ok: 3,
            opcodes: BTreeMap::from([(4, 2), (17, 1)]),
            syndromes: BTreeMap::from([(0x1f, 1)]),
            ..Summary::default()
        };
        let text = readme_section("x.pcap", "how", &s);
        assert!(text.contains("roce=3 icrc_ok=3"), "{text}");
        assert!(text.contains("       2 4\t"), "{text}");
        assert!(
            text.contains("AETH syndromes (count x value): 1x0x1f "),
            "{text}"
        );
    }

    #[test]
    fn middles_beyond_the_limit_are_dropped() {
        // A capture of the repository with a 4-packet SEND (FIRST, MIDDLE, MIDDLE, LAST).
        let from = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../conformance/ib_send_bw_4096_mtu1500.pcap"
        ));
        let to = std::env::temp_dir().join(format!("trim-test-{}.pcap", std::process::id()));
        // 5 messages of FIRST + 2 MIDDLE + LAST, 5 ACKs: nothing to drop at 2 MIDDLEs kept.
        let s = trim(from, &to, 2).expect("trim");
        assert_eq!((s.middles_dropped, s.roce, s.icrc_ok), (0, 25, 25));
        assert_eq!(s.opcodes.get(&1), Some(&10));
        assert!(s.other_dropped > 0);
        // One MIDDLE kept per message: the second of each goes, the rest stays.
        let s = trim(from, &to, 1).expect("trim");
        assert_eq!((s.middles_dropped, s.roce, s.icrc_ok), (5, 20, 20));
        assert_eq!(s.opcodes.get(&1), Some(&5));
        assert_eq!(s.opcodes.get(&2), Some(&5));
        let again = read_capture(&to).expect("written capture reads back");
        let _ = std::fs::remove_file(&to);
        assert_eq!(again.len(), 20);
    }
}
