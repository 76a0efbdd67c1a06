//! When a device's UDP socket coalesces what it receives (UDP GRO), and how each receive is
//! made: recvmsg with its control buffer, a plain recvfrom(2), or a checked receive.
//!
//! Why: with GRO on, one receive takes a whole GSO run a peer sent (the 16 packets of a
//! 64 KiB WRITE) as one buffer, but such a socket must be read with recvmsg and a control
//! buffer, which alone says where the run's datagrams begin; recvmsg costs the kernel about
//! 90 ns more than recvfrom (it copies the message header and the iovec in). A polling
//! application's empty polls are such receives back to back, and every nanosecond of one is
//! a nanosecond more before a datagram that arrives is seen: a loopback SEND ping-pong's
//! half round trip was 0.2 us shorter with recvfrom (30 alternating runs; empty polls
//! 700 -> 600 ns). So a socket that keeps getting single datagrams one receive at a time (a
//! ping-pong) turns GRO off and receives them with recvfrom; a burst, or datagrams that keep
//! arriving together (requests with their ACKs), turn it on again.
//!
//! The switch off is the delicate one. The kernel reports a run's segment size only while
//! GRO is on: a run queued before the switch (or kept whole by a sender that looked at the
//! option a moment before the switch) would come out of any receive after it as one long
//! datagram. So after the switch every receive is checked: the datagram is peeked at, and
//! taken only if it is one whole packet (its ICRC checks); anything else turns GRO back on
//! first, and is then received with its segment size. The checks end when a receive finds
//! the queue empty [`SUSPECT_FOR`] or more after the switch: what was queued before it has
//! been taken, and a sender that looked at the option before it has queued its run by then
//! (the look and the queueing are one softirq, microseconds apart).
//!
//! This is the decision alone; `udp_receive` makes the receives and the socket option calls.

use std::time::{Duration, Instant};

/// The evidence of single datagrams (one per receive that found one alone) GRO needs
/// before it is first turned off; each time it has to go back on, the next switch off needs
/// twice as much (up to [`PLAIN_RUN_MAX`]), so that mixed traffic does not flap.
pub const PLAIN_RUN: u32 = 64;
/// The most evidence a switch off needs.
pub const PLAIN_RUN_MAX: u32 = 1 << 16;
/// What datagrams that arrived together (a GSO run of two, or back to back while GRO is
/// off: a request and the ACK a peer sent with it) count against single ones. GRO saves
/// such a pair a receive call: a ping-pong that acknowledges every message (perftest's
/// latency defaults) keeps GRO on, one with an ACK every 100 messages turns it off.
pub const PAIR_WEIGHT: u32 = 8;
/// Datagrams one receive must return to be a burst, which turns GRO on at once.
pub const BURST: usize = 3;
/// How long after GRO goes off receives stay checked, at least (see the module doc).
pub const SUSPECT_FOR: Duration = Duration::from_millis(1);

/// A change of the socket's GRO option the receiver is to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroSwitch {
    /// Turn GRO off: the traffic is single datagrams.
    Off,
    /// Turn GRO on: datagrams arrive together.
    On,
}

/// How the next receive is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveWay {
    /// recvmsg / recvmmsg with a control buffer: runs come with their segment size.
    WithSegments,
    /// recvfrom of one datagram: no run can be queued.
    Plain,
    /// Peek at one datagram and take it only if it is one whole packet; else turn GRO on.
    Checked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// GRO is on.
    On,
    /// GRO went off; runs may still be queued, at least until this time.
    Suspect { until: Instant },
    /// GRO is off and every datagram queued is a plain one.
    Off,
}

/// The GRO state of one socket, kept by its (single) receiver.
#[derive(Debug)]
pub struct GroMode {
    /// The kernel and the user let the socket coalesce: GRO can be turned on.
    capable: bool,
    state: State,
    /// Evidence for the switch away from the state: single datagrams while GRO is on,
    /// datagrams together while it is off.
    evidence: u32,
    /// The evidence the next switch off needs.
    plain_run: u32,
    /// The last receive found something: the length of its last datagram (the next one's
    /// datagrams came with those, if they could have been one GSO run with it).
    after_data: Option<usize>,
}

impl GroMode {
    /// The state of a socket whose GRO option is on after binding (`capable`), or off for
    /// good.
    pub fn new(capable: bool) -> GroMode {
        GroMode {
            capable,
            state: if capable { State::On } else { State::Off },
            evidence: 0,
            plain_run: PLAIN_RUN,
            after_data: None,
        }
    }

    /// Whether GRO is on on the socket.
    pub fn is_on(&self) -> bool {
        self.state == State::On
    }

    /// How a receive of at most `want` datagrams is made.
    pub fn next_receive(&self, want: usize) -> ReceiveWay {
        match self.state {
            State::Suspect { .. } => ReceiveWay::Checked,
            State::Off if want == 1 => ReceiveWay::Plain,
            _ => ReceiveWay::WithSegments,
        }
    }

    /// A receive found the queue empty; `now` is read only while receives are checked. Once
    /// that happens [`SUSPECT_FOR`] or more after the switch off, no run can be queued.
    pub fn found_nothing(&mut self, now: impl FnOnce() -> Instant) {
        self.after_data = None;
        if let State::Suspect { until } = self.state {
            if now() >= until {
                self.state = State::Off;
            }
        }
    }

    /// A receive that asked for `asked` datagrams got `got` (counting each datagram of a
    /// run, at least one), `runs` of them GSO runs of more than one, the first and the last
    /// of `lengths` bytes; returns the switch to make, if any.
    ///
    /// Datagrams that follow the last receive's count as arriving together with it only if
    /// the first is no longer than that one's last: only then could the two have been one
    /// GSO send, which GRO takes in one receive. An ACK sent ahead of the answer (shorter,
    /// then longer) arrives just as close, but GRO cannot join them, and keeping it on for
    /// them cost a SEND ping-pong that signals every message its cheaper receives.
    pub fn received(
        &mut self,
        asked: usize,
        got: usize,
        runs: usize,
        lengths: (usize, usize),
    ) -> Option<GroSwitch> {
        let (first, last) = lengths;
        let after_data = self.after_data.replace(last);
        if !self.capable {
            return None;
        }
        if got >= BURST {
            self.evidence = 0;
            return (!self.is_on()).then_some(GroSwitch::On);
        }
        let together = runs > 0 || after_data.is_some_and(|before| first <= before);
        let single = asked == 1 && got == 1 && !together;
        if self.is_on() {
            self.evidence = match (together, single) {
                (true, _) => self.evidence.saturating_sub(PAIR_WEIGHT),
                (false, true) => self.evidence + 1,
                _ => self.evidence,
            };
            if self.evidence >= self.plain_run {
                return Some(GroSwitch::Off);
            }
        } else {
            self.evidence = match (together, single) {
                (true, _) => self.evidence + PAIR_WEIGHT,
                (false, true) => self.evidence.saturating_sub(1),
                _ => self.evidence,
            };
            if self.evidence >= PLAIN_RUN {
                return Some(GroSwitch::On);
            }
        }
        None
    }

    /// A checked receive found a datagram that is not one whole packet: GRO goes back on
    /// before it is received.
    pub fn check_failed(&self) -> Option<GroSwitch> {
        matches!(self.state, State::Suspect { .. }).then_some(GroSwitch::On)
    }

    /// The receiver made `switch` at `now`; `ok` if the socket took it.
    pub fn switched(&mut self, switch: GroSwitch, ok: bool, now: Instant) {
        self.evidence = 0;
        match (switch, ok) {
            (GroSwitch::Off, true) => {
                self.state = State::Suspect {
                    until: now + SUSPECT_FOR,
                }
            }
            (GroSwitch::On, true) => {
                self.plain_run = (self.plain_run * 2).min(PLAIN_RUN_MAX);
                self.state = State::On;
            }
            // GRO could not be turned off: it stays on, and is not turned off again.
            (GroSwitch::Off, false) => {
                self.capable = false;
                self.state = State::On;
            }
            // Nor back on: the socket stays as it is, and receives stay checked until no
            // run can be left (then plain: nothing coalesces any more).
            (GroSwitch::On, false) => self.capable = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagrams of one size (a run's, or a stream's).
    const SAME: (usize, usize) = (64, 64);

    /// What the receiver does with a switch asked: makes it (a switch off settles at once,
    /// as after a quiet millisecond), and notes it in `made`.
    fn make(mode: &mut GroMode, switch: Option<GroSwitch>, made: &mut Vec<GroSwitch>) {
        if let Some(switch) = switch {
            let t0 = Instant::now();
            mode.switched(switch, true, t0);
            mode.found_nothing(|| t0 + SUSPECT_FOR);
            made.push(switch);
        }
    }

    /// `messages` ping-pong receives: an empty receive, then one that finds one datagram
    /// alone; the switches made.
    fn ping_pong(mode: &mut GroMode, messages: u32) -> Vec<GroSwitch> {
        let mut made = Vec::new();
        for _ in 0..messages {
            mode.found_nothing(Instant::now);
            let switch = mode.received(1, 1, 0, SAME);
            make(mode, switch, &mut made);
        }
        made
    }

    /// A message that arrives with an ACK: as a GSO run of two while GRO is on, else as
    /// one datagram and, in the batch receive after it, the other; the switches made.
    fn with_its_ack(mode: &mut GroMode) -> Vec<GroSwitch> {
        let mut made = Vec::new();
        mode.found_nothing(Instant::now);
        if mode.is_on() {
            let switch = mode.received(1, 2, 1, SAME);
            make(mode, switch, &mut made);
        } else {
            let switch = mode.received(1, 1, 0, SAME);
            make(mode, switch, &mut made);
            let switch = mode.received(64, 1, 0, SAME);
            make(mode, switch, &mut made);
        }
        made
    }

    /// GRO turned off at `t0`, and the queue found empty once the suspect time is over.
    fn off_and_settled(mode: &mut GroMode, t0: Instant) {
        mode.switched(GroSwitch::Off, true, t0);
        mode.found_nothing(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
    }

    #[test]
    fn single_datagrams_one_at_a_time_turn_gro_off_after_the_run() {
        let mut mode = GroMode::new(true);
        assert!(ping_pong(&mut mode, PLAIN_RUN - 1).is_empty());
        assert!(mode.is_on());
        assert_eq!(mode.next_receive(1), ReceiveWay::WithSegments);
        mode.found_nothing(Instant::now);
        assert_eq!(mode.received(1, 1, 0, SAME), Some(GroSwitch::Off));
    }

    #[test]
    fn receives_are_checked_until_the_queue_is_found_empty_late_enough() {
        let mut mode = GroMode::new(true);
        let t0 = Instant::now();
        mode.switched(GroSwitch::Off, true, t0);
        assert!(!mode.is_on());
        for want in [1, 64] {
            assert_eq!(mode.next_receive(want), ReceiveWay::Checked);
        }
        // Empty too soon: what a sender was queueing at the switch may still come.
        mode.found_nothing(|| t0 + SUSPECT_FOR / 2);
        assert_eq!(mode.next_receive(1), ReceiveWay::Checked);
        assert_eq!(mode.check_failed(), Some(GroSwitch::On));
        // However late the receiver looks, what is queued is checked until it found none.
        assert_eq!(mode.next_receive(1), ReceiveWay::Checked);
        mode.found_nothing(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        // Settled: batches are plain recvmmsgs, no clock read, and nothing to check.
        assert_eq!(mode.next_receive(64), ReceiveWay::WithSegments);
        mode.found_nothing(|| unreachable!("no clock read once settled"));
        assert_eq!(mode.check_failed(), None);
    }

    /// [`PLAIN_RUN`] messages that each arrive as two datagrams back to back, of `lengths`
    /// bytes, in two receives; the switches made.
    fn back_to_back(mode: &mut GroMode, lengths: [usize; 2]) -> Vec<GroSwitch> {
        let mut made = Vec::new();
        for _ in 0..PLAIN_RUN {
            mode.found_nothing(Instant::now);
            for len in lengths {
                let switch = mode.received(1, 1, 0, (len, len));
                make(mode, switch, &mut made);
            }
        }
        made
    }

    #[test]
    fn datagrams_that_could_not_have_been_one_gso_send_do_not_keep_gro_on() {
        // Each message with an ACK ahead of it (20 bytes, then the 24-byte answer): no GSO
        // run could hold them, and GRO goes off as for single datagrams.
        let mut mode = GroMode::new(true);
        assert_eq!(back_to_back(&mut mode, [20, 24]), [GroSwitch::Off]);
        // The answer ahead of its ACK (longer, then shorter) could have been one: those
        // pairs turn it back on.
        assert_eq!(back_to_back(&mut mode, [24, 20]), [GroSwitch::On]);
    }

    #[test]
    fn a_burst_turns_gro_back_on_at_once() {
        let mut mode = GroMode::new(true);
        off_and_settled(&mut mode, Instant::now());
        mode.found_nothing(Instant::now);
        assert_eq!(mode.received(64, BURST, 0, SAME), Some(GroSwitch::On));
        mode.switched(GroSwitch::On, true, Instant::now());
        assert!(mode.is_on());
        assert_eq!(mode.next_receive(1), ReceiveWay::WithSegments);
    }

    #[test]
    fn every_message_with_its_ack_keeps_gro_on_and_brings_it_back() {
        let mut mode = GroMode::new(true);
        for _ in 0..10 * PLAIN_RUN {
            assert!(with_its_ack(&mut mode).is_empty());
        }
        // Off (after a phase of single datagrams), the pairs arrive split and bring GRO
        // back within a few messages.
        assert_eq!(ping_pong(&mut mode, PLAIN_RUN), vec![GroSwitch::Off]);
        let back = (1..=PLAIN_RUN)
            .find(|_| with_its_ack(&mut mode) == vec![GroSwitch::On])
            .expect("GRO comes back");
        assert!(back <= PLAIN_RUN / (PAIR_WEIGHT - 1) + 1, "{back} messages");
    }

    #[test]
    fn an_ack_every_hundred_messages_turns_gro_off_and_keeps_it_off() {
        let mut mode = GroMode::new(true);
        let mut switches = Vec::new();
        for _ in 0..3 {
            switches.extend(ping_pong(&mut mode, 99));
            switches.extend(with_its_ack(&mut mode));
        }
        assert_eq!(switches, vec![GroSwitch::Off]);
        for _ in 0..100 {
            assert!(ping_pong(&mut mode, 99).is_empty());
            assert!(with_its_ack(&mut mode).is_empty());
        }
        assert!(!mode.is_on());
    }

    #[test]
    fn each_return_of_gro_doubles_the_next_run() {
        let mut mode = GroMode::new(true);
        let mut run = PLAIN_RUN;
        for _ in 0..20 {
            assert!(ping_pong(&mut mode, run - 1).is_empty());
            assert_eq!(ping_pong(&mut mode, 1), vec![GroSwitch::Off]);
            mode.found_nothing(Instant::now);
            assert_eq!(mode.received(64, BURST, 0, SAME), Some(GroSwitch::On));
            mode.switched(GroSwitch::On, true, Instant::now());
            run = (run * 2).min(PLAIN_RUN_MAX);
            assert!(ping_pong(&mut mode, run - 1).is_empty());
            mode.found_nothing(Instant::now);
            assert_eq!(
                mode.received(64, BURST, 0, SAME),
                None,
                "a burst restarts the count"
            );
        }
        assert_eq!(run, PLAIN_RUN_MAX);
    }

    #[test]
    fn batch_receives_never_turn_gro_off() {
        let mut mode = GroMode::new(true);
        for _ in 0..10 * PLAIN_RUN {
            mode.found_nothing(Instant::now);
            assert_eq!(mode.received(64, 1, 0, SAME), None);
        }
        assert!(mode.is_on());
    }

    #[test]
    fn a_socket_without_gro_always_receives_plainly_and_never_switches() {
        let mut mode = GroMode::new(false);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        assert!(ping_pong(&mut mode, 10 * PLAIN_RUN).is_empty());
        assert_eq!(mode.received(64, 64, 3, SAME), None);
        for _ in 0..10 * PLAIN_RUN {
            assert!(with_its_ack(&mut mode).is_empty());
        }
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
    }

    #[test]
    fn a_refused_switch_off_leaves_gro_on_for_good() {
        let mut mode = GroMode::new(true);
        assert!(ping_pong(&mut mode, PLAIN_RUN - 1).is_empty());
        mode.found_nothing(Instant::now);
        assert_eq!(mode.received(1, 1, 0, SAME), Some(GroSwitch::Off));
        mode.switched(GroSwitch::Off, false, Instant::now());
        assert!(mode.is_on());
        assert_eq!(mode.next_receive(1), ReceiveWay::WithSegments);
        assert!(ping_pong(&mut mode, 10 * PLAIN_RUN).is_empty());
    }

    #[test]
    fn a_refused_switch_on_keeps_the_checks_until_no_run_can_be_left() {
        let mut mode = GroMode::new(true);
        let t0 = Instant::now();
        mode.switched(GroSwitch::Off, true, t0);
        mode.switched(GroSwitch::On, false, t0);
        assert_eq!(mode.next_receive(1), ReceiveWay::Checked);
        mode.found_nothing(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        assert_eq!(mode.received(64, 64, 0, SAME), None, "no more switches");
    }
}
