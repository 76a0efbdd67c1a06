//! The vocabulary of the verb scenarios: which operation ([`Verb`]), on which transport
//! ([`Transport`]), one message of a scenario ([`Step`]), who requests ([`Direction`]) and
//! the message sizes of the matrix.

use softverbs::{AccessFlags, QpType};

/// The operation a scenario exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND
    Send,
    /// SEND_WITH_IMM
    SendImm,
    /// RDMA WRITE
    Write,
    /// RDMA WRITE_WITH_IMM
    WriteImm,
    /// RDMA READ
    Read,
    /// ATOMIC CMP_AND_SWP
    CmpSwap,
    /// ATOMIC FETCH_AND_ADD
    FetchAdd,
}

impl Verb {
    /// Every verb, in table order.
    pub const ALL: [Verb; 7] = [
        Verb::Send,
        Verb::SendImm,
        Verb::Write,
        Verb::WriteImm,
        Verb::Read,
        Verb::CmpSwap,
        Verb::FetchAdd,
    ];

    /// peer.py's name, also the scenario name.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Send => "SEND",
            Verb::SendImm => "SEND_IMM",
            Verb::Write => "WRITE",
            Verb::WriteImm => "WRITE_IMM",
            Verb::Read => "READ",
            Verb::CmpSwap => "CMP_SWAP",
            Verb::FetchAdd => "FETCH_ADD",
        }
    }

    /// Whether it carries immediate data.
    pub(super) fn has_imm(self) -> bool {
        matches!(self, Verb::SendImm | Verb::WriteImm)
    }
}

/// The transport of a scenario's QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Transport {
    /// Scenario name prefix; peer.py's QP type is its lower case.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
        }
    }

    pub(super) fn qp_type(self) -> QpType {
        match self {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        }
    }

    /// The verbs of the scenario table: UC has no READ and no atomics; UD sends only.
    pub fn verbs(self) -> &'static [Verb] {
        match self {
            Transport::Rc => &Verb::ALL,
            Transport::Uc => &Verb::ALL[..4],
            Transport::Ud => &Verb::ALL[..2],
        }
    }

    pub(super) fn access(self) -> AccessFlags {
        match self {
            Transport::Rc => {
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC
                    | AccessFlags::MW_BIND
            }
            Transport::Uc => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            Transport::Ud => AccessFlags::LOCAL_WRITE,
        }
    }
}

/// One message of a scenario: what it is, its size, and the values that identify it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) verb: Verb,
    pub(super) len: usize,
    pub(super) wr_id: u64,
    /// Pattern seed of its bytes.
    pub(super) seed: u64,
    pub(super) imm: u32,
}

/// Who sends the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// softverbs is the requester, rxe the responder.
    SoftverbsToRxe,
    /// rxe is the requester, softverbs the responder.
    RxeToSoftverbs,
}

impl Direction {
    /// Both directions.
    pub const BOTH: [Direction; 2] = [Direction::SoftverbsToRxe, Direction::RxeToSoftverbs];

    /// Column text of the results table.
    pub fn label(self) -> &'static str {
        match self {
            Direction::SoftverbsToRxe => "softverbs -> rxe",
            Direction::RxeToSoftverbs => "rxe -> softverbs",
        }
    }
}

/// The message sizes of the issue at path MTU `mtu`.
pub fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 1 << 20]
}
