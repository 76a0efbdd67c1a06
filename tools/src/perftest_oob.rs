//! The TCP side channel of perftest (ib_write_bw, ib_read_bw, ... of perftest 4.5, protocol
//! version 6.06) without RDMA CM, for one RC QP: what softverbs says so that an unmodified
//! perftest on the other end runs its test against it.
//!
//! Every exchange is symmetric: the client (the side given a server name) writes then reads,
//! the server reads then writes, each message read with one `read` of its exact size. In
//! order: the version string (16 bytes, NUL padded); cycle buffer and cache line size (4
//! bytes each, big-endian); the MTU enum as text (2 bytes: "3\0" for 1024); the QP "keys"
//! (108 bytes: `LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:` then the 16 GID bytes as
//! `xx:` each and `SSSSSSSS:` with a NUL — LID, outstanding reads, QPN, PSN, rkey, address,
//! GID, SRQ number); the keys again twice (barriers around connecting the QP). After the test
//! the keys once more, the bandwidth report (five 8-byte big-endian numbers: size, iterations,
//! peak, average, message rate), and a last keys exchange followed by `"done\0"` from both.

use std::io::{Read, Write};
use std::net::TcpStream;

use softverbs::{Gid, Mtu, VerbsError, VerbsResult};

/// perftest's protocol version this side claims (perftest 4.5-0.17 is 6.06).
pub const PERFTEST_VERSION: &str = "6.06";
/// Size of the version message.
const VERSION_LEN: usize = 16;
/// The cycle buffer we announce (perftest's default, the page size): a perftest client
/// walks its remote address through this many bytes of our buffer.
pub const CYCLE_BUFFER: usize = 4096;
/// Size of the keys message with a GID, NUL included.
pub const KEYS_LEN: usize = 108;
/// The closing word each side writes.
const DONE: &[u8; 5] = b"done\0";

/// One side's QP description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerftestKeys {
    /// Outstanding RDMA READs / atomics this side accepts (the peer's max_rd_atomic).
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// rkey of the test buffer.
    pub rkey: u32,
    /// Address of the test buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: Gid,
}

impl PerftestKeys {
    /// The 108-byte keys message (LID 0, SRQ number 0).
    pub fn encode(&self) -> [u8; KEYS_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            0,
            self.out_reads & 0xffff,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.0 {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", 0));
        let mut msg = [0u8; KEYS_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses a keys message; EINVAL naming it if it is not one.
    pub fn decode(msg: &[u8]) -> VerbsResult<PerftestKeys> {
        let shown = String::from_utf8_lossy(msg)
            .trim_end_matches('\0')
            .to_string();
        let bad = || VerbsError::inval(format!("bad perftest keys message {shown:?}"));
        let text = std::str::from_utf8(msg).map_err(|_| bad())?;
        let fields: Vec<&str> = text.trim_end_matches('\0').split(':').collect();
        // lid, out_reads, qpn, psn, rkey, vaddr, 16 GID bytes, srqn, "" after the last ':'.
        if fields.len() != 24 || !fields[23].is_empty() {
            return Err(bad());
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(fields[6 + i], 16).map_err(|_| bad())?;
        }
        Ok(PerftestKeys {
            out_reads: hex(fields[1])? as u32,
            qpn: hex(fields[2])? as u32,
            psn: hex(fields[3])? as u32,
            rkey: hex(fields[4])? as u32,
            vaddr: hex(fields[5])?,
            gid: Gid(gid),
        })
    }
}

/// What the peer said during setup.
#[derive(Debug, Clone)]
pub struct PerftestPeer {
    /// Its version string.
    pub version: String,
    /// Its cycle buffer (the larger one is used by both).
    pub cycle_buffer: u32,
    /// Its MTU (checked to be one of `enum ibv_mtu`'s).
    pub mtu: Mtu,
    /// Its QP.
    pub keys: PerftestKeys,
}

impl PerftestPeer {
    /// EINVAL if the peer's cycle buffer, through which a perftest client walks its remote
    /// address, is larger than the `lent` bytes of our buffer (perftest on a machine with
    /// larger pages): its requests would fail with remote access errors.
    pub fn check_cycle_buffer(&self, lent: usize) -> VerbsResult<()> {
        if self.cycle_buffer as usize > lent {
            return Err(VerbsError::inval(format!(
                "the peer's cycle buffer is {} bytes, this side lends {lent}",
                self.cycle_buffer
            )));
        }
        Ok(())
    }

    /// The path MTU both sides use, as perftest: the smaller of `ours` and the peer's.
    pub fn agreed_mtu(&self, ours: Mtu) -> Mtu {
        if self.mtu.bytes() < ours.bytes() {
            self.mtu
        } else {
            ours
        }
    }
}

/// The MTU enum of perftest's side channel (`enum ibv_mtu`: 1 = 256 .. 5 = 4096) for `mtu`
/// bytes; 5 for a size that is none of them.
pub fn mtu_enum(mtu: u32) -> u32 {
    Mtu::from_bytes(mtu).unwrap_or(Mtu::Mtu4096) as u32
}

/// A side-channel connection to a perftest peer.
pub struct PerftestComm {
    stream: TcpStream,
    is_client: bool,
}

fn io_err(what: &str, e: std::io::Error) -> VerbsError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return peer_left(what);
    }
    VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(5),
        message: format!("perftest side channel ({what}): {e}"),
    }
}

/// The peer closed the side channel before an exchange was complete: it exited or was
/// killed (ECONNRESET).
fn peer_left(what: &str) -> VerbsError {
    VerbsError::Io {
        errno: libc::ECONNRESET,
        message: format!(
            "the peer closed the side channel during the {what} exchange: it exited or was killed"
        ),
    }
}

impl PerftestComm {
    /// Wraps a connected stream; `is_client` for the side that connected.
    pub fn new(stream: TcpStream, is_client: bool) -> Self {
        PerftestComm { stream, is_client }
    }

    /// One symmetric exchange of `mine` for `size` bytes of the peer's.
    pub fn xchg(&mut self, mine: &[u8], size: usize, what: &str) -> VerbsResult<Vec<u8>> {
        let mut theirs = vec![0u8; size];
        if self.is_client {
            self.stream.write_all(mine).map_err(|e| io_err(what, e))?;
            self.stream
                .read_exact(&mut theirs)
                .map_err(|e| io_err(what, e))?;
        } else {
            self.stream
                .read_exact(&mut theirs)
                .map_err(|e| io_err(what, e))?;
            self.stream.write_all(mine).map_err(|e| io_err(what, e))?;
        }
        Ok(theirs)
    }

    /// The exchanges before the QP is connected: version, system data, MTU, keys. `mtu_enum`
    /// is ours (3 for 1024).
    pub fn setup(&mut self, mtu_enum: u32, keys: &PerftestKeys) -> VerbsResult<PerftestPeer> {
        let mut version = [0u8; VERSION_LEN];
        version[..PERFTEST_VERSION.len()].copy_from_slice(PERFTEST_VERSION.as_bytes());
        let theirs = self.xchg(&version, VERSION_LEN, "version")?;
        let peer_version = String::from_utf8_lossy(&theirs)
            .trim_end_matches('\0')
            .to_string();
        let cycle = self.xchg(&(CYCLE_BUFFER as u32).to_be_bytes(), 4, "cycle buffer")?;
        self.xchg(&64u32.to_be_bytes(), 4, "cache line size")?;
        let mtu_text = [b'0' + mtu_enum as u8, 0];
        let peer_mtu = self.xchg(&mtu_text, 2, "MTU")?;
        // perftest sends the enum as one decimal digit and a NUL.
        let peer_mtu = Mtu::from_raw(u32::from(peer_mtu[0].wrapping_sub(b'0')))
            .filter(|_| peer_mtu[1] == 0)
            .ok_or_else(|| {
                VerbsError::inval(format!(
                    "perftest side channel: the peer's MTU {:?} is not an ibv_mtu (1..=5)",
                    String::from_utf8_lossy(&peer_mtu)
                ))
            })?;
        let peer_keys = PerftestKeys::decode(&self.xchg(&keys.encode(), KEYS_LEN, "keys")?)?;
        Ok(PerftestPeer {
            version: peer_version,
            cycle_buffer: u32::from_be_bytes([cycle[0], cycle[1], cycle[2], cycle[3]]),
            mtu: peer_mtu,
            keys: peer_keys,
        })
    }

    /// Whether the peer has written something not read yet (it reached the next exchange)
    /// or closed the connection (ib_write_lat ends so): how a side that runs until the peer
    /// is done, without knowing the count, learns that it should stop. Never blocks.
    pub fn peer_waiting(&self) -> VerbsResult<bool> {
        Ok(self.peek()?.is_some())
    }

    /// Bytes readable now without blocking (`Some(0)`: the peer closed), `None` if none.
    fn peek(&self) -> VerbsResult<Option<usize>> {
        let mut byte = [0u8; 1];
        self.stream
            .set_nonblocking(true)
            .map_err(|e| io_err("peek", e))?;
        let peeked = self.stream.peek(&mut byte);
        self.stream
            .set_nonblocking(false)
            .map_err(|e| io_err("peek", e))?;
        match peeked {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(io_err("peek", e)),
        }
    }

    /// For a side that expects nothing from its peer before its own next
    /// exchange (a bandwidth client): an error if the peer closed the side channel, which
    /// means it exited or was killed mid-run.
    pub fn check_peer_alive(&self) -> VerbsResult<()> {
        match self.peek()? {
            Some(0) => Err(peer_left("next")),
            _ => Ok(()),
        }
    }

    /// A keys exchange used as a barrier.
    pub fn barrier(&mut self, keys: &PerftestKeys, what: &str) -> VerbsResult<()> {
        PerftestKeys::decode(&self.xchg(&keys.encode(), KEYS_LEN, what)?).map(|_| ())
    }

    /// The bandwidth report exchange: (size, iterations, peak, average, message rate), each
    /// sent as 8 big-endian bytes (the doubles' bit patterns). Returns the peer's.
    pub fn xchg_report(
        &mut self,
        size: u64,
        iters: u64,
        bw_peak: f64,
        bw_avg: f64,
        msg_rate: f64,
    ) -> VerbsResult<(u64, u64, f64, f64, f64)> {
        let s = self.xchg(&size.to_be_bytes(), 8, "report size")?;
        let i = self.xchg(&iters.to_be_bytes(), 8, "report iterations")?;
        let p = self.xchg(&bw_peak.to_bits().to_be_bytes(), 8, "report peak")?;
        let a = self.xchg(&bw_avg.to_bits().to_be_bytes(), 8, "report average")?;
        let m = self.xchg(&msg_rate.to_bits().to_be_bytes(), 8, "report rate")?;
        let u = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
        Ok((
            u(&s),
            u(&i),
            f64::from_bits(u(&p)),
            f64::from_bits(u(&a)),
            f64::from_bits(u(&m)),
        ))
    }

    /// The closing barrier and `"done"`.
    pub fn close(mut self, keys: &PerftestKeys) -> VerbsResult<()> {
        self.barrier(keys, "closing")?;
        self.stream.write_all(DONE).map_err(|e| io_err("done", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake perftest server that answers the setup with `mtu` as its MTU message.
    fn setup_against(mtu: [u8; 2]) -> VerbsResult<PerftestPeer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let version = *b"6.06\0\0\0\0\0\0\0\0\0\0\0\0";
            let cycle = 4096u32.to_be_bytes();
            let line = 64u32.to_be_bytes();
            let keys = PerftestKeys {
                out_reads: 1,
                qpn: 2,
                psn: 3,
                rkey: 4,
                vaddr: 5,
                gid: Gid([0; 16]),
            }
            .encode();
            let answers: [&[u8]; 5] = [&version, &cycle, &line, &mtu, &keys];
            for (n, answer) in [VERSION_LEN, 4, 4, 2, KEYS_LEN].into_iter().zip(answers) {
                let mut buf = vec![0u8; n];
                if s.read_exact(&mut buf).is_err() || s.write_all(answer).is_err() {
                    return;
                }
            }
        });
        let stream = TcpStream::connect(addr).unwrap();
        let mut comm = PerftestComm::new(stream, true);
        let keys = PerftestKeys {
            out_reads: 1,
            qpn: 7,
            psn: 8,
            rkey: 9,
            vaddr: 10,
            gid: Gid([0; 16]),
        };
        let got = comm.setup(mtu_enum(4096), &keys);
        drop(comm);
        server.join().unwrap();
        got
    }

    #[test]
    fn the_smaller_mtu_is_agreed_and_a_bad_one_refused() {
        let peer = setup_against(*b"3\0").unwrap();
        assert_eq!(peer.mtu, Mtu::Mtu1024);
        assert_eq!(peer.agreed_mtu(Mtu::Mtu4096), Mtu::Mtu1024);
        assert_eq!(peer.agreed_mtu(Mtu::Mtu512), Mtu::Mtu512);
        assert_eq!(peer.keys.qpn, 2);
        // The fake server's cycle buffer is 4096 bytes.
        assert!(peer.check_cycle_buffer(4096).is_ok());
        assert_eq!(peer.check_cycle_buffer(4095).unwrap_err().errno(), 22);
        for bad in [*b"9\0", *b"0\0", *b"3x"] {
            let err = setup_against(bad).unwrap_err();
            assert_eq!(err.errno(), 22, "{bad:?}: {err}");
        }
    }

    #[test]
    fn mtu_enum_is_ibv_mtu() {
        let got: Vec<u32> = [256, 512, 1024, 2048, 4096, 1000]
            .into_iter()
            .map(mtu_enum)
            .collect();
        assert_eq!(got, [1, 2, 3, 4, 5, 5]);
    }

    #[test]
    fn keys_round_trip_in_perftest_layout() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 77, 0, 1]);
        let k = PerftestKeys {
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x7f00_dead_beef,
            gid: Gid(gid),
        };
        let m = k.encode();
        let text = String::from_utf8_lossy(&m);
        assert_eq!(
            text.trim_end_matches('\0'),
            "0000:0010:000011:abcdef:12345678:00007f00deadbeef:\
             00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01:00000000:"
        );
        assert_eq!(m[KEYS_LEN - 1], 0, "107 characters and a NUL");
        assert_eq!(PerftestKeys::decode(&m).unwrap(), k);
        assert_eq!(PerftestKeys::decode(&m[..50]).unwrap_err().errno(), 22);
    }
}
