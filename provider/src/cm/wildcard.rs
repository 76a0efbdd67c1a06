//! Binding to the wildcard address (0.0.0.0 or ::) as librdmacm does: the id takes its
//! port on every emulated device of that address family and, once listening, receives
//! the requests of all of them; each request's new id belongs to the device the request
//! came through (its local address is that device's).

use std::net::{IpAddr, SocketAddr};

use softverbs_api::VerbsResult;
use softverbs_emu::wire::cm::PortSpace;

use crate::cm::addr::{self, Device};
use crate::cm::shared::{core_err, IdShared, IdState};

/// rdma_bind_addr to `addr` (unspecified IP): takes `addr`'s port (0: an ephemeral one,
/// the same on every device) on each device of its family. EADDRNOTAVAIL if there is no
/// such device, EADDRINUSE (and nothing held) if the port is taken on any of them.
pub(crate) fn bind_all(st: &mut IdState, ps: PortSpace, addr: SocketAddr) -> VerbsResult<()> {
    let devices = addr::open_family(addr.is_ipv4())?;
    let mut port = addr.port();
    let mut held: Vec<Device> = Vec::new();
    for dev in devices {
        match dev.service.bind_port(ps, port) {
            Ok(p) => {
                port = p;
                held.push(dev);
            }
            Err(e) => {
                for d in &held {
                    d.service.release_port(ps, port);
                }
                return Err(core_err(e));
            }
        }
    }
    st.local = Some(SocketAddr::new(addr.ip(), port));
    st.port_held = true;
    st.wildcard = held;
    Ok(())
}

/// rdma_listen on a wildcard-bound id: listens on every device, each with a sink that
/// names the device. On a failure, the devices already listening stop again.
pub(crate) fn listen_all(st: &IdState, id: &IdShared) -> VerbsResult<()> {
    let port = st.local.map_or(0, |l| l.port());
    for (i, dev) in st.wildcard.iter().enumerate() {
        let sink = id.sink_via(Some(dev.service.local_ip()));
        if let Err(e) = dev.service.listen(id.ps, port, sink) {
            for d in &st.wildcard[..i] {
                let _ = d.service.unlisten(id.ps, port);
            }
            return Err(core_err(e));
        }
    }
    Ok(())
}

/// The device of a wildcard id that a request came through.
pub(crate) fn device_via(st: &IdState, via: Option<IpAddr>) -> Option<Device> {
    let via = via?;
    st.wildcard
        .iter()
        .find(|d| d.service.local_ip() == via)
        .cloned()
}

/// rdma_destroy_id of a wildcard id: stops listening (if it did) and gives the port
/// back on every device.
pub(crate) fn release_all(st: &mut IdState, ps: PortSpace, was_listening: bool) {
    let Some(port) = st.local.map(|l| l.port()) else {
        return;
    };
    for dev in &st.wildcard {
        if was_listening {
            let _ = dev.service.unlisten(ps, port);
        }
        if st.port_held {
            dev.service.release_port(ps, port);
        }
    }
    st.port_held = false;
}
