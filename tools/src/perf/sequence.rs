//! The side-channel exchanges around each test, as perftest's programs run them, so that
//! either side of every test can face unmodified perftest (perftest 4.5 / 6.x sources:
//! write_bw.c, read_bw.c, atomic_bw.c, send_bw.c, send_lat.c, write_lat.c, read_lat.c,
//! atomic_lat.c).
//!
//! Every program starts alike: setup and keys (the first keys exchange), then a second
//! keys exchange (before or after connecting the QP; the peer cannot tell), then barriers
//! once before the first size. Then, per size and after the last (`-a` runs perftest's
//! sweep loop, whose exchanges differ from a one-size run):
//!
//! | test | once before | before each size | after each size of a sweep | after the last size |
//! |---|---|---|---|---|
//! | write_bw, read_bw, atomic_bw | 1 barrier | - | - | barrier, client's report; closing barrier, "done" |
//! | send_bw | 1 barrier | 1 barrier (receives are posted) | 1 barrier | closing barrier, "done" |
//! | send_lat | 1 barrier | 1 barrier (receives are posted) | - | closing barrier, "done" |
//! | read_lat, atomic_lat | 2 barriers | - | - | closing barrier, "done" |
//! | write_lat | 2 barriers | - | - | the socket closes, nothing more |
//!
//! Where no barrier separates sizes, the sizes follow each other at once: the server
//! prepares its buffer once, for the whole sweep, and learns that the client is done by its
//! count (`-n`, which both sides must share, as with perftest), by the report, or, under
//! `-D`, by the client's next exchange arriving.

use softverbs::VerbsResult;

use super::args::TestKind;
use crate::perftest_oob::{PerftestComm, PerftestKeys};

/// How a run ends on the side channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A closing barrier, then `"done"`.
    Close,
    /// The socket just closes (ib_write_lat).
    Hangup,
}

/// The exchanges of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// Barriers once, before the first size (perftest's handshake after RTR, and for the
    /// latency tests one more).
    pub setup_barriers: u8,
    /// A barrier before each size (perftest's "receives are posted" handshake).
    pub barrier_before_each: bool,
    /// In a sweep, a barrier after each size as well (send_bw's loop).
    pub barrier_after_each_in_sweep: bool,
    /// After the last size, a barrier and the client's report of it.
    pub report: bool,
    /// How the run ends.
    pub ending: Ending,
}

impl Sequence {
    /// The sequence of `test` (the UDP baseline has no side channel; it gets the bandwidth
    /// tests').
    pub fn of(test: TestKind) -> Sequence {
        use TestKind::*;
        let plain = Sequence {
            setup_barriers: 1,
            barrier_before_each: false,
            barrier_after_each_in_sweep: false,
            report: false,
            ending: Ending::Close,
        };
        match test {
            WriteBw | ReadBw | AtomicBw | UdpBaseline => Sequence {
                report: true,
                ..plain
            },
            SendBw => Sequence {
                barrier_before_each: true,
                barrier_after_each_in_sweep: true,
                ..plain
            },
            SendLat => Sequence {
                barrier_before_each: true,
                ..plain
            },
            ReadLat | AtomicLat => Sequence {
                setup_barriers: 2,
                ..plain
            },
            WriteLat => Sequence {
                setup_barriers: 2,
                ending: Ending::Hangup,
                ..plain
            },
        }
    }

    /// The barriers once before the first size, keyed by `me`.
    pub fn setup(&self, comm: &mut PerftestComm, me: &PerftestKeys) -> VerbsResult<()> {
        for i in 0..self.setup_barriers {
            comm.barrier(me, if i == 0 { "ready" } else { "go" })?;
        }
        Ok(())
    }

    /// The barrier before a size, if the test has one.
    pub fn before_size(&self, comm: &mut PerftestComm, me: &PerftestKeys) -> VerbsResult<()> {
        if self.barrier_before_each {
            comm.barrier(me, "receives posted")?;
        }
        Ok(())
    }

    /// The barrier after a size, if the test has one in a `sweep`.
    pub fn after_size(
        &self,
        comm: &mut PerftestComm,
        me: &PerftestKeys,
        sweep: bool,
    ) -> VerbsResult<()> {
        if sweep && self.barrier_after_each_in_sweep {
            comm.barrier(me, "size done")?;
        }
        Ok(())
    }

    /// Ends the run on the side channel.
    pub fn end(&self, comm: PerftestComm, me: &PerftestKeys) -> VerbsResult<()> {
        match self.ending {
            Ending::Close => comm.close(me),
            Ending::Hangup => {
                drop(comm);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_are_perftests_for_one_size_and_for_a_sweep() {
        use TestKind::*;
        // (test, barriers before the first size, between two sizes of a sweep), counted in
        // perftest 4.5's programs: ctx_hand_shake calls after the two keys exchanges.
        let expected = [
            (WriteBw, 1, 0),
            (ReadBw, 1, 0),
            (AtomicBw, 1, 0),
            (SendBw, 2, 2),
            (SendLat, 2, 1),
            (ReadLat, 2, 0),
            (AtomicLat, 2, 0),
            (WriteLat, 2, 0),
        ];
        for (t, first, between) in expected {
            let seq = Sequence::of(t);
            let before_first = seq.setup_barriers + u8::from(seq.barrier_before_each);
            let between_sizes =
                u8::from(seq.barrier_before_each) + u8::from(seq.barrier_after_each_in_sweep);
            assert_eq!(before_first, first, "{t:?}");
            assert_eq!(between_sizes, between, "{t:?}");
            assert_eq!(
                seq.report,
                matches!(t, WriteBw | ReadBw | AtomicBw),
                "{t:?}"
            );
            assert_eq!(seq.ending == Ending::Hangup, t == WriteLat, "{t:?}");
        }
    }
}
