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
//! ping-pong) turns GRO off and receives them with recvfrom; the first burst turns GRO on.
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

/// One-datagram receives in a row that each found a single plain datagram before GRO is
/// first turned off; each time GRO has to go back on, the next switch off waits twice as
/// long (up to [`PLAIN_RUN_MAX`]), so that traffic mixing bursts and single datagrams does
/// not flap.
pub const PLAIN_RUN: u32 = 64;
/// The longest such run.
pub const PLAIN_RUN_MAX: u32 = 1 << 16;
/// Datagrams one receive must return (or one GSO run it must find) to turn GRO back on:
/// more than a request and its ACK, which a peer may send together.
pub const BURST: usize = 3;
/// How long after GRO goes off receives stay checked, at least (see the module doc).
pub const SUSPECT_FOR: Duration = Duration::from_millis(1);

/// A change of the socket's GRO option the receiver is to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroSwitch {
    /// Turn GRO off: the traffic is single datagrams.
    Off,
    /// Turn GRO on: runs of datagrams arrive.
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
    /// GRO is on; the count of one-datagram receives in a row that found one plain datagram.
    On { plain_in_a_row: u32 },
    /// GRO went off; runs may still be queued until this time.
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
    /// The plain run the next switch off waits for.
    plain_run: u32,
}

impl GroMode {
    /// The state of a socket whose GRO option is on after binding (`capable`), or off for
    /// good.
    pub fn new(capable: bool) -> GroMode {
        GroMode {
            capable,
            state: if capable {
                State::On { plain_in_a_row: 0 }
            } else {
                State::Off
            },
            plain_run: PLAIN_RUN,
        }
    }

    /// Whether GRO is on on the socket.
    pub fn is_on(&self) -> bool {
        matches!(self.state, State::On { .. })
    }

    /// How a receive of at most `want` datagrams is made.
    pub fn next_receive(&self, want: usize) -> ReceiveWay {
        match self.state {
            State::Suspect { .. } => ReceiveWay::Checked,
            State::Off if want == 1 => ReceiveWay::Plain,
            _ => ReceiveWay::WithSegments,
        }
    }

    /// A checked receive found the queue empty; `now` is read only then. Once that happens
    /// [`SUSPECT_FOR`] or more after the switch off, no run can be queued any more.
    pub fn found_empty(&mut self, now: impl FnOnce() -> Instant) {
        if let State::Suspect { until } = self.state {
            if now() >= until {
                self.state = State::Off;
            }
        }
    }

    /// A receive that asked for `asked` datagrams got `got` (counting each datagram of a
    /// run), `runs` of them GSO runs of more than one; returns the switch to make, if any.
    pub fn received(&mut self, asked: usize, got: usize, runs: usize) -> Option<GroSwitch> {
        if !self.capable {
            return None;
        }
        let burst = got >= BURST || runs > 0;
        match &mut self.state {
            State::On { plain_in_a_row } if burst => {
                *plain_in_a_row = 0;
                None
            }
            State::On { plain_in_a_row } => {
                if asked == 1 && got == 1 {
                    *plain_in_a_row += 1;
                    if *plain_in_a_row >= self.plain_run {
                        return Some(GroSwitch::Off);
                    }
                }
                None
            }
            _ if burst => Some(GroSwitch::On),
            _ => None,
        }
    }

    /// A checked receive found a datagram that is not one whole packet: GRO goes back on
    /// before it is received.
    pub fn check_failed(&self) -> Option<GroSwitch> {
        matches!(self.state, State::Suspect { .. }).then_some(GroSwitch::On)
    }

    /// The receiver made `switch` at `now`; `ok` if the socket took it.
    pub fn switched(&mut self, switch: GroSwitch, ok: bool, now: Instant) {
        match (switch, ok) {
            (GroSwitch::Off, true) => {
                self.state = State::Suspect {
                    until: now + SUSPECT_FOR,
                }
            }
            (GroSwitch::On, true) => {
                self.plain_run = (self.plain_run * 2).min(PLAIN_RUN_MAX);
                self.state = State::On { plain_in_a_row: 0 };
            }
            // GRO could not be turned off: it stays on, and is not turned off again.
            (GroSwitch::Off, false) => {
                self.capable = false;
                self.state = State::On { plain_in_a_row: 0 };
            }
            // Nor back on: the socket stays as it is, and every receive stays checked until
            // the run has surely gone (then plain: nothing can coalesce any more).
            (GroSwitch::On, false) => self.capable = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `receives` one-datagram receives of one plain datagram each; the switches asked.
    fn ping_pong(mode: &mut GroMode, receives: u32) -> Vec<GroSwitch> {
        (0..receives)
            .filter_map(|_| mode.received(1, 1, 0))
            .collect()
    }

    /// GRO turned off at `t0`, and the queue found empty once the suspect time is over.
    fn off_and_settled(mode: &mut GroMode, t0: Instant) {
        mode.switched(GroSwitch::Off, true, t0);
        mode.found_empty(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
    }

    #[test]
    fn single_datagrams_one_at_a_time_turn_gro_off_after_the_run() {
        let mut mode = GroMode::new(true);
        assert!(ping_pong(&mut mode, PLAIN_RUN - 1).is_empty());
        assert!(mode.is_on());
        assert_eq!(mode.next_receive(1), ReceiveWay::WithSegments);
        mode.found_empty(|| unreachable!("no clock read while GRO is on"));
        assert_eq!(mode.received(1, 1, 0), Some(GroSwitch::Off));
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
        mode.found_empty(|| t0 + SUSPECT_FOR / 2);
        assert_eq!(mode.next_receive(1), ReceiveWay::Checked);
        assert_eq!(mode.check_failed(), Some(GroSwitch::On));
        // However late the receiver looks, what is queued is checked until it found none.
        assert_eq!(mode.next_receive(1), ReceiveWay::Checked);
        mode.found_empty(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        // Settled: batches are plain recvmmsgs, no clock read, and nothing to check.
        assert_eq!(mode.next_receive(64), ReceiveWay::WithSegments);
        mode.found_empty(|| unreachable!("no clock read once settled"));
        assert_eq!(mode.check_failed(), None);
    }

    #[test]
    fn a_burst_or_a_run_turns_gro_back_on() {
        for (got, runs) in [(BURST, 0), (1, 1)] {
            let mut mode = GroMode::new(true);
            off_and_settled(&mut mode, Instant::now());
            assert_eq!(mode.received(64, got, runs), Some(GroSwitch::On));
            mode.switched(GroSwitch::On, true, Instant::now());
            assert!(mode.is_on());
            assert_eq!(mode.next_receive(1), ReceiveWay::WithSegments);
        }
    }

    #[test]
    fn a_request_with_its_ack_or_a_run_breaks_the_count() {
        let mut mode = GroMode::new(true);
        assert!(ping_pong(&mut mode, PLAIN_RUN - 1).is_empty());
        // A GRO run (a SEND and the ACK sent with it): the count starts again.
        assert_eq!(mode.received(1, 2, 1), None);
        assert!(ping_pong(&mut mode, PLAIN_RUN - 1).is_empty());
        assert_eq!(mode.received(1, 1, 0), Some(GroSwitch::Off));
        // With GRO off the pair arrives as two datagrams: under a burst, no switch.
        off_and_settled(&mut mode, Instant::now());
        assert_eq!(mode.received(1, 1, 0), None);
        assert_eq!(mode.received(64, BURST - 1, 0), None);
    }

    #[test]
    fn each_return_of_gro_doubles_the_next_run() {
        let mut mode = GroMode::new(true);
        let mut run = PLAIN_RUN;
        for _ in 0..20 {
            assert_eq!(ping_pong(&mut mode, run), vec![GroSwitch::Off]);
            off_and_settled(&mut mode, Instant::now());
            assert_eq!(mode.received(64, BURST, 0), Some(GroSwitch::On));
            mode.switched(GroSwitch::On, true, Instant::now());
            run = (run * 2).min(PLAIN_RUN_MAX);
            assert!(ping_pong(&mut mode, run - 1).is_empty());
            assert_eq!(
                mode.received(64, BURST, 0),
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
            assert_eq!(mode.received(64, 1, 0), None);
        }
        assert!(mode.is_on());
    }

    #[test]
    fn a_socket_without_gro_always_receives_plainly_and_never_switches() {
        let mut mode = GroMode::new(false);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        assert!(ping_pong(&mut mode, 10 * PLAIN_RUN).is_empty());
        assert_eq!(mode.received(64, 64, 3), None);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
    }

    #[test]
    fn a_refused_switch_off_leaves_gro_on_for_good() {
        let mut mode = GroMode::new(true);
        assert_eq!(ping_pong(&mut mode, PLAIN_RUN), vec![GroSwitch::Off]);
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
        mode.found_empty(|| t0 + SUSPECT_FOR);
        assert_eq!(mode.next_receive(1), ReceiveWay::Plain);
        assert_eq!(mode.received(64, 64, 0), None, "no more switches");
    }
}
