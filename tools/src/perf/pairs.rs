//! `--pairs N`: N independent RC pairs in this process, each on two devices of its own,
//! run a latency test at the same time, as the threads of a `cargo test` run do; one pair
//! alone runs first in the same command. Fair sharing shows as the worst pair's median
//! against the lone pair's, throughput as the round trips per second of all pairs together.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;
use std::time::Instant;

use softverbs::{ChannelNetwork, DeviceConfig, LinkConfig, VerbsError, VerbsResult};

use super::args::{LinkKind, Settings, MAX_PAIRS};
use super::report::{self, LatResult};
use super::results::Row;
use super::run::{loopback_pair, PairRun};

/// The devices of pair `i`: `perf-pair<i>s` on 127.27.<i>.1 and `perf-pair<i>c` on
/// 127.27.<i>.2, a 127.x range of their own so that the command runs beside programs on the
/// default devices. Registered once per process, for the largest count asked.
fn pair_devices(link: LinkKind, count: u32) -> VerbsResult<Vec<(String, String)>> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let name = |i: u32, side: char| format!("perf-pair{i}{side}");
    let done = DONE.get_or_init(|| {
        let net = ChannelNetwork::new();
        for i in 0..MAX_PAIRS {
            for (side, host) in [('s', 1u8), ('c', 2u8)] {
                let ip = IpAddr::V4(Ipv4Addr::new(127, 27, i as u8, host));
                let mut config = DeviceConfig::new(name(i, side), ip);
                if link == LinkKind::Inproc {
                    config.link = LinkConfig::Channel(net.clone());
                }
                softverbs::register_device(config).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    });
    done.clone().map_err(VerbsError::inval)?;
    Ok((0..count).map(|i| (name(i, 's'), name(i, 'c'))).collect())
}

/// The latency result of a pair's single size, with the bytes both sides verified.
fn latency_of(run: &PairRun) -> VerbsResult<LatResult> {
    match run.rows.as_slice() {
        [Row::Lat(r)] => {
            let mut r = r.clone();
            r.verified_bytes += run.served.iter().map(|x| x.verified_bytes).sum::<u64>();
            Ok(r)
        }
        _ => Err(VerbsError::inval(
            "--pairs measures one size of a latency test",
        )),
    }
}

/// What the command measured.
struct PairsReport {
    alone: LatResult,
    alone_secs: f64,
    together: Vec<LatResult>,
    together_secs: f64,
}

impl PairsReport {
    /// Round trips per second of one pair alone.
    fn alone_rate(&self) -> f64 {
        self.alone.iterations as f64 / self.alone_secs
    }

    /// Round trips per second of all pairs together.
    fn together_rate(&self) -> f64 {
        let all: u64 = self.together.iter().map(|r| r.iterations).sum();
        all as f64 / self.together_secs
    }

    /// The pairs' medians, ascending.
    fn medians(&self) -> Vec<f64> {
        let mut m: Vec<f64> = self.together.iter().map(|r| r.median_us).collect();
        m.sort_by(f64::total_cmp);
        m
    }

    /// The worst pair's median over the lone pair's.
    fn worst_over_alone(&self) -> f64 {
        self.medians().last().copied().unwrap_or(0.0) / self.alone.median_us
    }
}

/// Runs one pair alone, then every pair at once, and prints both.
pub fn run(s: &Settings) -> VerbsResult<()> {
    let devices = pair_devices(s.link, s.pairs)?;
    let started = Instant::now();
    let (server, client) = &devices[0];
    let alone = latency_of(&loopback_pair(s, server, client)?)?;
    let alone_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let runs: Vec<VerbsResult<LatResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .map(|(server, client)| {
                scope.spawn(move || latency_of(&loopback_pair(s, server, client)?))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(VerbsError::inval("a pair's thread panicked")))
            })
            .collect()
    });
    let together_secs = started.elapsed().as_secs_f64();
    let together = runs.into_iter().collect::<VerbsResult<Vec<_>>>()?;
    print(
        s,
        &PairsReport {
            alone,
            alone_secs,
            together,
            together_secs,
        },
    );
    Ok(())
}

fn print(s: &Settings, r: &PairsReport) {
    let medians = r.medians();
    if s.json {
        let each: Vec<String> = r
            .together
            .iter()
            .map(|x| report::lat_json(x, None))
            .collect();
        println!(
            "{{\"test\":{},\"pairs\":{},\"alone\":{},\"alone_round_trips_per_s\":{},\
             \"together\":[{}],\"together_round_trips_per_s\":{},\"worst_median_over_alone\":{},{}}}",
            report::json_str(s.test.name()),
            s.pairs,
            report::lat_json(&r.alone, None),
            report::json_num(r.alone_rate()),
            each.join(","),
            report::json_num(r.together_rate()),
            report::json_num(r.worst_over_alone()),
            super::print::load_json(s)
        );
        return;
    }
    println!(
        "{}, pairs {}",
        super::print::header(s, "perf-pair<i>s/c", link_name(s.link)),
        s.pairs
    );
    println!(
        "    one pair alone: median {:.2} us, t_99 {:.2} us, {:.0} round trips/s",
        r.alone.median_us,
        r.alone.p99_us,
        r.alone_rate()
    );
    println!(
        "    {} pairs at once: {:.0} round trips/s together ({:.2}x one pair alone); pair medians best {:.2} us, middle {:.2} us, worst {:.2} us; worst / alone {:.2}x",
        s.pairs,
        r.together_rate(),
        r.together_rate() / r.alone_rate(),
        medians.first().copied().unwrap_or(0.0),
        medians[medians.len() / 2],
        medians.last().copied().unwrap_or(0.0),
        r.worst_over_alone()
    );
    let verified: u64 =
        r.together.iter().map(|x| x.verified_bytes).sum::<u64>() + r.alone.verified_bytes;
    println!("    verified on both sides: {verified} bytes, every completion successful");
}

fn link_name(link: LinkKind) -> &'static str {
    match link {
        LinkKind::Udp => "udp",
        LinkKind::Inproc => "inproc",
    }
}
