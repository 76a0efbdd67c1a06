//! `softverbs decode`: one line per RoCEv2 packet of a pcap/pcapng file, with the ICRC
//! checked against the captured IP/UDP headers and a parse -> emit round trip; a CM MAD on
//! QP1 is also named, with its IDs, service ID, addresses and reject reason (`decode_cm`).
//!
//! `--verify` fails (exit 1) unless every RoCEv2 packet round-trips byte-exact with a good
//! ICRC and no frame is malformed (a frame that claims IP/UDP but is cut short or carries
//! RoCE in a way the ICRC cannot describe) and the file is not cut short (the records
//! before a cut are decoded, then the cut is reported). Unreadable files exit 2.

use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use softverbs_emu::net::pcap::read_capture_prefix;

use crate::json::json_str;
use softverbs_emu::wire::{
    compute_icrc, parse_frame, stored_icrc, write_icrc, IpHeaderInfo, LinkType, RoceFrame, RoceRepr,
};

/// Arguments of `softverbs decode`.
#[derive(clap::Args)]
pub struct DecodeArgs {
    /// The pcap file (Ethernet or Linux cooked capture).
    pub file: PathBuf,
    /// Exit non-zero unless every RoCEv2 packet round-trips byte-exact with a good ICRC.
    #[arg(long)]
    pub verify: bool,
    /// One JSON document on stdout: every packet's line, the counts and the truncation.
    #[arg(long)]
    pub json: bool,
}

/// Where the packet lines go: text lines, or the entries of a JSON array.
struct Emitter<W: Write> {
    out: W,
    json: bool,
    entries: usize,
}

impl<W: Write> Emitter<W> {
    /// The line of frame `n`.
    fn line(&mut self, n: usize, text: String) -> io::Result<()> {
        if !self.json {
            return writeln!(self.out, "{n:5} {text}");
        }
        let sep = if self.entries == 0 { "" } else { "," };
        self.entries += 1;
        write!(
            self.out,
            "{sep}{{\"frame\":{n},\"text\":{}}}",
            json_str(&text)
        )
    }
}

/// Tallies for the summary line.
#[derive(Default)]
struct Counts {
    frames: usize,
    roce: usize,
    icrc_ok: usize,
    icrc_bad: usize,
    roundtrip_errors: usize,
    skipped: usize,
    malformed: usize,
}

impl Counts {
    /// The counts in the summary's order: JSON key, words of the text line, value.
    fn named(&self) -> [(&'static str, &'static str, usize); 7] {
        [
            ("frames", "frames", self.frames),
            ("roce", "roce", self.roce),
            ("icrc_ok", "icrc ok", self.icrc_ok),
            ("icrc_bad", "icrc bad", self.icrc_bad),
            (
                "roundtrip_errors",
                "roundtrip errors",
                self.roundtrip_errors,
            ),
            ("skipped", "non-roce skipped", self.skipped),
            ("malformed", "malformed", self.malformed),
        ]
    }
}

/// Runs the subcommand.
pub fn run(args: &DecodeArgs) -> ExitCode {
    // A cut file (a capture still being written, or copied short) still decodes: every
    // whole record, then the cut is reported (and fails --verify).
    let read = std::fs::read(&args.file)
        .map_err(softverbs_emu::net::pcap::PcapError::from)
        .and_then(|data| read_capture_prefix(&data));
    let (frames, cut) = match read {
        Ok(f) => f,
        Err(e) => {
            eprintln!("softverbs decode: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let mut counts = Counts::default();
    let mut out = Emitter {
        out: BufWriter::new(io::stdout().lock()),
        json: args.json,
        entries: 0,
    };
    let result = (|| -> io::Result<()> {
        if args.json {
            write!(
                out.out,
                "{{\"file\":{},\"packets\":[",
                json_str(&args.file.display().to_string())
            )?;
        }
        for (i, frame) in frames.iter().enumerate() {
            let n = i + 1;
            counts.frames += 1;
            let link = match frame.link_type() {
                Ok(l) => l,
                Err(e) => {
                    out.line(n, format!("MALFORMED: {e}"))?;
                    counts.malformed += 1;
                    continue;
                }
            };
            decode_frame(&mut out, n, link, &frame.data, &mut counts)?;
        }
        let named = counts.named();
        if args.json {
            let fields: Vec<String> = named
                .iter()
                .map(|(key, _, v)| format!("\"{key}\":{v}"))
                .collect();
            let truncated = cut
                .as_ref()
                .map_or("null".to_string(), |why| json_str(&why.to_string()));
            writeln!(
                out.out,
                "],{},\"truncated\":{truncated}}}",
                fields.join(",")
            )?;
        } else {
            let words: Vec<String> = named
                .iter()
                .map(|(_, words, v)| format!("{v} {words}"))
                .collect();
            writeln!(out.out, "{}", words.join(", "))?;
        }
        out.out.flush()
    })();
    if let Err(e) = result {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("softverbs decode: writing output: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(why) = &cut {
        eprintln!(
            "softverbs decode: {}: truncated after {} whole records: {why}",
            args.file.display(),
            counts.frames
        );
    }
    let clean = counts.icrc_bad == 0
        && counts.roundtrip_errors == 0
        && counts.malformed == 0
        && cut.is_none();
    if args.verify && !clean {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn decode_frame<W: Write>(
    out: &mut Emitter<W>,
    n: usize,
    link: LinkType,
    data: &[u8],
    counts: &mut Counts,
) -> io::Result<()> {
    let rf = match parse_frame(link, data) {
        Ok(Some(rf)) => rf,
        Ok(None) => {
            counts.skipped += 1;
            return Ok(());
        }
        Err(e) => {
            counts.malformed += 1;
            return out.line(n, format!("MALFORMED: {e}"));
        }
    };
    counts.roce += 1;
    let (src, dst) = match rf.ctx.ip {
        IpHeaderInfo::V4 { src, dst, .. } => (IpAddr::from(src), IpAddr::from(dst)),
        IpHeaderInfo::V6 { src, dst } => (IpAddr::from(src), IpAddr::from(dst)),
    };
    let icrc = icrc_status(&rf);
    if icrc.is_none() {
        counts.icrc_ok += 1;
    } else {
        counts.icrc_bad += 1;
    }
    let icrc = icrc.unwrap_or_else(|| "ok".into());
    match RoceRepr::parse(rf.udp_payload) {
        Ok((repr, _)) => {
            let note = match roundtrip(&rf, &repr) {
                Ok(()) => String::new(),
                Err(why) => {
                    counts.roundtrip_errors += 1;
                    format!(" ROUNDTRIP: {why}")
                }
            };
            let cm = crate::decode_cm::describe(&repr).unwrap_or_default();
            out.line(n, format!("{src} -> {dst} {repr}{cm} icrc={icrc}{note}"))
        }
        Err(e) => {
            counts.roundtrip_errors += 1;
            out.line(
                n,
                format!(
                    "{src} -> {dst} PARSE ERROR: {e} ({} bytes) icrc={icrc}",
                    rf.udp_payload.len()
                ),
            )
        }
    }
}

/// `None` if the ICRC is right, else the text after `icrc=`.
fn icrc_status(rf: &RoceFrame<'_>) -> Option<String> {
    let computed = compute_icrc(&rf.ctx, rf.udp_payload);
    match stored_icrc(rf.udp_payload) {
        Some(stored) if stored == computed => None,
        Some(stored) => Some(format!(
            "BAD(stored 0x{stored:08x}, computed 0x{computed:08x})"
        )),
        None => Some("BAD(no ICRC)".into()),
    }
}

/// Emits `repr` again and compares everything but the ICRC (checked separately).
fn roundtrip(rf: &RoceFrame<'_>, repr: &RoceRepr<'_>) -> Result<(), String> {
    let mut again = vec![0u8; repr.buffer_len()];
    repr.emit(&mut again).map_err(|e| format!("emit: {e}"))?;
    write_icrc(&rf.ctx, &mut again);
    let original = rf.udp_payload;
    if again.len() != original.len() {
        return Err(format!(
            "{} bytes emitted, {} captured",
            again.len(),
            original.len()
        ));
    }
    let body = original.len() - 4;
    match again[..body]
        .iter()
        .zip(&original[..body])
        .position(|(a, b)| a != b)
    {
        Some(at) => Err(format!(
            "byte {at} differs: 0x{:02x} emitted, 0x{:02x} captured",
            again[at], original[at]
        )),
        None => Ok(()),
    }
}
