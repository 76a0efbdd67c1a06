//! The out-of-band exchange of rdma-core's ibv_rc_pingpong (and its uc/ud/srq siblings): one
//! 52-byte message each way over TCP (default port 18515), `LLLL:QQQQQQ:PPPPPP:GGGG...` —
//! LID, QP number and PSN in hex, then the 16 GID bytes as 32 hex digits in wire order — with
//! its terminating NUL. The client sends first, the server answers, then the client sends
//! `"done"` with its NUL.

use softverbs::{Gid, RcEndpoint, VerbsError, VerbsResult};

/// TCP port the rdma-core ping-pong examples use by default.
pub const IBV_PINGPONG_PORT: u16 = 18515;
/// Length of one address message, NUL included.
pub const DEST_MSG_LEN: usize = 52;
/// The client's closing message, NUL included.
pub const DONE_MSG: &[u8; 5] = b"done\0";

/// The address message for `ep` (LID 0: RoCE has none).
pub fn encode_dest(ep: &RcEndpoint) -> [u8; DEST_MSG_LEN] {
    let gid: String = ep.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{gid}",
        0,
        ep.qpn & 0xff_ffff,
        ep.psn & 0xff_ffff
    );
    let mut msg = [0u8; DEST_MSG_LEN];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

/// Parses an address message (the LID is ignored). EINVAL naming the message if it is not
/// one.
pub fn decode_dest(msg: &[u8]) -> VerbsResult<RcEndpoint> {
    let shown = String::from_utf8_lossy(msg);
    let bad = || VerbsError::inval(format!("bad ibv_*_pingpong address message {shown:?}"));
    let text = std::str::from_utf8(msg).map_err(|_| bad())?;
    let text = text.trim_end_matches('\0');
    let mut parts = text.split(':');
    let mut field = |digits: usize| -> VerbsResult<u32> {
        let f = parts.next().ok_or_else(bad)?;
        if f.len() != digits {
            return Err(bad());
        }
        u32::from_str_radix(f, 16).map_err(|_| bad())
    };
    let _lid = field(4)?;
    let qpn = field(6)?;
    let psn = field(6)?;
    let gid_hex = parts.next().ok_or_else(bad)?;
    if parts.next().is_some() || gid_hex.len() != 32 || !gid_hex.is_ascii() {
        return Err(bad());
    }
    let mut gid = [0u8; 16];
    for (i, byte) in gid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&gid_hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(RcEndpoint {
        qpn,
        psn,
        gid: Gid(gid),
        udp_port: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_the_rdma_core_layout() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 77, 0, 2]);
        let ep = RcEndpoint {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid(gid),
            udp_port: None,
        };
        let msg = encode_dest(&ep);
        assert_eq!(
            &msg[..],
            &b"0000:000011:abcdef:00000000000000000000ffff0a4d0002\0"[..]
        );
        assert_eq!(decode_dest(&msg).unwrap(), ep);
    }

    #[test]
    fn malformed_messages_are_einval() {
        for bad in [
            &b"0000:000011:abcdef"[..],
            b"0000:11:abcdef:00000000000000000000ffff0a4d0002\0",
            b"0000:000011:abcdef:00000000000000000000ffff0a4d00zz\0",
            b"0000:000011:abcdef:00000000000000000000ffff0a4d0002:9",
            b"\xff\xfe",
        ] {
            assert_eq!(decode_dest(bad).unwrap_err().errno(), 22);
        }
    }
}
