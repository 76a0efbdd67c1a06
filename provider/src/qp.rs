//! Queue pairs, and the usual RC connection sequence.

use std::sync::Arc;

use softverbs_api::{
    qp::AhAttr, AccessFlags, Gid, Mtu, PostError, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpPoster,
    QpState, QpType, RecvWr, SendWr, VerbsResult,
};

use crate::cq::Cq;
use crate::pd::Pd;
use crate::srq::Srq;

struct QpInner {
    // Parents kept alive for as long as the QP exists.
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    srq: Option<Srq>,
    qpn: u32,
    cap: QpCap,
    /// The multicast groups it is attached to: detached before it is destroyed, which
    /// the verbs refuse (EBUSY) while any attachment is left.
    mcast_groups: parking_lot::Mutex<Vec<Gid>>,
    /// Its post calls: bound to it if the backend offers that, so that a post skips the
    /// lookup of the QP by number (see `QpDataPath`).
    poster: QpPoster,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let backend = &self.pd.inner.ctx.inner.backend;
        for gid in self.mcast_groups.get_mut().drain(..) {
            let _ = backend.detach_mcast(self.qpn, &gid);
        }
        let _ = backend.destroy_qp(self.qpn);
    }
}

/// A queue pair (`ibv_qp`). It holds its PD and CQs, so they outlive it. Cloning shares
/// it; it is destroyed with the last clone.
#[derive(Clone)]
pub struct Qp {
    inner: Arc<QpInner>,
}

/// Describes a QP to create (`ibv_qp_init_attr`).
pub struct QpBuilder<'a> {
    pd: &'a Pd,
    qp_type: QpType,
    cap: QpCap,
    sq_sig_all: bool,
    srq: Option<Srq>,
}

impl<'a> QpBuilder<'a> {
    pub(crate) fn new(pd: &'a Pd) -> Self {
        QpBuilder {
            pd,
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            srq: None,
        }
    }

    /// Receive from shared receive queue `srq` instead of an own receive queue.
    pub fn srq(mut self, srq: &Srq) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// Transport type (RC by default).
    pub fn qp_type(mut self, t: QpType) -> Self {
        self.qp_type = t;
        self
    }

    /// Queue sizes and limits.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Every send WR completes, whatever its flags.
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.sq_sig_all = on;
        self
    }

    /// `ibv_create_qp` with these CQs (they may be the same).
    pub fn build(self, send_cq: &Cq, recv_cq: &Cq) -> VerbsResult<Qp> {
        let init = QpInitAttr {
            qp_type: self.qp_type,
            send_cq: send_cq.id(),
            recv_cq: recv_cq.id(),
            srq: self.srq.as_ref().map(Srq::id),
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
        };
        let (qpn, cap) = self
            .pd
            .inner
            .ctx
            .inner
            .backend
            .create_qp(self.pd.id(), &init)?;
        Ok(Qp {
            inner: Arc::new(QpInner {
                pd: self.pd.clone(),
                send_cq: send_cq.clone(),
                recv_cq: recv_cq.clone(),
                srq: self.srq,
                qpn,
                cap,
                mcast_groups: Default::default(),
                poster: QpPoster::new(&*self.pd.inner.ctx.inner.backend, qpn),
            }),
        })
    }
}

/// What one side of an RC connection tells the other (as ibv_rc_pingpong exchanges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcEndpoint {
    /// QP number.
    pub qpn: u32,
    /// First PSN it will send.
    pub psn: u32,
    /// Its GID.
    pub gid: Gid,
    /// UDP port it receives on, when not 4791 (emulator-to-emulator only).
    pub udp_port: Option<u16>,
}

/// Connection parameters, with rxe-like defaults.
#[derive(Debug, Clone, Copy)]
pub struct RcConnectOptions {
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Remote access this QP allows.
    pub access: AccessFlags,
    /// Local ACK timeout exponent (14: about 67 ms).
    pub timeout: u8,
    /// Transport retries (7 = infinite).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP asks senders to wait.
    pub min_rnr_timer: u8,
    /// Outstanding READ / atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding READ / atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// Local GID index.
    pub sgid_index: u8,
}

impl Default for RcConnectOptions {
    fn default() -> Self {
        RcConnectOptions {
            path_mtu: Mtu::Mtu1024,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            sgid_index: 1,
        }
    }
}

impl Qp {
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qpn
    }

    /// Granted capacities.
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &Cq {
        &self.inner.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &Cq {
        &self.inner.recv_cq
    }

    /// The SRQ it receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.inner.srq.as_ref()
    }

    fn backend(&self) -> &Arc<dyn softverbs_api::VerbsContext> {
        &self.inner.pd.inner.ctx.inner.backend
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        self.backend().modify_qp(self.inner.qpn, attr, mask)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> VerbsResult<(QpAttr, QpInitAttr)> {
        self.backend().query_qp(self.inner.qpn)
    }

    /// Current state.
    pub fn state(&self) -> VerbsResult<QpState> {
        Ok(self.query()?.0.qp_state)
    }

    /// `ibv_attach_mcast`: this UD QP receives what is sent to multicast group `gid`
    /// (an IPv4-mapped multicast GID such as `::ffff:239.1.2.3`; senders address it with an
    /// AH to `gid` and remote QPN 0xFFFFFF). Attaching twice is not an error; ENOMEM
    /// beyond the device's `max_mcast_grp` / `max_mcast_qp_attach`.
    pub fn attach_mcast(&self, gid: &Gid) -> VerbsResult<()> {
        let mut groups = self.inner.mcast_groups.lock();
        self.backend().attach_mcast(self.inner.qpn, gid)?;
        if !groups.contains(gid) {
            groups.push(*gid);
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: EINVAL when the QP is not attached to `gid`.
    pub fn detach_mcast(&self, gid: &Gid) -> VerbsResult<()> {
        let mut groups = self.inner.mcast_groups.lock();
        self.backend().detach_mcast(self.inner.qpn, gid)?;
        groups.retain(|g| g != gid);
        Ok(())
    }

    /// `ibv_post_send`; on failure, the index of the first WR not posted.
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<(), PostError> {
        self.inner.poster.post_send(&**self.backend(), wrs)
    }

    /// `ibv_post_recv`; on failure, the index of the first WR not posted.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.inner.poster.post_recv(&**self.backend(), wrs)
    }

    /// This side's endpoint for a connection starting at `psn`.
    pub fn endpoint(&self, psn: u32, sgid_index: u8) -> VerbsResult<RcEndpoint> {
        let ctx = &self.inner.pd.inner.ctx;
        let gid = ctx.query_gid(1, sgid_index as u32)?.gid;
        let udp_port = ctx
            .emulator()
            .map(|e| e.local_addr().port())
            .filter(|&p| p != 4791);
        Ok(RcEndpoint {
            qpn: self.inner.qpn,
            psn,
            gid,
            udp_port,
        })
    }

    /// RESET → INIT → RTR → RTS of a UD QP with Q_Key `qkey`, sending from PSN `sq_psn`.
    pub fn activate_ud(&self, qkey: u32, sq_psn: u32) -> VerbsResult<()> {
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        self.modify(
            &init,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        self.modify(&rtr, QpAttrMask::STATE)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            ..QpAttr::default()
        };
        self.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
    }

    /// RESET → INIT → RTR → RTS of a UC QP towards `remote`, sending from PSN `local_psn`,
    /// with the attribute masks ibv_modify_qp(3) requires for UC (only `path_mtu`, `access`
    /// and `sgid_index` of `opts` apply).
    pub fn connect_uc(
        &self,
        local_psn: u32,
        remote: &RcEndpoint,
        opts: &RcConnectOptions,
    ) -> VerbsResult<()> {
        self.connect(
            local_psn,
            remote,
            opts,
            QpAttrMask::empty(),
            QpAttrMask::empty(),
        )
    }

    /// INIT → RTR → RTS with the path attributes both RC and UC need, plus `rtr_extra` and
    /// `rts_extra` (the RC-only ones); the attribute values all come from `opts`.
    fn connect(
        &self,
        local_psn: u32,
        remote: &RcEndpoint,
        opts: &RcConnectOptions,
        rtr_extra: QpAttrMask,
        rts_extra: QpAttrMask,
    ) -> VerbsResult<()> {
        self.to_init(opts)?;
        let rtr = rtr_attr(remote, opts);
        let rtr_mask = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        self.modify(&rtr, rtr_mask | rtr_extra)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: local_psn,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            max_rd_atomic: opts.max_rd_atomic,
            ..QpAttr::default()
        };
        self.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN | rts_extra)
    }

    fn to_init(&self, opts: &RcConnectOptions) -> VerbsResult<()> {
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: opts.access,
            ..QpAttr::default()
        };
        self.modify(
            &init,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
    }

    /// RESET → INIT → RTR → RTS towards `remote`, sending from PSN `local_psn`, with the
    /// attribute masks ibv_modify_qp(3) requires for RC.
    pub fn connect_rc(
        &self,
        local_psn: u32,
        remote: &RcEndpoint,
        opts: &RcConnectOptions,
    ) -> VerbsResult<()> {
        self.connect(
            local_psn,
            remote,
            opts,
            QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER,
            QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
    }
}

/// The RTR attributes towards `remote` (RC and UC; UC ignores the RC-only ones).
fn rtr_attr(remote: &RcEndpoint, opts: &RcConnectOptions) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: opts.path_mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: opts.max_dest_rd_atomic,
        min_rnr_timer: opts.min_rnr_timer,
        ah_attr: AhAttr {
            dgid: remote.gid,
            sgid_index: opts.sgid_index,
            hop_limit: 64,
            port_num: 1,
            udp_dport: remote.udp_port,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    }
}

impl Pd {
    /// Starts describing a QP in this PD.
    pub fn qp_builder(&self) -> QpBuilder<'_> {
        QpBuilder::new(self)
    }
}
