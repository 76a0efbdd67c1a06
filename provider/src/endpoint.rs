//! [`RcEndpoint`] as one line of text, for two processes to exchange over any channel (a
//! TCP socket, a file, stdin): `qpn=0x11 psn=0x1000 gid=::ffff:127.0.0.1`, plus
//! ` udp_port=N` when the device is not on 4791. `Display` writes it, `FromStr` reads it
//! (EINVAL naming what is wrong); with the cargo feature `serde` it is also `Serialize` /
//! `Deserialize`, as that same string.

use std::fmt;
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
