//! The side-channel exchanges around each test, as perftest's programs run them, so that
//! either side of every test can face unmodified perftest (perftest 4.5 / 6.x sources:
//! write_bw.c, read_bw.c, atomic_bw.c, send_bw.c, send_lat.c, write_lat.c, read_lat.c,
//! atomic_lat.c).
//!
//! Every program starts alike: setup and keys (the first keys exchange), then a second
//! keys exchange (before or after connecting the QP; the peer cannot tell). Per size they
//! then differ:
//!
//! | test | before the test | after the test | at the end |
//! |---|---|---|---|
//! | write_bw, read_bw, atomic_bw | 1 barrier | barrier, client's report | closing barrier, "done" |
//! | send_bw, send_lat | 2 barriers (receives are posted) | nothing | closing barrier, "done" |
//! | read_lat, atomic_lat | 2 barriers | nothing | closing barrier, "done" |
//! | write_lat | 2 barriers | nothing | the socket closes, nothing more |
//!
//! Where nothing follows a test, the server learns that the client is done by its count
//! (`-n`, which both sides must share, as with perftest), or, under `-D`, by the client's
//! next exchange arriving.

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
    /// A second barrier right before the test (perftest's "receives are posted" /
    /// "after RTR" handshake).
    pub second_barrier: bool,
    /// A barrier and the client's report after the test.
    pub report: bool,
    /// How the run ends.
    pub ending: Ending,
}

impl Sequence {
    /// The sequence of `test` (the UDP baseline has no side channel; it gets the bandwidth
    /// tests').
    pub fn of(test: TestKind) -> Sequence {
        use TestKind::*;
        match test {
            WriteBw | ReadBw | AtomicBw | UdpBaseline => Sequence {
                second_barrier: false,
                report: true,
                ending: Ending::Close,
            },
            SendBw | SendLat | ReadLat | AtomicLat => Sequence {
                second_barrier: true,
                report: false,
                ending: Ending::Close,
            },
            WriteLat => Sequence {
                second_barrier: true,
                report: false,
                ending: Ending::Hangup,
            },
        }
    }
}

impl Sequence {
    /// The barriers before a test, keyed by `me`.
    pub fn before_test(&self, comm: &mut PerftestComm, me: &PerftestKeys) -> VerbsResult<()> {
        comm.barrier(me, "ready")?;
        if self.second_barrier {
            comm.barrier(me, "go")?;
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
    fn only_the_bandwidth_tests_of_one_sided_verbs_report_and_only_write_lat_hangs_up() {
        use TestKind::*;
        let all = [
            WriteBw, ReadBw, AtomicBw, SendBw, SendLat, ReadLat, AtomicLat, WriteLat,
        ];
        let reporting: Vec<_> = all.iter().filter(|t| Sequence::of(**t).report).collect();
        assert_eq!(reporting, [&WriteBw, &ReadBw, &AtomicBw]);
        for t in all {
            let seq = Sequence::of(t);
            assert_eq!(seq.second_barrier, !seq.report, "{t:?}");
            assert_eq!(seq.ending == Ending::Hangup, t == WriteLat, "{t:?}");
        }
    }
}
