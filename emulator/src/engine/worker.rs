//! The engine thread of a device: receives datagrams, checks their ICRC, hands them to their
//! QP, and fires transport deadlines. It is what makes the responder progress while the
//! application sleeps.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use softverbs_api::QpType;

use super::context::Device;
use crate::net::icrc_check::{icrc_ok, ipv4_identification};
use crate::net::InDatagram;
use crate::transport::NetHeader;
use crate::wire::RoceRepr;

/// Longest the thread sleeps in one receive: bounds how late a deadline armed by another
/// thread (a post) can fire, and how long shutdown takes.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// TTL of the IP packets our UDP sockets send (the Linux default).
const DEFAULT_HOP_LIMIT: u8 = 64;

/// The thread body; returns when the device shuts down.
pub(crate) fn run(dev: &Arc<Device>) {
    let mut next_deadline_ns = u64::MAX;
    while !dev.shutdown.load(Ordering::Acquire) {
        let now = dev.clock.now_ns();
        let hint = dev.deadline_hint_ns.swap(u64::MAX, Ordering::AcqRel);
        next_deadline_ns = next_deadline_ns.min(hint);
        let sleep = Duration::from_nanos(next_deadline_ns.saturating_sub(now)).min(MAX_SLEEP);
        match dev.link.recv(sleep) {
            Ok(Some(datagram)) => handle_datagram(dev, &datagram),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(device = %dev.config.name, error = %e, "receive failed");
                std::thread::sleep(MAX_SLEEP);
            }
        }
        if dev.clock.now_ns() >= next_deadline_ns {
            next_deadline_ns = fire_timers(dev);
        }
    }
}

fn handle_datagram(dev: &Device, d: &InDatagram) {
    if !dev.port_active() {
        // Nothing arrives through a port that is down.
        dev.counters.port_down_drops.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if !icrc_ok(d) {
        dev.counters.icrc_errors.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Ok((repr, _icrc)) = RoceRepr::parse(&d.payload) else {
        dev.counters.malformed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let entry = dev.qps.read().get(&repr.bth.dest_qp).cloned();
    let Some(entry) = entry else {
        dev.counters.unknown_qp.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let rx = net_header(d);
    dev.on_qp(&entry, Some(rx), |qp, env, out| {
        // A connected QP takes packets only from its peer (rxe's check_addr): anyone else
        // could otherwise inject data with a guessed PSN.
        if let Some(path) = qp.path {
            if qp.qp_type != QpType::Ud && path.dst_ip != d.src.ip() {
                dev.counters.wrong_source.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        dev.counters.delivered.fetch_add(1, Ordering::Relaxed);
        qp.on_packet(&repr, env, out);
    });
}

/// The IP header the datagram came with, as far as the link tells: a UDP socket reports
/// neither TTL nor TOS, so those are what our own senders use (64 and 0); the IPv4
/// identification is what the ICRC check verified (0 for DF senders such as softverbs).
fn net_header(d: &InDatagram) -> NetHeader {
    NetHeader {
        src: d.src.ip(),
        dst: d.dst.ip(),
        hop_limit: DEFAULT_HOP_LIMIT,
        traffic_class: 0,
        ipv4_identification: ipv4_identification(d).unwrap_or(0),
        flow_label: 0,
        udp_payload_len: d.payload.len(),
    }
}

/// Fires every expired QP deadline; returns the earliest one still armed.
fn fire_timers(dev: &Device) -> u64 {
    let entries: Vec<_> = dev.qps.read().values().cloned().collect();
    let mut earliest = u64::MAX;
    for entry in entries {
        let next = dev.on_qp(&entry, None, |qp, env, out| {
            if qp.next_deadline_ns().is_some_and(|d| d <= env.now_ns) {
                qp.on_timer(env, out);
            }
            qp.next_deadline_ns()
        });
        if let Some(d) = next {
            earliest = earliest.min(d);
        }
    }
    earliest
}
