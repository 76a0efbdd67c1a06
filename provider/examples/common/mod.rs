//! What every example shares: two devices of its own on loopback and an RC QP on each,
//! connected to the other through the endpoints' text form (what two processes would send
//! each other over a socket).

#![allow(dead_code)] // each example uses part of it

use std::net::IpAddr;

use softverbs::{
    register_device, AccessFlags, Context, Cq, DeviceConfig, Mr, Pd, Qp, RcConnectOptions,
    RcEndpoint, RdmaBuffer, VerbsResult,
};

/// Registers the device `name` on `ip` (UDP 4791 there) and opens it. The examples use
/// 127.0.24.x, so that they run beside the default devices (127.0.0.1 and 127.0.0.2).
pub fn device(name: &str, ip: &str) -> VerbsResult<Context> {
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| softverbs::VerbsError::inval(format!("bad address {ip}")))?;
    register_device(DeviceConfig::new(name, ip))?;
    Context::open(name)
}

/// One side of an RC connection: a PD, one CQ, an RC QP and a registered buffer.
pub struct RcSide {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

impl RcSide {
    /// The objects on `ctx`; the buffer of `len` bytes allows `access` (and local writes).
    pub fn new(ctx: &Context, len: usize, access: AccessFlags) -> VerbsResult<RcSide> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(64)?;
        let qp = pd.qp_builder().build(&cq, &cq)?;
        let buf = RdmaBuffer::new(len).ok_or_else(|| softverbs::VerbsError::nomem("buffer"))?;
        let mr = pd.register(buf, access | AccessFlags::LOCAL_WRITE)?;
        Ok(RcSide {
            ctx: ctx.clone(),
            pd,
            cq,
            qp,
            mr,
        })
    }
}

/// Connects `a` and `b`, each learning the other's endpoint from its one-line text form
/// (`qpn=0x.. psn=0x.. gid=::ffff:127.0.24.1`), as if it had come over a socket.
pub fn connect(a: &RcSide, b: &RcSide) -> VerbsResult<()> {
    let opts = RcConnectOptions::default();
    let (psn_a, psn_b) = (0x1000, 0x2000);
    let text_a = a.qp.endpoint(psn_a, 1)?.to_string();
    let text_b = b.qp.endpoint(psn_b, 1)?.to_string();
    println!("endpoints: {text_a} | {text_b}");
    a.qp.connect_rc(psn_a, &text_b.parse::<RcEndpoint>()?, &opts)?;
    b.qp.connect_rc(psn_b, &text_a.parse::<RcEndpoint>()?, &opts)?;
    Ok(())
}
