//! [`RcEndpoint`] as one line of text, for two processes to exchange over any channel (a
//! TCP socket, a file, stdin): `qpn=0x11 psn=0x1000 gid=::ffff:127.0.0.1`, plus
//! ` udp_port=N` when the device is not on 4791. `Display` writes it, `FromStr` reads it
//! (EINVAL naming what is wrong); with the cargo feature `serde` it is also `Serialize` /
//! `Deserialize`, as that same string. [`exchange_endpoints`] swaps two of them over a
//! stream (a `TcpStream` between the two processes).

use std::fmt;
use std::io::{Read, Write};
use std::str::FromStr;

use softverbs_api::{Gid, VerbsError};

use crate::qp::RcEndpoint;

impl fmt::Display for RcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qpn={:#x} psn={:#x} gid={}",
            self.qpn, self.psn, self.gid
        )?;
        if let Some(port) = self.udp_port {
            write!(f, " udp_port={port}")?;
        }
        Ok(())
    }
}

fn number(key: &str, v: &str) -> Result<u32, VerbsError> {
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| VerbsError::inval(format!("endpoint: {key}={v:?} is not a number")))
}

impl FromStr for RcEndpoint {
    type Err = VerbsError;

    fn from_str(s: &str) -> Result<RcEndpoint, VerbsError> {
        let (mut qpn, mut psn, mut gid, mut udp_port) = (None, None, None, None);
        for field in s.split_whitespace() {
            let (key, v) = field.split_once('=').ok_or_else(|| {
                VerbsError::inval(format!("endpoint: {field:?} is not KEY=VALUE"))
            })?;
            match key {
                "qpn" => qpn = Some(number(key, v)?),
                "psn" => psn = Some(number(key, v)?),
                "gid" => gid = Some(v.parse::<Gid>()?),
                "udp_port" => {
                    let port = number(key, v)?;
                    udp_port = Some(u16::try_from(port).map_err(|_| {
                        VerbsError::inval(format!("endpoint: udp_port={v} is not a port"))
                    })?);
                }
                other => {
                    return Err(VerbsError::inval(format!(
                        "endpoint: unknown key {other:?}"
                    )))
                }
            }
        }
        let missing = |k: &str| VerbsError::inval(format!("endpoint {s:?}: no {k}="));
        let psn = psn.ok_or_else(|| missing("psn"))?;
        if psn >= 1 << 24 {
            return Err(VerbsError::inval(format!(
                "endpoint: psn {psn:#x} exceeds 24 bits"
            )));
        }
        Ok(RcEndpoint {
            qpn: qpn.ok_or_else(|| missing("qpn"))?,
            psn,
            gid: gid.ok_or_else(|| missing("gid"))?,
            udp_port,
        })
    }
}

/// Longest endpoint line accepted from a peer (a real one is under 80 bytes).
const MAX_LINE: u64 = 256;

/// Sends `mine` over `stream` as one line and reads the peer's line back: what each of two
/// processes calls on its end of a connected stream before `connect_rc`. Both sides write
/// first, so neither waits for the other. EIO-like errors for the stream, EINVAL for a
/// line that is not an endpoint (or longer than 256 bytes), ECONNRESET if the peer closed.
pub fn exchange_endpoints<S: Read + Write>(
    stream: &mut S,
    mine: &RcEndpoint,
) -> Result<RcEndpoint, VerbsError> {
    let io = |e: std::io::Error| VerbsError::Io {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("endpoint exchange: {e}"),
    };
    stream
        .write_all(format!("{mine}\n").as_bytes())
        .and_then(|()| stream.flush())
        .map_err(io)?;
    // Byte by byte, never past the end of the line: the stream stays usable for what the
    // peer sends next (a buffered reader could swallow it).
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => {
                return Err(VerbsError::Io {
                    errno: libc::ECONNRESET,
                    message: "endpoint exchange: the peer closed the stream".into(),
                })
            }
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() as u64 >= MAX_LINE => {
                return Err(VerbsError::inval(format!(
                    "endpoint exchange: no end of line within {MAX_LINE} bytes"
                )))
            }
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    let line = String::from_utf8(line)
        .map_err(|_| VerbsError::inval("endpoint exchange: the line is not UTF-8"))?;
    line.trim_end().parse()
}

#[cfg(feature = "serde")]
impl serde::Serialize for RcEndpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for RcEndpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RcEndpoint, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_round_trips_through_its_text() {
        let e = RcEndpoint {
            qpn: 0x11,
            psn: 0xff_fff0,
            gid: "127.0.0.1".parse().unwrap(),
            udp_port: Some(4792),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "qpn=0x11 psn=0xfffff0 gid=::ffff:127.0.0.1 udp_port=4792"
        );
        assert_eq!(text.parse::<RcEndpoint>().unwrap(), e);
        let plain = RcEndpoint {
            udp_port: None,
            ..e
        };
        assert_eq!(plain.to_string().parse::<RcEndpoint>().unwrap(), plain);
        for bad in [
            "qpn=0x11 psn=1",
            "qpn=zz psn=1 gid=::1",
            "qpn=1 psn=0x1000000 gid=::1",
            "qpn=1 psn=1 gid=::1 color=red",
            "qpn=1 psn=1 gid=::1 udp_port=70000",
        ] {
            assert_eq!(bad.parse::<RcEndpoint>().unwrap_err().errno(), 22, "{bad}");
        }
    }

    #[test]
    fn two_ends_of_a_stream_swap_their_endpoints() {
        use std::os::unix::net::UnixStream;
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let ea = RcEndpoint {
            qpn: 0x11,
            psn: 1,
            gid: "127.0.0.1".parse().unwrap(),
            udp_port: None,
        };
        let eb = RcEndpoint {
            qpn: 0x12,
            psn: 2,
            gid: "127.0.0.2".parse().unwrap(),
            udp_port: Some(4792),
        };
        let other = std::thread::spawn(move || exchange_endpoints(&mut b, &eb));
        assert_eq!(exchange_endpoints(&mut a, &ea).unwrap(), eb);
        assert_eq!(other.join().unwrap().unwrap(), ea);

        let (mut a, b) = UnixStream::pair().unwrap();
        drop(b);
        assert!(exchange_endpoints(&mut a, &ea).is_err());
    }

    #[cfg(feature = "serde")]
    #[test]
    fn an_endpoint_serialises_as_its_text() {
        let e = RcEndpoint {
            qpn: 0x22,
            psn: 7,
            gid: "fe80::1".parse().unwrap(),
            udp_port: None,
        };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, "\"qpn=0x22 psn=0x7 gid=fe80::1\"");
        assert_eq!(serde_json::from_str::<RcEndpoint>(&json).unwrap(), e);
        assert!(serde_json::from_str::<RcEndpoint>("\"qpn=1\"").is_err());
    }
}
