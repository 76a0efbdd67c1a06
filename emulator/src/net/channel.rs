//! An in-process network: devices of one process exchange datagrams through channels
//! (crossbeam), with the same framing and ICRC as UDP. Used by tests and same-process devices
//! that should not touch the host's sockets.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError, TrySendError};
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
            last_peer: Mutex::new(None),
        })
    }
}

/// One endpoint of a [`ChannelNetwork`].
pub struct ChannelLink {
    network: ChannelNetwork,
    local: SocketAddr,
    rx: Receiver<InDatagram>,
    /// The endpoint this link sent to last, and its queue. Most of a link's traffic goes to
    /// one peer, and the network's map is shared by every link: looked up per datagram,
    /// both sides of a stream took its lock (and hashed the address) for each. A queue
    /// whose endpoint detached stays here, emptied (see `Drop`), until the link's next
    /// send: one such queue per link at most.
    last_peer: Mutex<LastPeer>,
}

/// Where [`ChannelLink::deliver`] finds the queue of a datagram's destination.
type LastPeer = Option<(SocketAddr, Sender<InDatagram>)>;

impl ChannelLink {
    /// Queues `payload`, sent from this link's UDP port `src_port`, on the endpoint at
    /// `dst`: through `last` when it is that endpoint's, else through the network's map
    /// (and keeps it in `last`). A full or missing endpoint loses the datagram, as a real
    /// network would.
    fn deliver(&self, last: &mut LastPeer, src_port: u16, dst: SocketAddr, payload: Vec<u8>) {
        let datagram = InDatagram {
            src: SocketAddr::new(self.local.ip(), src_port),
            dst,
            payload,
            // What `finalize` computed the ICRC for.
            ipv4_identification: Some(0),
        };
        let datagram = match last {
            Some((addr, tx)) if *addr == dst => match tx.try_send(datagram) {
                Ok(()) | Err(TrySendError::Full(_)) => return,
                // The endpoint detached since: another may hold its address now.
                Err(TrySendError::Disconnected(d)) => d,
            },
            _ => datagram,
        };
        *last = self
            .network
            .endpoints
            .lock()
            .get(&dst)
            .map(|tx| (dst, tx.clone()));
        if let Some((_, tx)) = last {
            let _ = tx.try_send(datagram);
        }
    }
}

impl Drop for ChannelLink {
    fn drop(&mut self) {
        self.network.endpoints.lock().remove(&self.local);
        // Another link may still hold this queue (its `last_peer`): what waits in it is
        // freed now, not when that link sends again.
        while self.rx.try_recv().is_ok() {}
    }
}

/// A receiver that comes back to fewer queued datagrams than this lets the queue fill for
/// [`GATHER_FOR`] before it takes them.
const GATHER_BELOW: usize = 8;
/// See [`let_the_queue_fill`].
const GATHER_FOR: Duration = Duration::from_micros(2);

/// Spins for [`GATHER_FOR`] without touching the queue. A receiver that takes each datagram
/// right behind its sender moves the queue's cache lines between their CPUs for every one,
/// which slows the sender down, so the receiver keeps up even more closely: a 64 B WRITE
/// stream settled at 0.86-1.08 Mpps in some runs (4-7 datagrams per receive) and at
/// 1.4-1.6 Mpps in others (11 per receive). Only a wait that found datagrams already
/// queued spins (the engine thread's between receives; an application's back-off in
/// `wait_for_traffic` rarely does): one that finds the queue empty, as in a ping-pong,
/// returns as soon as a datagram arrives.
fn let_the_queue_fill() {
    let started = std::time::Instant::now();
    while started.elapsed() < GATHER_FOR {
        for _ in 0..32 {
            std::hint::spin_loop();
        }
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
        let payload = packet.bytes.clone();
        self.deliver(
            &mut self.last_peer.lock(),
            packet.udp_src_port,
            dst,
            payload,
        );
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
        let mut last = self.last_peer.lock();
        for p in packets.iter_mut() {
            let dst = SocketAddr::new(p.dst_ip, p.udp_dst_port);
            self.deliver(&mut last, p.udp_src_port, dst, std::mem::take(&mut p.bytes));
        }
        Ok(())
    }

    fn pollable(&self) -> bool {
        true
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let queued = self.rx.len();
        if queued > 0 {
            if queued < GATHER_BELOW {
                let_the_queue_fill();
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_to(dst: SocketAddr, tag: u8) -> OutPacket {
        OutPacket {
            dst_ip: dst.ip(),
            udp_dst_port: dst.port(),
            udp_src_port: 49152,
            bytes: vec![tag; 16],
            payload: None,
        }
    }

    fn tags(link: &ChannelLink) -> Vec<u8> {
        let mut seen = Vec::new();
        link.recv_ready(64, &mut |d| seen.push(d.payload[0]))
            .unwrap();
        seen
    }

    #[test]
    fn datagrams_reach_each_peer_in_turn_and_an_endpoint_that_took_a_detached_ones_address() {
        let net = ChannelNetwork::new();
        let addr = |last: u8| SocketAddr::from(([127, 0, 0, last], 4791));
        let a = net.attach(addr(1)).unwrap();
        let b = net.attach(addr(2)).unwrap();
        let c = net.attach(addr(3)).unwrap();
        let mut batch = [
            packet_to(addr(2), 1),
            packet_to(addr(3), 2),
            packet_to(addr(2), 3),
        ];
        a.send_batch(&mut batch).unwrap();
        assert_eq!((tags(&b), tags(&c)), (vec![1, 3], vec![2]));
        // A link that sent to `b` last, after `b` left (with two datagrams still queued,
        // which its leaving frees though `a` holds the queue) and another took its address.
        a.send_batch(&mut [packet_to(addr(2), 8), packet_to(addr(2), 9)])
            .unwrap();
        drop(b);
        let held = a.last_peer.lock().as_ref().map(|(_, tx)| tx.len());
        assert_eq!(held, Some(0));
        let b2 = net.attach(addr(2)).unwrap();
        a.send_raw(&packet_to(addr(2), 4)).unwrap();
        a.send_batch(&mut [packet_to(addr(2), 5)]).unwrap();
        assert_eq!(tags(&b2), vec![4, 5]);
        // Nobody at an address: lost, and the next send to a live one still arrives.
        a.send_batch(&mut [packet_to(addr(9), 6), packet_to(addr(3), 7)])
            .unwrap();
        assert_eq!(tags(&c), vec![7]);
    }
}
