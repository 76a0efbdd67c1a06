//! A constructor of [`SendWr`] for every opcode, so that a program names what it posts
//! (`SendWr::write(id, sges, remote)`) instead of editing a SEND's fields. Each WR is
//! signaled; clear [`SendFlags::SIGNALED`] in `send_flags` for an unsignaled one.

use crate::wr::{RemoteAddr, SendWr, Sge, UdDest, WrOpcode};
use crate::SendFlags;

impl SendWr {
    /// An RDMA WRITE of `sg_list` to `remote`.
    pub fn write(wr_id: u64, sg_list: Vec<Sge>, remote: RemoteAddr) -> Self {
        SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote,
            ..SendWr::send(wr_id, sg_list)
        }
    }

    /// An RDMA WRITE_WITH_IMM of `sg_list` to `remote`; the peer's receive completes with
    /// `imm_data`.
    pub fn write_with_imm(
        wr_id: u64,
        sg_list: Vec<Sge>,
        remote: RemoteAddr,
        imm_data: u32,
    ) -> Self {
        SendWr {
            opcode: WrOpcode::RdmaWriteWithImm,
            imm_data,
            ..SendWr::write(wr_id, sg_list, remote)
        }
    }

    /// An RDMA READ of `remote` into `sg_list`.
    pub fn read(wr_id: u64, sg_list: Vec<Sge>, remote: RemoteAddr) -> Self {
        SendWr {
            opcode: WrOpcode::RdmaRead,
            ..SendWr::write(wr_id, sg_list, remote)
        }
    }

    /// An atomic compare-and-swap of the 8 bytes at `remote`: if they equal `compare` they
    /// become `swap`; the original value lands in `result` (an 8-byte SGE).
    pub fn compare_and_swap(
        wr_id: u64,
        result: Sge,
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            opcode: WrOpcode::AtomicCmpAndSwp,
            compare_add: compare,
            swap,
            ..SendWr::write(wr_id, vec![result], remote)
        }
    }

    /// An atomic fetch-and-add of `add` to the 8 bytes at `remote`; the original value
    /// lands in `result` (an 8-byte SGE).
    pub fn fetch_and_add(wr_id: u64, result: Sge, remote: RemoteAddr, add: u64) -> Self {
        SendWr {
            opcode: WrOpcode::AtomicFetchAndAdd,
            compare_add: add,
            ..SendWr::write(wr_id, vec![result], remote)
        }
    }

    /// A SEND of `sg_list` that also invalidates the peer's `rkey` (a type 2 memory window).
    pub fn send_with_inv(wr_id: u64, sg_list: Vec<Sge>, rkey: u32) -> Self {
        SendWr {
            opcode: WrOpcode::SendWithInv,
            invalidate_rkey: rkey,
            ..SendWr::send(wr_id, sg_list)
        }
    }

    /// A LOCAL_INV of `rkey` (a type 2 memory window bound through this QP).
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        SendWr {
            opcode: WrOpcode::LocalInv,
            invalidate_rkey: rkey,
            ..SendWr::send(wr_id, Vec::new())
        }
    }

    /// A UD SEND of `sg_list` to `dest` (address handle, remote QPN and Q_Key).
    pub fn ud_send(wr_id: u64, sg_list: Vec<Sge>, dest: UdDest) -> Self {
        SendWr {
            ud: Some(dest),
            ..SendWr::send(wr_id, sg_list)
        }
    }

    /// The same WR without [`SendFlags::SIGNALED`]: it completes silently unless the QP
    /// signals every WR.
    pub fn unsignaled(mut self) -> Self {
        self.send_flags = SendFlags(self.send_flags.bits() & !SendFlags::SIGNALED.bits());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constructor_sets_its_opcode_and_operands() {
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 7,
        };
        let remote = RemoteAddr {
            remote_addr: 0x2000,
            rkey: 9,
        };
        let w = SendWr::write_with_imm(1, vec![sge], remote, 0xabcd);
        assert_eq!(
            (w.opcode, w.remote, w.imm_data),
            (WrOpcode::RdmaWriteWithImm, remote, 0xabcd)
        );
        let r = SendWr::read(2, vec![sge], remote);
        assert_eq!((r.opcode, r.sg_list[0]), (WrOpcode::RdmaRead, sge));
        let c = SendWr::compare_and_swap(3, sge, remote, 5, 6);
        assert_eq!(
            (c.opcode, c.compare_add, c.swap),
            (WrOpcode::AtomicCmpAndSwp, 5, 6)
        );
        let f = SendWr::fetch_and_add(4, sge, remote, 10);
        assert_eq!((f.opcode, f.compare_add), (WrOpcode::AtomicFetchAndAdd, 10));
        let i = SendWr::send_with_inv(5, vec![], 0x55);
        assert_eq!((i.opcode, i.invalidate_rkey), (WrOpcode::SendWithInv, 0x55));
        let l = SendWr::local_inv(6, 0x66);
        assert_eq!((l.opcode, l.invalidate_rkey), (WrOpcode::LocalInv, 0x66));
        assert!(SendWr::write(7, vec![], remote)
            .send_flags
            .contains(SendFlags::SIGNALED));
        assert!(!SendWr::write(7, vec![], remote)
            .unsignaled()
            .send_flags
            .contains(SendFlags::SIGNALED));
    }
}
