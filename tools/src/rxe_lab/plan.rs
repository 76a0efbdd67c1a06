//! Which cases a lab run holds: the full matrix (every scenario x both directions x the
//! path MTUs asked for) and the CI subset of it, with the reason each cut is safe. The
//! CI subset exists for issue 26's time budget: the full matrix takes about 18 minutes of
//! a 2-core machine, the subset about a third of that (docs/rxe-lab.md, "What the CI stage
//! runs and why").

use crate::ibv_pingpong::IbvKind;
use crate::perf::TestKind;

use super::cm_cases::CmCase;
use super::dropin_cm_cases::DropInCm;
use super::error_cases::ErrorCase;
use super::perf_cases::{self, PerfTest};
use super::perftest_cases::PerftestBw;
use super::pingpong_cases;
use super::scenario::{Direction, Transport, Verb};

/// One scenario to run.
pub struct Case {
    /// Name in the results table (and in `--only`).
    pub scenario: String,
    /// Who requests.
    pub direction: Direction,
    /// Path MTU.
    pub mtu: u32,
    /// What runs.
    pub kind: CaseKind,
}

/// What a case runs.
pub enum CaseKind {
    /// A verb on RC or UC QPs (verb_cases).
    Verb(Transport, Verb),
    /// A UD verb (ud_cases).
    Ud(Verb),
    /// SEND_WITH_INV through a memory window (inv_cases).
    SendInv,
    /// rxe senders into a softverbs SRQ (srq_cases).
    Srq,
    /// A responder that says no (error_cases).
    Error(ErrorCase),
    /// An unmodified ibv_*_pingpong with messages of this size (pingpong_cases).
    Pingpong(IbvKind, usize),
    /// perftest against softverbs' side channel (perftest_cases).
    Perftest(PerftestBw),
    /// `softverbs perf` against perftest (perf_cases).
    Perf(PerfTest),
    /// ibv_rc_pingpong through the drop-in libibverbs.so.1 against rxe's (dropin_cases).
    DropIn,
    /// The connection manager against the kernel's rdma_cm (cm_cases).
    Cm(CmCase),
    /// Unmodified rdma_cm programs through the drop-in librdmacm.so.1 against the
    /// kernel's (dropin_cm_cases).
    DropInCm(DropInCm),
    /// Two host processes sharing the lab device, each against its own rxe peer at once
    /// (shared_cases).
    SharedDevice,
}

/// Every case at the path MTUs `mtus`, in table order.
pub fn full(mtus: &[u32]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &mtu in mtus {
        for direction in Direction::BOTH {
            let mut push = |scenario: String, kind: CaseKind| {
                cases.push(Case {
                    scenario,
                    direction,
                    mtu,
                    kind,
                })
            };
            for kind in pingpong_cases::KINDS {
                for size in pingpong_cases::sizes(kind, mtu as usize) {
                    push(
                        format!("{} {size} B", kind.program()),
                        CaseKind::Pingpong(kind, size),
                    );
                }
            }
            for transport in [Transport::Rc, Transport::Uc] {
                for &verb in transport.verbs() {
                    push(
                        format!("{} {}", transport.name(), verb.name()),
                        CaseKind::Verb(transport, verb),
                    );
                }
            }
            push("RC SEND_INV".into(), CaseKind::SendInv);
            for &verb in Transport::Ud.verbs() {
                push(format!("UD {}", verb.name()), CaseKind::Ud(verb));
            }
            if direction == Direction::RxeToSoftverbs {
                push("RC SEND into SRQ".into(), CaseKind::Srq);
            }
            for kind in PerftestBw::ALL {
                push(kind.program().to_string(), CaseKind::Perftest(kind));
            }
            for kind in perf_cases::KINDS.into_iter().chain(perf_cases::SWEEPS) {
                push(kind.scenario(), CaseKind::Perf(kind));
            }
            for error in ErrorCase::ALL {
                push(error.name().to_string(), CaseKind::Error(error));
            }
            push(
                format!("drop-in ibv_rc_pingpong {} B", super::dropin_cases::SIZE),
                CaseKind::DropIn,
            );
            // Both processes are clients (softverbs sends first): what is shared is the
            // host's device, whichever side serves.
            if direction == Direction::SoftverbsToRxe {
                push(
                    format!(
                        "2 processes on one device: ibv_rc_pingpong {} B",
                        super::shared_cases::size(mtu)
                    ),
                    CaseKind::SharedDevice,
                );
            }
        }
    }
    // rdma_cm picks the path MTU itself (4096 from the lab netdevs' 9000 bytes, on both
    // sides), so the CM cases run once per direction whatever MTUs were asked for.
    for direction in Direction::BOTH {
        for cm in CmCase::ALL
            .into_iter()
            .filter(|c| c.directions().contains(&direction))
        {
            cases.push(Case {
                scenario: cm.name(),
                direction,
                mtu: CM_PATH_MTU,
                kind: CaseKind::Cm(cm),
            });
        }
        for dropin in DropInCm::ALL
            .into_iter()
            .filter(|c| c.directions().contains(&direction))
        {
            cases.push(Case {
                scenario: dropin.name(),
                direction,
                mtu: CM_PATH_MTU,
                kind: CaseKind::DropInCm(dropin),
            });
        }
    }
    cases
}

/// The path MTU rdma_cm sets on the lab link (the REQ's and REP's path MTU field).
const CM_PATH_MTU: u32 = 4096;

/// The smallest path MTU of the full matrix; cases whose bytes do not depend on the path
/// MTU run at this one only.
const BASE_MTU: u32 = 1024;

/// Whether CI runs `case` (the rest runs with `--full`). The rules, each safe because what
/// it leaves out is proven by a case that stays:
///
/// - Single-packet messages look the same at every path MTU: 8-byte atomics (verbs and
///   perftest), the 64-byte latency runs, the bad-rkey WRITE and the out-of-bounds READ,
///   and 1-byte ping-pongs run at the base MTU only; so does the drop-in ping-pong, which
///   proves the C library's path, not the transport's. Every multi-packet case (MTU-1, MTU,
///   MTU+1, 64 KiB, 1 MiB) still runs at both MTUs.
/// - The `-a` sweeps (2 B to 8 MiB; more than 60% of the full matrix's time) prove that
///   both sides run perftest's exchanges between sizes, which is the same code at any MTU;
///   each family (bandwidth, latency) has softverbs as client and as server. Each sweep
///   runs once, at MTU 4096 (fewer packets for the same bytes), except write_lat, which
///   runs where issue 26's mid-WRITE stall showed: softverbs -> rxe at MTU 1024. With
///   write_bw rxe -> softverbs at MTU 4096 (the stall's other case) a long rxe WRITE is
///   stalled upon in each direction.
/// - The ping-pongs' sizes past MTU+1 at MTU 4096 (1 MiB RC, 64 KiB UC and SRQ) repeat
///   the multi-packet paths of MTU+1 at a larger count; they run at MTU 1024, and the RC/UC
///   verb cases still move 1 MiB at both MTUs.
pub fn in_ci(case: &Case) -> bool {
    let base = case.mtu == BASE_MTU || !case.mtu_independent();
    match &case.kind {
        CaseKind::Perf(test) if test.sweep => sweep_point(test.test) == (case.direction, case.mtu),
        CaseKind::Pingpong(_, size) => {
            base && (case.mtu == BASE_MTU || *size <= case.mtu as usize + 1)
        }
        CaseKind::Cm(cm) => cm.in_ci(),
        CaseKind::DropInCm(case) => case.in_ci(),
        _ => base,
    }
}

impl Case {
    /// Whether every message of the case fits one packet at any path MTU, so that the
    /// case's bytes do not depend on the MTU.
    fn mtu_independent(&self) -> bool {
        match &self.kind {
            CaseKind::Verb(_, Verb::CmpSwap | Verb::FetchAdd) => true,
            CaseKind::Error(e) => *e != ErrorCase::Rnr,
            CaseKind::Perf(test) => !test.sweep && test.size <= 64,
            CaseKind::Pingpong(_, size) => *size == 1,
            // What it proves is the drop-in library's ABI path; the transport under it is
            // the one the other cases cover at both MTUs.
            CaseKind::DropIn => true,
            _ => false,
        }
    }
}

/// Where CI runs the `-a` sweep of `test` (see [`in_ci`]).
fn sweep_point(test: TestKind) -> (Direction, u32) {
    use Direction::{RxeToSoftverbs as RxeReq, SoftverbsToRxe as SvReq};
    match test {
        // The two of issue 26's stall, one per direction.
        TestKind::WriteLat => (SvReq, 1024),
        TestKind::WriteBw => (RxeReq, 4096),
        // softverbs as bandwidth client for these two, server for write_bw above.
        TestKind::SendBw | TestKind::ReadBw => (SvReq, 4096),
        // softverbs as latency server for these two, client for write_lat above.
        _ => (RxeReq, 4096),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(cases: &[Case], f: impl Fn(&Case) -> bool) -> usize {
        cases.iter().filter(|c| f(c)).count()
    }

    #[test]
    fn ci_keeps_a_write_sweep_per_direction_and_every_scenario() {
        let all = full(&[1024, 4096]);
        let ci: Vec<&Case> = all.iter().filter(|c| in_ci(c)).collect();
        assert!(ci.len() < all.len() && ci.len() > all.len() / 2);
        for direction in Direction::BOTH {
            assert!(ci.iter().any(|c| c.direction == direction
                && matches!(&c.kind, CaseKind::Perf(t) if t.sweep
                    && matches!(t.test, TestKind::WriteLat | TestKind::WriteBw))));
        }
        // Every sweep once, every scenario name at least once.
        let sweeps = count(&all, |c| {
            in_ci(c) && matches!(&c.kind, CaseKind::Perf(t) if t.sweep)
        });
        assert_eq!(sweeps, perf_cases::SWEEPS.len());
        for c in all
            .iter()
            .filter(|c| !matches!(c.kind, CaseKind::Cm(_) | CaseKind::DropInCm(_)))
        {
            assert!(
                ci.iter().any(|k| k.scenario == c.scenario),
                "{} not in CI",
                c.scenario
            );
        }
        // Multi-packet verb cases stay at both MTUs and in both directions.
        let rc_write = count(&all, |c| in_ci(c) && c.scenario == "RC WRITE");
        assert_eq!(rc_write, 4);
    }

    #[test]
    fn cm_cases_run_once_per_direction_and_ci_keeps_each_program_in_both_roles() {
        let all = full(&[1024, 4096]);
        let cm: Vec<&Case> = all
            .iter()
            .filter(|c| matches!(c.kind, CaseKind::Cm(_)))
            .collect();
        assert_eq!(cm.len(), 2 * CmCase::ALL.len() - 1);
        assert!(cm.iter().all(|c| c.mtu == CM_PATH_MTU));
        for program in ["CM rping", "CM ucmatose", "CM udaddy", "CM REJ"] {
            for direction in Direction::BOTH {
                assert!(
                    cm.iter().any(|c| in_ci(c)
                        && c.direction == direction
                        && c.scenario.starts_with(program)),
                    "{program} {direction:?} not in CI"
                );
            }
        }
        assert!(count(&all, |c| in_ci(c) && matches!(c.kind, CaseKind::Cm(_))) < cm.len());
    }
}
