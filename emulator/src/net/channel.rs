//! An in-process network: devices of one process exchange datagrams through channels
//! (crossbeam), with the same framing and ICRC as UDP. Used by tests and same-process devices
//! that should not touch the host's sockets.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError};
use parking_lot::Mutex;

use super::OutPacket;
use super::{DatagramView, InDatagram, Link};
use crate::wire::{write_icrc, IcrcContext, IpHeaderInfo};

/// Most datagrams queued towards one endpoint; beyond that the network drops, like a full
/// socket buffer.
pub const ENDPOINT_QUEUE_DATAGRAMS: usize = 8192;

/// The switch joining channel links: a map from address to endpoint queue.
#[derive(Clone, Default)]
pub struct ChannelNetwork {
    endpoints: Arc<Mutex<HashMap<SocketAddr, Sender<InDatagram>>>>,
}

impl ChannelNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches an endpoint at `local`; EADDRINUSE if taken.
    pub fn attach(&self, local: SocketAddr) -> io::Result<ChannelLink> {
        let (tx, rx) = crossbeam_channel::bounded(ENDPOINT_QUEUE_DATAGRAMS);
        let mut endpoints = self.endpoints.lock();
        if endpoints.contains_key(&local) {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        endpoints.insert(local, tx);
        Ok(ChannelLink {
            network: self.clone(),
            local,
            rx,
        })
    }
}

/// One endpoint of a [`ChannelNetwork`].
pub struct ChannelLink {
    network: ChannelNetwork,
    local: SocketAddr,
    rx: Receiver<InDatagram>,
}

impl Drop for ChannelLink {
    fn drop(&mut self) {
        self.network.endpoints.lock().remove(&self.local);
    }
}

impl Link for ChannelLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn finalize(&self, packet: &mut OutPacket) -> io::Result<()> {
        let dst = SocketAddr::new(packet.dst_ip, packet.udp_dst_port);
        let ip = match (self.local.ip(), dst.ip()) {
            (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) => IpHeaderInfo::V4 {
                src,
                dst,
                identification: 0,
                flags_fragment: 0x4000,
            },
            (std::net::IpAddr::V6(src), std::net::IpAddr::V6(dst)) => IpHeaderInfo::V6 { src, dst },
            _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
        };
        // The per-QP source port rxe would use: nothing limits a channel to one port.
        let ctx = IcrcContext {
            ip,
            udp_src_port: packet.udp_src_port,
            udp_dst_port: dst.port(),
        };
        write_icrc(&ctx, &mut packet.bytes);
        Ok(())
    }

    fn send_raw(&self, packet: &OutPacket) -> io::Result<()> {
        let dst = SocketAddr::new(packet.dst_ip, packet.udp_dst_port);
        let target = self.network.endpoints.lock().get(&dst).cloned();
        if let Some(tx) = target {
            // Full or gone: the datagram is lost, as on a real network.
            let _ = tx.try_send(InDatagram {
                src: SocketAddr::new(self.local.ip(), packet.udp_src_port),
                dst,
                payload: packet.bytes.clone(),
                // What `finalize` computed the ICRC for.
                ipv4_identification: Some(0),
            });
        }
        Ok(())
    }

    fn recv(&self, timeout: Duration) -> io::Result<Option<InDatagram>> {
        match self.rx.recv_timeout(timeout) {
            Ok(d) => Ok(Some(d)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
        }
    }

    /// Moves each packet's bytes to the receiver instead of copying them (the caller is
    /// done with the packets; their buffers come back through the pool on the far side).
    fn send_batch(&self, packets: &mut [OutPacket]) -> io::Result<()> {
        for p in packets.iter_mut() {
            self.finalize(p)?;
        }
        let endpoints = self.network.endpoints.lock();
        for p in packets.iter_mut() {
            let dst = SocketAddr::new(p.dst_ip, p.udp_dst_port);
            if let Some(tx) = endpoints.get(&dst) {
                // Full or gone: the datagram is lost, as on a real network.
                let _ = tx.try_send(InDatagram {
                    src: SocketAddr::new(self.local.ip(), p.udp_src_port),
                    dst,
                    payload: std::mem::take(&mut p.bytes),
                    ipv4_identification: Some(0),
                });
            }
        }
        Ok(())
    }

    fn pollable(&self) -> bool {
        true
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        if !self.rx.is_empty() {
            return Ok(true);
        }
        let mut sel = Select::new();
        sel.recv(&self.rx);
        Ok(sel.ready_timeout(timeout).is_ok())
    }

    fn recv_ready(&self, max: usize, sink: &mut dyn FnMut(DatagramView<'_>)) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.rx.try_recv() {
                Ok(d) => {
                    sink(d.view());
                    super::packet_pool::give(d.payload);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
            n += 1;
        }
        Ok(n)
    }
}
