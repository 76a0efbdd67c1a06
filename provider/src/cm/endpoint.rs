//! The convenience layer of librdmacm: `rdma_getaddrinfo` and `rdma_create_ep` (an id with
//! its own channel, resolved and with a QP), and the synchronous calls such an id offers
//! (`rdma_get_request`, a connect or accept that returns once connected).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use softverbs_api::{VerbsError, VerbsResult};
use softverbs_emu::wire::cm::PortSpace;

use crate::cm::channel::EventChannel;
use crate::cm::conn::{ConnParam, QpOptions};
use crate::cm::event::{CmEvent, EventType};
use crate::cm::shared::CmId;
use crate::pd::Pd;

/// `struct rdma_addrinfo`, the part that applies here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrInfo {
    /// Where to bind (passive) or send from (active).
    pub src: Option<SocketAddr>,
    /// Where to connect (active).
    pub dst: Option<SocketAddr>,
    /// RAI_PASSIVE: for a listener.
    pub passive: bool,
    /// Port space (TCP: RC, UDP: UD).
    pub port_space: PortSpace,
}

/// `rdma_getaddrinfo(node, service, hints)`: `node` and `service` resolved as host and
/// port; for a passive lookup `node` is the address to bind, else the one to connect to
/// (with `src` as the source, `rping -I`).
pub fn getaddrinfo(
    node: &str,
    service: u16,
    src: Option<&str>,
    passive: bool,
    port_space: PortSpace,
) -> VerbsResult<AddrInfo> {
    let lookup = |host: &str, port: u16| -> VerbsResult<SocketAddr> {
        (host, port)
            .to_socket_addrs()
            .map_err(|e| VerbsError::inval(format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| VerbsError::inval(format!("{host} has no address")))
    };
    let node = lookup(node, service)?;
    let src = src.map(|s| lookup(s, 0)).transpose()?;
    Ok(if passive {
        AddrInfo {
            src: Some(node),
            dst: None,
            passive,
            port_space,
        }
    } else {
        AddrInfo {
            src,
            dst: Some(node),
            passive,
            port_space,
        }
    })
}

/// `rdma_create_ep`: an id on a channel of its own; passive: bound to `info.src`;
/// active: address and route resolved to `info.dst`. With `qp`, its QP (and CQs, and a
/// PD unless `pd` is given) is created too.
pub fn create_ep(info: &AddrInfo, pd: Option<&Pd>, qp: Option<&QpOptions>) -> VerbsResult<CmId> {
    let channel = EventChannel::new()?;
    let id = CmId::new(&channel, info.port_space)?;
    const RESOLVE: Duration = Duration::from_secs(2);
    if info.passive {
        let src = info
            .src
            .ok_or_else(|| VerbsError::inval("a passive endpoint needs an address"))?;
        id.bind_addr(src)?;
    } else {
        let dst = info
            .dst
            .ok_or_else(|| VerbsError::inval("an active endpoint needs a destination"))?;
        id.resolve_addr(info.src, dst, RESOLVE)?;
        id.expect(EventType::AddrResolved, RESOLVE)?;
        id.resolve_route(RESOLVE)?;
        id.expect(EventType::RouteResolved, RESOLVE)?;
    }
    if let Some(opts) = qp {
        id.create_qp(pd, opts)?;
    }
    Ok(id)
}

impl CmId {
    /// The next event on this id's channel, within `timeout`; ETIMEDOUT if none came.
    pub fn next_event(&self, timeout: Duration) -> VerbsResult<CmEvent> {
        self.channel()
            .get_event(Some(timeout))?
            .ok_or_else(|| VerbsError::Io {
                errno: libc::ETIMEDOUT,
                message: format!("no CM event within {timeout:?}"),
            })
    }

    /// Waits for event `want` on this id's channel: another one is an error carrying its
    /// errno (REJECTED: ECONNREFUSED; UNREACHABLE: ETIMEDOUT; ADDR_ERROR: its status).
    pub fn expect(&self, want: EventType, timeout: Duration) -> VerbsResult<CmEvent> {
        let deadline = Instant::now() + timeout;
        let e = self.next_event(deadline.saturating_duration_since(Instant::now()))?;
        if e.event == want {
            return Ok(e);
        }
        let errno = match e.event {
            EventType::Rejected => libc::ECONNREFUSED,
            EventType::Unreachable => libc::ETIMEDOUT,
            _ if e.status < 0 => -e.status,
            _ => libc::EPROTO,
        };
        Err(VerbsError::Io {
            errno,
            message: format!(
                "expected {}, got {} (status {})",
                want.name(),
                e.event.name(),
                e.status
            ),
        })
    }

    /// `rdma_get_request` on a listening endpoint: the next CONNECT_REQUEST's new id, on
    /// a channel of its own (as librdmacm gives a synchronous listener's requests).
    pub fn get_request(&self, timeout: Duration) -> VerbsResult<(CmId, CmEvent)> {
        let e = self.expect(EventType::ConnectRequest, timeout)?;
        let id = e.id.clone();
        id.migrate(&EventChannel::new()?)?;
        Ok((id, e))
    }

    /// `rdma_connect` on a synchronous endpoint: returns the ESTABLISHED event.
    pub fn connect_sync(&self, param: &ConnParam, timeout: Duration) -> VerbsResult<CmEvent> {
        self.connect(param)?;
        self.expect(EventType::Established, timeout)
    }

    /// `rdma_accept` on a synchronous endpoint: returns the ESTABLISHED event (RC).
    pub fn accept_sync(&self, param: &ConnParam, timeout: Duration) -> VerbsResult<CmEvent> {
        self.accept(param)?;
        self.expect(EventType::Established, timeout)
    }
}
