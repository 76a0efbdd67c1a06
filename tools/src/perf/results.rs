//! What a `softverbs perf` run measured, per size and per round, before it is printed:
//! the client's and the server's rows, the process memory, and the reduction of several
//! rounds to their median.

use super::report::{Baseline, BwResult, LatResult};

/// What the client measured for one size.
#[derive(Debug, Clone)]
pub enum Row {
    /// A bandwidth test.
    Bw(BwResult),
    /// A latency test.
    Lat(LatResult),
}

impl Row {
    /// The message size.
    pub fn size(&self) -> usize {
        match self {
            Row::Bw(r) => r.bytes,
            Row::Lat(r) => r.bytes,
        }
    }
}

/// What the server saw for one size.
#[derive(Debug, Clone, Default)]
pub struct ServerRow {
    /// The message size.
    pub size: usize,
    /// The client's report, for the tests that have one: size, iterations and three
    /// figures.
    pub report: Option<(u64, u64, f64, f64, f64)>,
    /// Bytes the server verified.
    pub verified_bytes: u64,
    /// Messages the server received or answered.
    pub handled: u64,
}

/// Process memory around connecting: before anything was opened, and with every QP of
/// both sides connected and idle (the one-process mode).
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub before: Option<u64>,
    pub connected: Option<u64>,
}

/// What one `--loopback` round measured: the test, then the baseline of every size if
/// asked for.
pub struct Round {
    pub client_device: String,
    pub rows: Vec<Row>,
    pub served: Vec<ServerRow>,
    pub baselines: Vec<Baseline>,
    pub memory: Memory,
}

/// What the client prints: its rows, and in one process what the server saw, the
/// baselines and the rounds.
#[derive(Default)]
pub struct ClientReport {
    pub device: String,
    pub rows: Vec<Row>,
    pub served: Vec<ServerRow>,
    pub baselines: Vec<Baseline>,
    pub memory: Memory,
    /// Per size, the ratio of each round in the order they ran (empty without a baseline).
    pub round_ratios: Vec<Vec<f64>>,
    /// The server ran in this process (`--loopback`), so `served` is all it checked.
    pub server_here: bool,
}

impl ClientReport {
    /// The rounds of a run reduced to one result per size: the round whose ratio to its own
    /// baseline is the median (the lower one of an even count), with every round's ratio.
    pub fn median_round(rounds: Vec<Round>) -> ClientReport {
        let first = &rounds[0];
        let mut out = ClientReport {
            device: first.client_device.clone(),
            // The first round opened the devices: later ones reuse what it left.
            memory: first.memory,
            server_here: true,
            ..ClientReport::default()
        };
        for i in 0..first.rows.len() {
            let ratios: Vec<Option<f64>> = rounds
                .iter()
                .map(|r| r.rows.get(i).and_then(|row| ratio(row, r.baselines.get(i))))
                .collect();
            let mut order: Vec<usize> = (0..rounds.len()).collect();
            order.sort_by(|&a, &b| {
                let key = |k: usize| ratios[k].unwrap_or(f64::INFINITY);
                key(a).total_cmp(&key(b))
            });
            let pick = &rounds[order[(order.len() - 1) / 2]];
            out.rows.extend(pick.rows.get(i).cloned());
            let size = pick.rows.get(i).map(Row::size);
            out.served
                .extend(pick.served.iter().filter(|r| Some(r.size) == size).cloned());
            out.baselines.extend(pick.baselines.get(i).cloned());
            out.round_ratios
                .push(ratios.into_iter().flatten().collect());
        }
        out
    }
}

/// The ratio of a result to its baseline: bandwidth share, or latency multiple.
pub fn ratio(row: &Row, b: Option<&Baseline>) -> Option<f64> {
    let b = b?;
    match row {
        // Without GSO the verb's datagrams were not measured: the equal ones stand in.
        Row::Bw(r) if b.bw_mbs > 0.0 => Some(r.avg_mbs / b.bw_mbs),
        Row::Bw(r) if b.uniform_mbs > 0.0 => Some(r.avg_mbs / b.uniform_mbs),
        Row::Lat(r) if b.half_rtt_us > 0.0 => {
            let base = if r.half_round_trip {
                b.half_rtt_us
            } else {
                2.0 * b.half_rtt_us
            };
            Some(r.median_us / base)
        }
        _ => None,
    }
}
