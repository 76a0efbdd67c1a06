//! Packets whose opcode carries no extension header (SEND ONLY / MIDDLE / LAST, a WRITE's
//! middle packets, RDMA WRITE LAST), emitted from their BTH alone, and what a packet builder
//! needs of any packet to emit it ([`EmitHeaders`]).
//!
//! Why: most packets of a data stream are of these opcodes, and building the full
//! [`RoceRepr`] for them (some 170 bytes, every extension header absent) and checking its
//! headers against the table took a fifth of the requester's per-packet instructions. The
//! bytes are [`RoceRepr::emit_headers`]'s (see the tests).

use super::bth::{BthRepr, BTH_LEN};
use super::error::WireError;
use super::roce::{check_payload, emit_frame, pad_for, RoceRepr, ICRC_LEN};

/// A packet a builder can emit: its buffer length, its headers with the pad and a zeroed
/// ICRC (the payload bytes left as they are), and its payload.
pub trait EmitHeaders {
    /// Bytes of the whole packet: headers, payload, pad and ICRC.
    fn buffer_len(&self) -> usize;
    /// Writes all but the payload into `buf` (exactly [`EmitHeaders::buffer_len`] bytes);
    /// returns where the payload starts. `Err` if the packet does not fit its opcode.
    fn emit_headers(&self, buf: &mut [u8]) -> Result<usize, WireError>;
    /// The payload (or a stand-in of its length, for a payload written by the builder).
    fn payload(&self) -> &[u8];
}

impl EmitHeaders for RoceRepr<'_> {
    fn buffer_len(&self) -> usize {
        RoceRepr::buffer_len(self)
    }
    fn emit_headers(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        RoceRepr::emit_headers(self, buf)
    }
    fn payload(&self) -> &[u8] {
        self.payload
    }
}

/// A packet of an opcode without extension headers: BTH, payload, pad and ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthOnly<'a> {
    /// The BTH (its pad count follows from the payload's length when emitted).
    pub bth: BthRepr,
    /// The payload.
    pub payload: &'a [u8],
}

impl EmitHeaders for BthOnly<'_> {
    fn buffer_len(&self) -> usize {
        BTH_LEN + self.payload.len() + pad_for(self.payload.len()) + ICRC_LEN
    }

    /// `HeaderMismatch` for an opcode that carries extension headers (or an unknown one),
    /// otherwise the checks and bytes of [`RoceRepr::emit_headers`].
    fn emit_headers(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let opcode = self.bth.opcode;
        let info = opcode.info().ok_or(WireError::UnknownOpcode(opcode.0))?;
        if let Some(layout) = info.headers.iter().next() {
            return Err(WireError::HeaderMismatch {
                opcode,
                header: layout.name,
                required: true,
            });
        }
        check_payload(info, self.payload.len())?;
        emit_frame(&self.bth, BTH_LEN, self.payload.len(), buf)?;
        Ok(BTH_LEN)
    }

    fn payload(&self) -> &[u8] {
        self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::super::opcode::Opcode;
    use super::super::psn::Psn;
    use super::*;

    fn bth(opcode: Opcode) -> BthRepr {
        BthRepr {
            solicited: true,
            ack_req: true,
            ..BthRepr::new(opcode, 0x12_3456, Psn::new(0xab_cdef))
        }
    }

    #[test]
    fn emits_the_bytes_of_the_full_repr_for_every_opcode_without_extension_headers() {
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        let mut checked = 0;
        for code in 0..=255u8 {
            let opcode = Opcode(code);
            let Some(info) = opcode.info() else { continue };
            if !info.headers.is_empty() {
                continue;
            }
            for len in [0usize, 1, 2, 3, 4, 5, 8, 16, 255, 4096] {
                let repr = RoceRepr::new(bth(opcode), &payload[..len]);
                let lean = BthOnly {
                    bth: bth(opcode),
                    payload: &payload[..len],
                };
                assert_eq!(EmitHeaders::buffer_len(&lean), repr.buffer_len());
                // Both into garbage: every byte but the payload's must be written.
                let mut want = vec![0xa5; repr.buffer_len()];
                let mut got = vec![0x5a; repr.buffer_len()];
                let want_at = repr.emit_headers(&mut want);
                let got_at = EmitHeaders::emit_headers(&lean, &mut got);
                assert_eq!(got_at, want_at, "{opcode:?} len {len}");
                if let Ok(at) = got_at {
                    let end = at + len;
                    assert_eq!(got[..at], want[..at], "{opcode:?} len {len}");
                    assert_eq!(got[end..], want[end..], "{opcode:?} len {len}");
                    checked += 1;
                }
            }
        }
        assert!(
            checked >= 20,
            "only {checked} opcode and length pairs emitted"
        );
    }

    #[test]
    fn refuses_an_opcode_with_extension_headers_and_a_wrong_buffer() {
        let lean = BthOnly {
            bth: bth(Opcode::RC_RDMA_WRITE_FIRST),
            payload: &[1, 2, 3, 4],
        };
        assert_eq!(
            EmitHeaders::emit_headers(&lean, &mut [0; 40]),
            Err(WireError::HeaderMismatch {
                opcode: Opcode::RC_RDMA_WRITE_FIRST,
                header: "RETH",
                required: true,
            })
        );
        let send = BthOnly {
            bth: bth(Opcode::RC_SEND_ONLY),
            payload: &[1, 2, 3, 4],
        };
        assert!(matches!(
            EmitHeaders::emit_headers(&send, &mut [0; 21]),
            Err(WireError::LengthMismatch {
                expected: 20,
                got: 21,
                ..
            })
        ));
    }
}
