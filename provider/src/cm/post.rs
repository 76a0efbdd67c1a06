//! The rdma_verbs.h helpers on an id, with their man pages' semantics: the `context`
//! comes back as the completion's wr_id; without a registered MR a send or write must be
//! inline (IBV_SEND_INLINE, else EINVAL) and its bytes are taken at post time; receives
//! and reads need registered memory; errors carry the errno libibverbs would set.

use std::time::Duration;

use softverbs_api::wr::{RemoteAddr, UdDest};
use softverbs_api::{
    AccessFlags, RecvWr, SendFlags, SendWr, Sge, VerbsError, VerbsResult, WorkCompletion, WrOpcode,
};
use softverbs_emu::memory::RdmaBuffer;

use crate::ah::Ah;
use crate::cm::conn::RDMA_UDP_QKEY;
use crate::cm::shared::{CmId, IdState};
use crate::cq::Cq;
use crate::mr::Mr;

/// The local side of a send or write: registered memory, or bytes sent inline.
#[derive(Clone, Copy)]
pub enum Local<'a> {
    /// `len` bytes at `offset` of a registered region (`addr` + `mr`).
    Mr {
        /// The region.
        mr: &'a Mr,
        /// Where in it.
        offset: usize,
        /// How many bytes.
        len: u32,
    },
    /// Bytes with no registration (`mr` NULL): the send must carry IBV_SEND_INLINE.
    Inline(&'a [u8]),
}

impl<'a> Local<'a> {
    /// The whole of `mr`.
    pub fn whole(mr: &'a Mr) -> Local<'a> {
        Local::Mr {
            mr,
            offset: 0,
            len: mr.len() as u32,
        }
    }
}

impl CmId {
    /// `rdma_post_recv`: a receive of `len` bytes at `offset` of registered `mr`.
    pub fn post_recv(&self, context: u64, mr: &Mr, offset: usize, len: u32) -> VerbsResult<()> {
        self.post_recvv(context, &[mr.sge(offset, len)?])
    }

    /// `rdma_post_recvv`: one receive request over the scatter list `sgl` (registered
    /// memory); one incoming message fills its entries in order.
    pub fn post_recvv(&self, context: u64, sgl: &[Sge]) -> VerbsResult<()> {
        let qp = self.qp().ok_or_else(no_qp)?;
        qp.post_recv(&[RecvWr {
            wr_id: context,
            sg_list: sgl.to_vec(),
        }])
        .map_err(VerbsError::from)
    }

    /// `rdma_post_send`: sends `data` to the connected peer.
    pub fn post_send(&self, context: u64, data: Local<'_>, flags: SendFlags) -> VerbsResult<()> {
        self.post_one(
            context,
            WrOpcode::Send,
            data,
            flags,
            RemoteAddr::default(),
            None,
        )
    }

    /// `rdma_post_sendv`: sends the gather list `sgl` (registered memory, or any memory
    /// the device can read with IBV_SEND_INLINE and valid lkeys).
    pub fn post_sendv(&self, context: u64, sgl: &[Sge], flags: SendFlags) -> VerbsResult<()> {
        self.post_sgl(context, WrOpcode::Send, sgl, flags, RemoteAddr::default())
    }

    /// `rdma_post_write`: writes `data` to the peer's `remote_addr` under `rkey`.
    pub fn post_write(
        &self,
        context: u64,
        data: Local<'_>,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> VerbsResult<()> {
        let remote = RemoteAddr { remote_addr, rkey };
        self.post_one(context, WrOpcode::RdmaWrite, data, flags, remote, None)
    }

    /// `rdma_post_writev`: writes the gather list `sgl` to `remote_addr` under `rkey`.
    pub fn post_writev(
        &self,
        context: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> VerbsResult<()> {
        let remote = RemoteAddr { remote_addr, rkey };
        self.post_sgl(context, WrOpcode::RdmaWrite, sgl, flags, remote)
    }

    /// `rdma_post_read`: reads `len` bytes of the peer's `remote_addr` (under `rkey`) into
    /// `offset` of registered `mr`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_read(
        &self,
        context: u64,
        mr: &Mr,
        offset: usize,
        len: u32,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> VerbsResult<()> {
        let sge = mr.sge(offset, len)?;
        self.post_readv(context, &[sge], flags, remote_addr, rkey)
    }

    /// `rdma_post_readv`: reads into the scatter list `sgl` (registered memory).
    pub fn post_readv(
        &self,
        context: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> VerbsResult<()> {
        if flags.contains(SendFlags::INLINE) {
            return Err(VerbsError::inval("an RDMA READ cannot be inline"));
        }
        let remote = RemoteAddr { remote_addr, rkey };
        self.post_sgl(context, WrOpcode::RdmaRead, sgl, flags, remote)
    }

    /// `rdma_post_ud_send`: a UD send of `data` to `remote_qpn` through `ah`, with
    /// rdma_cm's Q_Key.
    pub fn post_ud_send(
        &self,
        context: u64,
        data: Local<'_>,
        flags: SendFlags,
        ah: &Ah,
        remote_qpn: u32,
    ) -> VerbsResult<()> {
        let dest = ah.dest(remote_qpn, RDMA_UDP_QKEY);
        self.post_one(
            context,
            WrOpcode::Send,
            data,
            flags,
            RemoteAddr::default(),
            Some(dest),
        )
    }

    /// Where a resolved UD id sends (the ESTABLISHED event's address handle, QPN, Q_Key).
    pub fn ud_dest(&self) -> Option<(Ah, u32, u32)> {
        self.shared.state.lock().ud_dest.clone()
    }

    /// `rdma_get_send_comp`: the next send completion, waiting for it (errors come back
    /// as the completion's status). Blocks while none comes; see
    /// [`CmId::get_send_comp_timeout`].
    pub fn get_send_comp(&self) -> VerbsResult<WorkCompletion> {
        wait_comp(&self.send_cq().ok_or_else(no_qp)?, None)
    }

    /// `rdma_get_recv_comp`: the next receive completion, waiting for it.
    pub fn get_recv_comp(&self) -> VerbsResult<WorkCompletion> {
        wait_comp(&self.recv_cq().ok_or_else(no_qp)?, None)
    }

    /// [`CmId::get_send_comp`] giving up after `timeout` (ETIMEDOUT).
    pub fn get_send_comp_timeout(&self, timeout: Duration) -> VerbsResult<WorkCompletion> {
        wait_comp(&self.send_cq().ok_or_else(no_qp)?, Some(timeout))
    }

    /// [`CmId::get_recv_comp`] giving up after `timeout` (ETIMEDOUT).
    pub fn get_recv_comp_timeout(&self, timeout: Duration) -> VerbsResult<WorkCompletion> {
        wait_comp(&self.recv_cq().ok_or_else(no_qp)?, Some(timeout))
    }

    /// `rdma_reg_msgs`: registers `buffer` in the id's PD for sends and receives.
    pub fn reg_msgs(&self, buffer: RdmaBuffer) -> VerbsResult<Mr> {
        self.reg(buffer, AccessFlags::LOCAL_WRITE)
    }

    /// `rdma_reg_read`: registers `buffer` for the peer to RDMA READ.
    pub fn reg_read(&self, buffer: RdmaBuffer) -> VerbsResult<Mr> {
        self.reg(buffer, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
    }

    /// `rdma_reg_write`: registers `buffer` for the peer to RDMA WRITE.
    pub fn reg_write(&self, buffer: RdmaBuffer) -> VerbsResult<Mr> {
        self.reg(buffer, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
    }

    fn reg(&self, buffer: RdmaBuffer, access: AccessFlags) -> VerbsResult<Mr> {
        let pd = self
            .pd()
            .ok_or_else(|| VerbsError::inval("the id has no PD yet (create_qp first)"))?;
        pd.register(buffer, access)
    }

    fn post_sgl(
        &self,
        context: u64,
        opcode: WrOpcode,
        sgl: &[Sge],
        flags: SendFlags,
        remote: RemoteAddr,
    ) -> VerbsResult<()> {
        let qp = self.qp().ok_or_else(no_qp)?;
        let wr = SendWr {
            opcode,
            send_flags: flags,
            remote,
            ..SendWr::send(context, sgl.to_vec())
        };
        qp.post_send(&[wr]).map_err(VerbsError::from)
    }

    fn post_one(
        &self,
        context: u64,
        opcode: WrOpcode,
        data: Local<'_>,
        flags: SendFlags,
        remote: RemoteAddr,
        ud: Option<UdDest>,
    ) -> VerbsResult<()> {
        let mut st = self.shared.state.lock();
        let qp = st.qp.clone().ok_or_else(no_qp)?;
        let sge = match data {
            Local::Mr { mr, offset, len } => mr.sge(offset, len)?,
            Local::Inline(bytes) => {
                if !flags.contains(SendFlags::INLINE) {
                    return Err(VerbsError::inval(
                        "without a registered MR the data must be sent inline (SendFlags::INLINE)",
                    ));
                }
                bounce(&mut st, bytes, qp.cap().max_inline_data)?
            }
        };
        let wr = SendWr {
            opcode,
            send_flags: flags,
            remote,
            ud,
            ..SendWr::send(context, vec![sge])
        };
        // Inline bytes are read during the post, under the lock that guards the bounce.
        qp.post_send(&[wr]).map_err(VerbsError::from)
    }
}

/// Copies inline `bytes` into the id's bounce region (registered on first use); the SGE
/// over them.
fn bounce(st: &mut IdState, bytes: &[u8], max_inline: u32) -> VerbsResult<Sge> {
    if bytes.len() > max_inline as usize {
        return Err(VerbsError::inval(format!(
            "{} bytes of inline data exceed max_inline_data {max_inline}",
            bytes.len()
        )));
    }
    if st.bounce.is_none() {
        let pd = st.pd.clone().ok_or_else(no_qp)?;
        let len = (max_inline as usize).max(1);
        let buffer = RdmaBuffer::new(len).ok_or_else(|| VerbsError::nomem("inline bounce"))?;
        st.bounce = Some(pd.register(buffer, AccessFlags::empty())?);
    }
    let mr = st.bounce.as_ref().ok_or_else(no_qp)?;
    mr.write(0, bytes)?;
    mr.sge(0, bytes.len() as u32)
}

fn no_qp() -> VerbsError {
    VerbsError::inval("the id has no QP (create_qp or create_ep first)")
}

/// The next completion of `cq`, waiting up to `timeout` (`None`: without limit).
fn wait_comp(cq: &Cq, timeout: Option<Duration>) -> VerbsResult<WorkCompletion> {
    const SLICE: Duration = Duration::from_secs(1);
    let Some(timeout) = timeout else {
        loop {
            match cq.poll_one(SLICE) {
                Err(e) if e.errno() == libc::ETIMEDOUT => continue,
                other => return other,
            }
        }
    };
    cq.poll_one(timeout)
}
