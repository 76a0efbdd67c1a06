//! The two ends every case runs between, on one backend: two emulated devices on loopback,
//! or one rdma-core device opened twice (rxe and NICs loop traffic between two QPs of the
//! same device back through their own port).

use std::time::Duration;

use softverbs::select::Provider;
use softverbs::{
    AccessFlags, AhAttr, Context, Cq, GidType, Mr, Pd, Qp, QpCap, QpType, RcConnectOptions, RecvWr,
    SendWr, Sge, Srq, WorkCompletion,
};
use softverbs_conformance::{buffer, register_and_open, test_ip};
use softverbs_testkit::qp_cap;

/// Bound on every wait: generous, since kernel rxe under TCG is slow; a case fails (never
/// hangs) when it passes.
pub const WAIT: Duration = Duration::from_secs(30);
/// Bytes of each end's MR.
pub const MR_LEN: usize = 256 * 1024;
/// Q_Key of the UD cases.
pub const QKEY: u32 = 0x1117_0000;

/// Test file number of this suite: emulated devices on 127.10.61.n.
const FILE: u8 = 61;
/// UDP port of the suite's emulated devices. Not 4791: where kernel rxe is loaded (the lab
/// guest, where this suite also runs against it) its socket holds 4791 on every address.
const EMU_UDP_PORT: u16 = 14791;

/// Where the cases run.
pub struct Bench {
    /// `emu` or `hw`.
    pub backend: &'static str,
    /// Device name(s), for messages.
    pub device: String,
    /// Opens the context of end `0` or `1`.
    open: Box<dyn Fn(usize) -> Context + Send + Sync>,
}

/// The emulated devices of this suite, registered once per process.
fn emu_names() -> [String; 2] {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    let names = [1u8, 2].map(|n| format!("sv-f{FILE}-{n}"));
    REGISTERED.call_once(|| {
        for (i, name) in names.iter().enumerate() {
            let mut cfg = softverbs::DeviceConfig::new(name.clone(), test_ip(FILE, i as u8 + 1));
            cfg.udp_port = EMU_UDP_PORT;
            drop(register_and_open(cfg));
        }
    });
    names
}

impl Bench {
    /// Two emulated devices on 127.10.61.1 and .2 (UDP port [`EMU_UDP_PORT`]).
    pub fn emu() -> Bench {
        let names = emu_names();
        Bench {
            backend: "emu",
            device: names.join("+"),
            open: Box::new(move |i| {
                Context::open_with(&names[i], Provider::Emu)
                    .unwrap_or_else(|e| panic!("opening {}: {e}", names[i]))
            }),
        }
    }

    /// rdma-core device `name`, opened once per end.
    pub fn hw(name: &str) -> Bench {
        let owned = name.to_string();
        Bench {
            backend: "hw",
            device: name.to_string(),
            open: Box::new(move |_| {
                Context::open_with(&owned, Provider::Hw)
                    .unwrap_or_else(|e| panic!("opening {owned}: {e}"))
            }),
        }
    }

    /// A fresh context of end `i` (0 or 1).
    pub fn context(&self, i: usize) -> Context {
        let ctx = (self.open)(i);
        assert_eq!(
            ctx.provider().backend_name(),
            self.backend,
            "backend of {}",
            ctx.name()
        );
        ctx
    }
}

/// The GID index a RoCEv2 connection uses on `ctx`: the first RoCEv2 entry holding an
/// IPv4-mapped address (what the emulator has at index 1 and rxe after its link-local ones).
pub fn roce_v2_ipv4_gid_index(ctx: &Context) -> u8 {
    let len = ctx.query_port(1).expect("query_port").gid_tbl_len.min(256);
    (0..len)
        .find(|&i| {
            ctx.query_gid(1, i).is_ok_and(|e| {
                e.gid_type == GidType::RoceV2
                    && e.gid.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
            })
        })
        .unwrap_or_else(|| panic!("{}: no RoCEv2 IPv4 GID", ctx.name())) as u8
}

/// How an end is built.
#[derive(Clone, Copy)]
pub struct EndConfig {
    /// Transport.
    pub qp_type: QpType,
    /// QP capacities.
    pub cap: QpCap,
    /// Access flags of the end's MR.
    pub mr_access: AccessFlags,
}

impl EndConfig {
    /// A QP of `qp_type` with room for 64 WRs of 4 SGEs, over an MR every operation may use.
    pub fn new(qp_type: QpType) -> EndConfig {
        EndConfig {
            qp_type,
            cap: qp_cap(64, 4),
            mr_access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Objects an end shares instead of creating its own.
#[derive(Default)]
pub struct Parts<'a> {
    /// The PD.
    pub pd: Option<&'a Pd>,
    /// The receive CQ.
    pub rcq: Option<&'a Cq>,
    /// The SRQ to receive from (needs `pd` to be its PD).
    pub srq: Option<&'a Srq>,
}

/// One end: context, PD, CQs, a QP and one MR of [`MR_LEN`] bytes.
pub struct End {
    pub ctx: Context,
    pub pd: Pd,
    pub scq: Cq,
    pub rcq: Cq,
    pub qp: Qp,
    pub mr: Mr,
    pub gid_index: u8,
}

impl End {
    /// Builds end `i` of `bench` on a fresh context.
    pub fn new(bench: &Bench, i: usize, cfg: &EndConfig) -> End {
        End::build(&bench.context(i), cfg, &Parts::default())
    }

    /// Builds an end on `ctx`, with the objects `parts` gives shared rather than new.
    pub fn build(ctx: &Context, cfg: &EndConfig, parts: &Parts<'_>) -> End {
        let pd = match parts.pd {
            Some(pd) => pd.clone(),
            None => ctx.alloc_pd().expect("alloc_pd"),
        };
        let scq = ctx.create_cq(256).expect("create send CQ");
        let rcq = match parts.rcq {
            Some(cq) => cq.clone(),
            None => ctx.create_cq(256).expect("create recv CQ"),
        };
        let mut builder = pd.qp_builder().qp_type(cfg.qp_type).cap(cfg.cap);
        if let Some(s) = parts.srq {
            builder = builder.srq(s);
        }
        let qp = builder.build(&scq, &rcq).expect("create QP");
        let mr = pd
            .register(buffer(MR_LEN), cfg.mr_access)
            .expect("register MR");
        End {
            gid_index: roce_v2_ipv4_gid_index(ctx),
            ctx: ctx.clone(),
            pd,
            scq,
            rcq,
            qp,
            mr,
        }
    }

    /// An SGE of `len` bytes at `offset` of the MR.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        self.mr.sge(offset, len).expect("SGE inside the MR")
    }

    /// Posts one receive of `len` bytes at `offset`.
    pub fn post_recv(&self, wr_id: u64, offset: usize, len: u32) {
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: vec![self.sge(offset, len)],
            }])
            .unwrap_or_else(|e| panic!("post_recv {wr_id}: {e}"));
    }

    /// Posts one send WR.
    pub fn post_send(&self, wr: SendWr) {
        let id = wr.wr_id;
        self.qp
            .post_send(&[wr])
            .unwrap_or_else(|e| panic!("post_send {id}: {e}"));
    }

    /// This end's GID.
    pub fn gid(&self) -> softverbs::Gid {
        self.ctx
            .query_gid(1, self.gid_index as u32)
            .expect("query_gid")
            .gid
    }

    /// The bytes of the MR at `offset`.
    pub fn bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mr.read(offset, &mut out).expect("read MR");
        out
    }
}

/// Connection options for an end with GID index `gid_index`.
pub fn opts(gid_index: u8) -> RcConnectOptions {
    RcConnectOptions {
        sgid_index: gid_index,
        ..RcConnectOptions::default()
    }
}

/// Two ends of `cfg` on `bench`, connected (RC / UC) or activated (UD).
pub fn pair(bench: &Bench, cfg: &EndConfig) -> (End, End) {
    let a = End::new(bench, 0, cfg);
    let b = End::new(bench, 1, cfg);
    connect(&a, &b, cfg.qp_type);
    (a, b)
}

/// Connects `a` and `b` (RC / UC: RESET to RTS towards each other; UD: to RTS).
pub fn connect(a: &End, b: &End, qp_type: QpType) {
    match qp_type {
        QpType::Ud => {
            a.qp.activate_ud(QKEY, 0x100).expect("activate a");
            b.qp.activate_ud(QKEY, 0x200).expect("activate b");
        }
        t => {
            let (oa, ob) = (opts(a.gid_index), opts(b.gid_index));
            let ea = a.qp.endpoint(0x12_3456, a.gid_index).expect("endpoint a");
            let eb = b.qp.endpoint(0xff_fff0, b.gid_index).expect("endpoint b");
            if t == QpType::Rc {
                a.qp.connect_rc(0x12_3456, &eb, &oa).expect("connect a");
                b.qp.connect_rc(0xff_fff0, &ea, &ob).expect("connect b");
            } else {
                a.qp.connect_uc(0x12_3456, &eb, &oa).expect("connect a");
                b.qp.connect_uc(0xff_fff0, &ea, &ob).expect("connect b");
            }
        }
    }
}

/// The AH on `from` towards `to` (UD).
pub fn ah_to(from: &End, to: &End) -> softverbs::Ah {
    from.pd
        .create_ah(&AhAttr {
            dgid: to.gid(),
            sgid_index: from.gid_index,
            hop_limit: 64,
            port_num: 1,
            udp_dport: to
                .ctx
                .emulator()
                .map(|e| e.local_addr().port())
                .filter(|&p| p != 4791),
            ..AhAttr::default()
        })
        .expect("create_ah")
}

/// Waits (at most [`WAIT`]) for exactly `n` completions on `cq`.
pub fn poll_n(cq: &Cq, n: usize, what: &str) -> Vec<WorkCompletion> {
    let got = cq.poll_wait(n, WAIT).expect("poll_cq");
    assert_eq!(
        got.len(),
        n,
        "{what}: {n} completions expected within {WAIT:?}, got {got:?}"
    );
    got
}

/// Waits for one completion on `cq`.
pub fn poll_1(cq: &Cq, what: &str) -> WorkCompletion {
    poll_n(cq, 1, what).remove(0)
}

/// Asserts that no completion arrives on `cq` within `settle`.
pub fn assert_quiet(cq: &Cq, settle: Duration, what: &str) {
    let got = cq.poll_wait(1, settle).expect("poll_cq");
    assert!(got.is_empty(), "{what}: unexpected completions {got:?}");
}
