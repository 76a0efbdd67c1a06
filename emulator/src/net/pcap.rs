//! pcap files: reading captures (classic pcap, either byte order and timestamp resolution,
//! and pcapng), [`PcapWriter`], which writes Ethernet frames, and [`tap`], the link wrapper
//! that captures a device's traffic (`SOFTVERBS_PCAP`).

pub mod tap;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser};
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::wire::{LinkType, WireError};

/// Why a capture could not be read or written.
#[derive(thiserror::Error, Debug)]
pub enum PcapError {
    /// The file could not be opened, read or written.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bytes are not a pcap or pcapng file, or are cut short.
    #[error("not a valid pcap/pcapng file: {0}")]
    Format(String),
}

impl From<pcap_file::PcapError> for PcapError {
    fn from(e: pcap_file::PcapError) -> Self {
        match e {
            pcap_file::PcapError::IoError(io) => PcapError::Io(io),
            pcap_file::PcapError::IncompleteBuffer => {
                PcapError::Format("file ends inside a record".into())
            }
            other => PcapError::Format(other.to_string()),
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Capture time since the Unix epoch.
    pub timestamp: Duration,
    /// The pcap LINKTYPE_* number of the interface it was captured on.
    pub linktype: u32,
    /// Length of the frame on the wire (the captured bytes may be fewer).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl CapturedFrame {
    /// The link type, if it is one [`crate::wire::parse_frame`] decodes.
    pub fn link_type(&self) -> Result<LinkType, WireError> {
        LinkType::from_pcap(self.linktype)
    }
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Reads every frame of a pcap or pcapng file; an error if the file is cut short.
pub fn read_capture(path: &Path) -> Result<Vec<CapturedFrame>, PcapError> {
    read_capture_bytes(&std::fs::read(path)?)
}

/// Reads every frame of a pcap or pcapng file held in memory; an error if it is cut short.
pub fn read_capture_bytes(data: &[u8]) -> Result<Vec<CapturedFrame>, PcapError> {
    match read_capture_prefix(data)? {
        (frames, None) => Ok(frames),
        (_, Some(cut)) => Err(cut),
    }
}

/// The complete frames of a capture that may end early (a capture still being written, or
/// a copy cut short), and why reading stopped before the end if it did: a truncated file
/// still gives every whole record before the cut. An error only if the file header
/// cannot be read.
pub fn read_capture_prefix(
    data: &[u8],
) -> Result<(Vec<CapturedFrame>, Option<PcapError>), PcapError> {
    let mut frames = Vec::new();
    let stopped = if data.starts_with(&PCAPNG_MAGIC) {
        read_pcapng(data, &mut frames)?
    } else {
        read_pcap(data, &mut frames)?
    };
    Ok((frames, stopped.err()))
}

/// Appends the frames of `data` to `frames`. The outer error: no valid header; the inner:
/// reading stopped at a bad or cut record.
fn read_pcap(
    data: &[u8],
    frames: &mut Vec<CapturedFrame>,
) -> Result<Result<(), PcapError>, PcapError> {
    let (mut rest, parser) = PcapParser::new(data)?;
    let linktype = u32::from(parser.header().datalink);
    while !rest.is_empty() {
        let (next, packet) = match parser.next_packet(rest) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e.into())),
        };
        frames.push(CapturedFrame {
            timestamp: packet.timestamp,
            linktype,
            orig_len: packet.orig_len,
            data: packet.data.into_owned(),
        });
        rest = next;
    }
    Ok(Ok(()))
}

/// As [`read_pcap`], for pcapng.
fn read_pcapng(
    data: &[u8],
    frames: &mut Vec<CapturedFrame>,
) -> Result<Result<(), PcapError>, PcapError> {
    let (mut rest, mut parser) = PcapNgParser::new(data)?;
    while !rest.is_empty() {
        let (next, block) = match parser.next_block(rest) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e.into())),
        };
        rest = next;
        let interface_linktype = |id: u32| {
            parser
                .interfaces()
                .get(id as usize)
                .map(|i| u32::from(i.linktype))
                .ok_or_else(|| PcapError::Format(format!("packet names unknown interface {id}")))
        };
        let frame = match block {
            Block::EnhancedPacket(p) => {
                interface_linktype(p.interface_id).map(|linktype| CapturedFrame {
                    timestamp: p.timestamp,
                    linktype,
                    orig_len: p.original_len,
                    data: p.data.into_owned(),
                })
            }
            Block::SimplePacket(p) => interface_linktype(0).map(|linktype| CapturedFrame {
                timestamp: Duration::ZERO, // simple packet blocks carry no time
                linktype,
                orig_len: p.original_len,
                data: p.data.into_owned(),
            }),
            Block::Packet(p) => {
                interface_linktype(u32::from(p.interface_id)).map(|linktype| CapturedFrame {
                    // obsolete block: default resolution
                    timestamp: Duration::from_micros(p.timestamp),
                    linktype,
                    orig_len: p.original_len,
                    data: p.data.into_owned(),
                })
            }
            _ => continue,
        };
        match frame {
            Ok(f) => frames.push(f),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(()))
}

/// Writes Ethernet frames to a classic pcap file (microsecond timestamps), as a tap.
pub struct PcapWriter<W: Write> {
    inner: pcap_file::pcap::PcapWriter<W>,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (truncates) the file at `path` and writes the pcap header.
    pub fn create(path: &Path) -> Result<Self, PcapError> {
        PcapWriter::new(BufWriter::new(File::create(path)?))
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the pcap header (link type Ethernet, snap length 65535) to `writer`.
    pub fn new(writer: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::native(),
            ..PcapHeader::default()
        };
        Ok(PcapWriter {
            inner: pcap_file::pcap::PcapWriter::with_header(writer, header)?,
        })
    }

    /// Appends one frame captured at `timestamp` (since the Unix epoch).
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        let orig_len =
            u32::try_from(frame.len()).map_err(|_| PcapError::Format("frame over 4 GiB".into()))?;
        self.inner
            .write_packet(&PcapPacket::new(timestamp, orig_len, frame))?;
        Ok(())
    }

    /// The underlying writer (flush a `BufWriter` before dropping it to see errors).
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_back() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(Duration::from_micros(1_700_000_000_000_001), &[1, 2, 3])
            .unwrap();
        w.write_frame(Duration::from_secs(5), &[4; 60]).unwrap();
        let bytes = w.into_inner();
        let frames = read_capture_bytes(&bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, [1, 2, 3]);
        assert_eq!(
            frames[0].timestamp,
            Duration::from_micros(1_700_000_000_000_001)
        );
        assert_eq!(frames[1].orig_len, 60);
        assert_eq!(frames[1].link_type(), Ok(LinkType::Ethernet));
    }

    // pcapng with two interfaces of different link types: each packet gets its own.
    #[test]
    fn pcapng_frames_carry_their_interface_link_type() {
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use pcap_file::pcapng::PcapNgWriter;
        use std::borrow::Cow;

        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
            .unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::LINUX_SLL2, 65535))
            .unwrap();
        for (interface_id, data) in [(1u32, &[7u8; 30][..]), (0, &[8u8; 61][..])] {
            let epb = EnhancedPacketBlock {
                interface_id,
                timestamp: Duration::from_micros(42),
                original_len: data.len() as u32,
                data: Cow::Borrowed(data),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        let frames = read_capture_bytes(&w.into_inner()).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].link_type(), Ok(LinkType::LinuxSll2));
        assert_eq!(frames[0].data, [7u8; 30]);
        assert_eq!(frames[1].link_type(), Ok(LinkType::Ethernet));
        assert_eq!(frames[1].timestamp, Duration::from_micros(42));
    }

    #[test]
    fn garbage_and_truncation_are_errors() {
        assert!(matches!(
            read_capture_bytes(b"not a pcap file at all, no"),
            Err(PcapError::Format(_))
        ));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(Duration::ZERO, &[9; 40]).unwrap();
        let bytes = w.into_inner();
        assert!(matches!(
            read_capture_bytes(&bytes[..bytes.len() - 1]),
            Err(PcapError::Format(_))
        ));
        assert!(matches!(
            read_capture(Path::new("/nonexistent/x.pcap")),
            Err(PcapError::Io(_))
        ));
    }

    #[test]
    fn a_cut_capture_gives_its_whole_records_and_says_where_it_stopped() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for n in 1..=3u8 {
            w.write_frame(Duration::ZERO, &[n; 40]).unwrap();
        }
        let bytes = w.into_inner();
        let (frames, cut) = read_capture_prefix(&bytes[..bytes.len() - 10]).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].data, [2; 40]);
        assert!(matches!(cut, Some(PcapError::Format(_))), "{cut:?}");
        let (frames, cut) = read_capture_prefix(&bytes).unwrap();
        assert_eq!((frames.len(), cut.is_none()), (3, true));
        assert!(read_capture_prefix(b"short").is_err());
    }
}
