#!/usr/bin/env python3
"""The rxe side of a lab scenario: one RC, UC or UD QP on rxe0, driven line by line over
stdin/stdout by `softverbs rxe-lab run` (through ssh).

Usage: peer.py [BUF_LEN [rc|uc|ud]]

Protocol: one request per line, `cmd key=value ...`; one reply per line, `ok key=value ...`
or `err message`. Integers are decimal. Copied into the guest at run time, so changing it
does not rebuild the image.

Data pattern (shared with tools/src/rxe_lab/pattern.rs): byte i of pattern `seed` is
block[i % 251] with block[j] = (j * 167 + seed * 59 + 11) % 256, so shifted or stale data
shows as a mismatch.
"""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PATTERN_PERIOD = 251
MTU_ENUM = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024,
            2048: e.IBV_MTU_2048, 4096: e.IBV_MTU_4096}
OPCODES = {
    "SEND": e.IBV_WR_SEND,
    "SEND_IMM": e.IBV_WR_SEND_WITH_IMM,
    "WRITE": e.IBV_WR_RDMA_WRITE,
    "WRITE_IMM": e.IBV_WR_RDMA_WRITE_WITH_IMM,
    "READ": e.IBV_WR_RDMA_READ,
    "CMP_SWAP": e.IBV_WR_ATOMIC_CMP_AND_SWP,
    "FETCH_ADD": e.IBV_WR_ATOMIC_FETCH_AND_ADD,
    "SEND_INV": e.IBV_WR_SEND_WITH_INV,
}
QP_TYPES = {"rc": e.IBV_QPT_RC, "uc": e.IBV_QPT_UC, "ud": e.IBV_QPT_UD}
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
          e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_MW_BIND)
# What a UC QP may be given (no READ, no atomics).
UC_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
# The Q_Key of lab UD QPs (ibv_ud_pingpong's).
UD_QKEY = 0x11111111
MW_ACCESS = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)


def pattern(seed, length):
    block = bytes((j * 167 + seed * 59 + 11) % 256 for j in range(PATTERN_PERIOD))
    reps = length // PATTERN_PERIOD + 1
    return (block * reps)[:length]


class Peer:
    def __init__(self, buf_len, qp_type="rc", device="rxe0", gid_index=1):
        self.qp_type = qp_type
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.buf_len = buf_len
        self.mr = MR(self.pd, max(buf_len, 8), ACCESS)
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=QP_TYPES[qp_type], scq=self.cq,
                                         rcq=self.cq, cap=cap))
        self.ah = None
        self.remote_qpn = 0
        self.mw = None
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(1, gid_index)
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_INIT
        attr.pkey_index = 0
        attr.port_num = 1
        mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
        if qp_type == "ud":
            attr.qkey = UD_QKEY
            mask |= e.IBV_QP_QKEY
        else:
            attr.qp_access_flags = ACCESS if qp_type == "rc" else UC_ACCESS
            mask |= e.IBV_QP_ACCESS_FLAGS
        self.qp.modify(attr, mask)
        self.psn = int(time.time() * 1e6) & 0xffffff

    def info(self):
        return dict(qpn=self.qp.qp_num, psn=self.psn, gid=str(self.gid),
                    addr=self.mr.buf, rkey=self.mr.rkey, qkey=UD_QKEY)

    def connect(self, qpn, psn, gid, mtu, timeout, retry):
        if self.qp_type == "ud":
            return self.connect_ud(qpn, gid)
        if self.qp_type == "uc":
            return self.connect_uc(qpn, psn, gid, mtu)
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTR
        attr.path_mtu = MTU_ENUM[mtu]
        attr.dest_qp_num = qpn
        attr.rq_psn = psn
        attr.max_dest_rd_atomic = 4
        attr.min_rnr_timer = 12
        gr = GlobalRoute(dgid=GID(gid), sgid_index=self.gid_index)
        gr.hop_limit = 64
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU |
                       e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
                       e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTS
        attr.sq_psn = self.psn
        attr.timeout = timeout
        attr.retry_cnt = retry
        attr.rnr_retry = 7
        attr.max_rd_atomic = 4
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT |
                       e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
        return {}

    def route(self, gid):
        gr = GlobalRoute(dgid=GID(gid), sgid_index=self.gid_index)
        gr.hop_limit = 64
        return AHAttr(gr=gr, is_global=1, port_num=1)

    def connect_uc(self, qpn, psn, gid, mtu):
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTR
        attr.path_mtu = MTU_ENUM[mtu]
        attr.dest_qp_num = qpn
        attr.rq_psn = psn
        attr.ah_attr = self.route(gid)
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU |
                       e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN)
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTS
        attr.sq_psn = self.psn
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        return {}

    def connect_ud(self, qpn, gid):
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTR
        self.qp.modify(attr, e.IBV_QP_STATE)
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_RTS
        attr.sq_psn = self.psn
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        self.ah = AH(self.pd, attr=self.route(gid))
        self.remote_qpn = qpn
        return {}

    def bind_mw(self, wr_id, offset, length):
        """Binds a type 2 window over [offset, offset + length) of the buffer with remote
        write and read rights; replies with its rkey once the bind has completed."""
        if self.mw is None:
            self.mw = MW(self.pd, e.IBV_MW_TYPE_2)
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(self.mw, MWBindInfo(self.mr, self.mr.buf + offset, length, MW_ACCESS))
        self.qp.post_send(wr)
        wc = self.poll(60000)
        if wc["status"] != 0:
            raise RuntimeError(f"bind completed with status {wc['status']}")
        return dict(rkey=wr.rkey, addr=self.mr.buf + offset)

    def sge(self, offset, length):
        return SGE(self.mr.buf + offset, length, self.mr.lkey)

    def post_recv(self, wr_id, offset, length):
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self.sge(offset, length)]))
        return {}

    def post_send(self, wr_id, op, offset, length, raddr=0, rkey=0, imm=0,
                  compare=0, swap=0, add=0, inv=0, qkey=UD_QKEY):
        wr = SendWR(wr_id=wr_id, opcode=OPCODES[op], num_sge=1,
                    sg=[self.sge(offset, length)], send_flags=e.IBV_SEND_SIGNALED)
        if op in ("SEND_IMM", "WRITE_IMM"):
            wr.imm_data = imm
        if op == "SEND_INV":
            # imm_data shares its union with invalidate_rkey (host order).
            wr.imm_data = inv
        if self.qp_type == "ud":
            wr.set_wr_ud(self.ah, self.remote_qpn, qkey)
        if op in ("WRITE", "WRITE_IMM", "READ"):
            wr.set_wr_rdma(rkey, raddr)
        if op == "CMP_SWAP":
            wr.set_wr_atomic(rkey, raddr, compare, swap)
        if op == "FETCH_ADD":
            wr.set_wr_atomic(rkey, raddr, add, 0)
        self.qp.post_send(wr)
        return {}

    def poll(self, timeout_ms):
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            n, wcs = self.cq.poll(1)
            if n > 0:
                wc = wcs[0]
                return dict(wr_id=wc.wr_id, status=wc.status, opcode=wc.opcode,
                            byte_len=wc.byte_len, imm=wc.imm_data, wc_flags=wc.wc_flags,
                            qp_num=wc.qp_num, src_qp=wc.src_qp, vendor_err=wc.vendor_err)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no completion within {timeout_ms} ms")
            time.sleep(0.001)

    def fill(self, offset, length, seed):
        if length:
            self.mr.write(pattern(seed, length), length, offset)
        return {}

    def zero(self, offset, length):
        if length:
            self.mr.write(bytes(length), length, offset)
        return {}

    def check(self, offset, length, seed):
        got = self.mr.read(length, offset) if length else b""
        want = pattern(seed, length)
        if got == want:
            return dict(match=1)
        first = next(i for i in range(length) if got[i] != want[i])
        return dict(match=0, first_diff=first)

    def counter(self, name):
        """One of rxe0's port hw_counters (e.g. rcvd_rnr_err, send_rnr_err)."""
        path = f"/sys/class/infiniband/{self.ctx.name}/ports/1/hw_counters/{name}"
        with open(path) as f:
            return dict(value=int(f.read().strip()))

    def hex(self, offset, length):
        """The bytes at offset, in hex (the GRH area of a UD receive, say)."""
        return dict(hex=self.mr.read(length, offset).hex() if length else "")

    def check_zero(self, offset, length):
        got = self.mr.read(length, offset) if length else b""
        return dict(zero=int(not any(got)))

    def read_u64(self, offset):
        return dict(value=int.from_bytes(self.mr.read(8, offset), "little"))

    def write_u64(self, offset, value):
        self.mr.write(int(value).to_bytes(8, "little"), 8, offset)
        return {}


def parse(line):
    words = line.split()
    args = {}
    for w in words[1:]:
        k, _, v = w.partition("=")
        args[k] = v if k in ("op", "gid", "name") else int(v)
    return words[0], args


def main():
    buf_len = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    qp_type = sys.argv[2] if len(sys.argv) > 2 else "rc"
    peer = Peer(buf_len, qp_type)
    out = sys.stdout
    out.write("ok " + " ".join(f"{k}={v}" for k, v in peer.info().items()) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd, args = parse(line)
        if cmd == "quit":
            out.write("ok\n")
            out.flush()
            return
        try:
            reply = getattr(peer, cmd)(**args)
            out.write("ok " + " ".join(f"{k}={v}" for k, v in reply.items()) + "\n")
        except Exception as ex:  # every failure goes back to the runner as a reply
            out.write("err " + f"{type(ex).__name__}: {ex}".replace("\n", " ") + "\n")
        out.flush()


if __name__ == "__main__":
    main()
