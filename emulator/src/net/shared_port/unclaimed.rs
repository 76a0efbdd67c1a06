//! Connection requests (REQ, SIDR_REQ) for a CM service that no member of the device
//! listens on yet. The kernel hands every QP1 datagram to one member by its hash, so such
//! a request often reaches a process other than the server about to listen (a client on
//! the same device whose REQ came back to its own socket): delivered there, its CM would
//! reject it. A member holds it instead, for [`HOLD`], and passes it to the listener as
//! soon as the listen table names one (or takes it itself, if the listener is this member);
//! after the hold it goes to this member's own CM, which rejects it as before (after its
//! own hold, `cm/held_reqs.rs`). Bounded: [`MAX_HELD`] requests, each a copy of its
//! datagram; beyond that a request is delivered here at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::super::{DatagramView, InDatagram};

/// How long a request waits for a listener to appear in the listen table.
pub const HOLD: Duration = Duration::from_millis(250);
/// Requests held at most.
pub const MAX_HELD: usize = 16;
/// The listen table is read again at most this often while requests wait.
pub const RECHECK: Duration = Duration::from_millis(1);

/// Requests waiting for a listener (see the module docs).
#[derive(Default)]
pub struct Unclaimed {
    /// Set while `held` is not empty: the one load a receive pays when nothing waits.
    any: AtomicBool,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    requests: VecDeque<(Instant, u64, InDatagram)>,
    last_check: Option<Instant>,
}

/// What becomes of a released request.
pub enum Release {
    /// To the member holding this slot (the listener).
    To(u8, InDatagram),
    /// To this member's own receive pipeline (it listens, or the hold ended).
    Here(InDatagram),
}

impl Unclaimed {
    /// Holds request `d` for service `service_id`; false if the table is full (deliver it
    /// now).
    pub fn hold(&self, service_id: u64, d: DatagramView<'_>) -> bool {
        let mut held = self.held.lock();
        if held.requests.len() >= MAX_HELD {
            return false;
        }
        held.requests
            .push_back((Instant::now(), service_id, d.to_owned()));
        self.any.store(true, Ordering::Release);
        true
    }

    /// Requests held now.
    pub fn len(&self) -> usize {
        self.held.lock().requests.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// The requests whose listener `listener` (service ID -> the listening member's slot,
    /// `own` for this member) now names, and those whose hold ended by `now`, with where
    /// each goes. Reads the listen table at most every [`RECHECK`].
    pub fn release(
        &self,
        now: Instant,
        own: u8,
        listener: impl Fn(u64) -> Option<u8>,
    ) -> Vec<Release> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut held = self.held.lock();
        if held
            .last_check
            .is_some_and(|t| now.saturating_duration_since(t) < RECHECK)
        {
            return Vec::new();
        }
        held.last_check = Some(now);
        let mut out = Vec::new();
        let mut kept = VecDeque::new();
        for (since, sid, d) in held.requests.drain(..) {
            match listener(sid) {
                Some(slot) if slot == own => out.push(Release::Here(d)),
                Some(slot) => out.push(Release::To(slot, d)),
                None if now.saturating_duration_since(since) >= HOLD => out.push(Release::Here(d)),
                None => kept.push_back((since, sid, d)),
            }
        }
        held.requests = kept;
        self.any.store(!held.requests.is_empty(), Ordering::Release);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn request(tag: u8) -> InDatagram {
        let addr: SocketAddr = "127.29.9.1:4791".parse().unwrap();
        InDatagram {
            src: addr,
            dst: addr,
            payload: vec![tag; 8],
            ipv4_identification: None,
        }
    }

    fn tags(out: &[Release]) -> Vec<(Option<u8>, u8)> {
        out.iter()
            .map(|r| match r {
                Release::To(slot, d) => (Some(*slot), d.payload[0]),
                Release::Here(d) => (None, d.payload[0]),
            })
            .collect()
    }

    #[test]
    fn a_request_goes_to_its_listener_once_known_or_here_after_the_hold() {
        let u = Unclaimed::default();
        assert!(u.is_empty());
        for (sid, tag) in [(10, 1), (20, 2), (30, 3)] {
            assert!(u.hold(sid, request(tag).view()));
        }
        let t0 = Instant::now();
        // Nobody listens yet: all stay.
        assert!(u.release(t0, 5, |_| None).is_empty());
        assert_eq!(u.len(), 3);
        // Within RECHECK of the last look: not looked at again.
        assert!(u.release(t0, 5, |_| Some(7)).is_empty());
        // Service 10 now has a listener in slot 7, service 20 in this member (5).
        let listeners = |sid| match sid {
            10 => Some(7),
            20 => Some(5),
            _ => None,
        };
        let out = u.release(t0 + RECHECK, 5, listeners);
        assert_eq!(tags(&out), [(Some(7), 1), (None, 2)]);
        assert_eq!(u.len(), 1);
        // Service 30's hold ends: delivered here.
        let out = u.release(t0 + HOLD + RECHECK, 5, |_| None);
        assert_eq!(tags(&out), [(None, 3)]);
        assert!(u.is_empty());
    }

    #[test]
    fn at_most_max_held_requests_wait() {
        let u = Unclaimed::default();
        for i in 0..MAX_HELD {
            assert!(u.hold(1, request(i as u8).view()));
        }
        assert!(!u.hold(1, request(0xff).view()), "full: delivered at once");
        assert_eq!(u.len(), MAX_HELD);
    }
}
